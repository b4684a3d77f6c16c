"""Input-pipeline scaling: time to first batch, steady target tokens/s, per CPU-second, RSS.

    taskset -c 0   python tools/bench/input_scaling.py --vocab V --set data.source=text \\
        data.train_source=C/train.en data.train_target=C/train.de --seconds 60
    taskset -c 0,1 python tools/bench/input_scaling.py ...          # the same on two cores

Builds the training dataset exactly as ``tft train`` does (``make_dataset(cfg.data,
"train", tokenizer)``), times the start (config to first batch: file checks, statistics
pass or its cache, tracing, shuffle-buffer fill), skips ``--warmup`` more batches, then
counts real target tokens for ``--seconds`` (and the share of the padded slots that hold
real tokens, per side). It uses only ``load_config``, ``Tokenizer``
and ``make_dataset``, so it runs unchanged against older versions of the package (put
their checkout first on ``PYTHONPATH``) for before/after comparisons. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="multi30k_small")
    parser.add_argument("--set", dest="overrides", nargs="*", default=[])
    parser.add_argument("--vocab", required=True)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    start = time.time()
    cpu0 = time.process_time()
    import numpy as np

    from tf_transformer.config import load_config
    from tf_transformer.data import Tokenizer, make_dataset

    cfg = load_config(args.config, list(args.overrides) + [f"data.vocab_model={args.vocab}"])
    tok = Tokenizer(args.vocab)
    ds = make_dataset(cfg.data, "train", tok, training=True)
    it = iter(ds)
    next(it)
    first = time.time() - start
    for _ in range(args.warmup):
        next(it)
    t0, c0 = time.perf_counter(), time.process_time()
    tokens = batches = src_tokens = src_slots = tgt_slots = 0
    while time.perf_counter() - t0 < args.seconds:
        (src, _), tgt_out = next(it)
        tokens += int(np.count_nonzero(tgt_out.numpy()))
        src_tokens += int(np.count_nonzero(src.numpy()))
        src_slots += int(np.prod(src.shape))
        tgt_slots += int(np.prod(tgt_out.shape))
        batches += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({
        "label": args.label,
        "cores": len(os.sched_getaffinity(0)),
        "first_batch_s": round(first, 1),
        "startup_cpu_s": round(c0 - cpu0, 1),
        "target_tokens_per_s": round(tokens / wall),
        "target_tokens_per_cpu_s": round(tokens / cpu) if cpu > 0 else None,
        "cpu_per_wall": round(cpu / wall, 2),
        "batches": batches,
        "target_tokens_per_batch": round(tokens / max(batches, 1)),
        "slots_filled": {"source": round(src_tokens / max(src_slots, 1), 3),
                         "target": round(tokens / max(tgt_slots, 1), 3)},
        "max_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "load_avg": [round(x, 1) for x in os.getloadavg()],
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
