"""Where ``tft translate``'s time goes: a TensorFlow profiler trace of a warm decoding pass,
summed by op type.

    python tools/bench/decode_profile.py --model runs/multi30k_small/model.keras \
        --vocab runs/multi30k_small/spm.model [--beam 4] [--limit 256] [--trace DIR] [--xla]

Runs :class:`tf_transformer.decoding.translator.Translator` (the path of ``tft translate``)
once untimed (tracing), once timed, then once under ``tf.profiler``; reads the trace back
(the ``.xplane.pb`` that TensorBoard's profile plugin shows) and prints the op types by
total time on the TensorFlow executor threads, with their share of the summed op time.
Ops run on the two cores at once, so the shares add up to the op time, not to the wall time.
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--vocab", required=True)
    p.add_argument("--config", default=None, help="config whose data section names the test set (default Multi30k)")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--limit", type=int, default=256, help="first N test sentences")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--xla", action="store_true")
    p.add_argument("--trace", default=None, help="keep the trace here (default: a temporary directory)")
    p.add_argument("--top", type=int, default=25)
    return p.parse_args(argv)


def op_times(logdir: str) -> tuple[dict, float]:
    """``({op type: seconds}, seconds of all ops)`` from the newest ``.xplane.pb`` under ``logdir``.

    Counts the TensorFlow op events of the executor threads (named ``op_name:OpType``),
    each with everything it ran inside (an op that runs an XLA program includes it, once),
    and none of the executor's own wrapper events (``ExecutorState::Process``, ``ParallelFor``).
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True), key=os.path.getmtime)
    if not paths:
        raise SystemExit(f"no .xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    with open(paths[-1], "rb") as f:
        space.ParseFromString(f.read())
    totals: dict = collections.defaultdict(float)
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            end = -1  # events inside a counted op (an XLA program it runs, say) are part of it
            for ev in sorted(line.events, key=lambda e: (e.offset_ps, -e.duration_ps)):
                name = names.get(ev.metadata_id, "")
                if ":" in name and not name.startswith("ExecutorState") and ev.offset_ps >= end:
                    totals[name.rsplit(":", 1)[-1]] += ev.duration_ps * 1e-12
                    end = ev.offset_ps + ev.duration_ps
    return dict(totals), sum(totals.values())


def main(argv=None):
    args = parse_args(argv)
    import tensorflow as tf

    from tf_transformer.config import Config, load_config
    from tf_transformer.data import read_parallel_text
    from tf_transformer.decoding.translator import Translator, load_tokenizer
    from tf_transformer.io import load_model

    cfg = load_config(args.config) if args.config else Config()
    sources, _ = read_parallel_text(cfg.data, "test")
    sources = sources[: args.limit]
    model = load_model(args.model)
    tok = load_tokenizer(args.vocab, model)
    tr = Translator(model, tok, beam_size=args.beam, alpha=args.alpha, batch_size=args.batch_size,
                    jit_compile=args.xla)
    start = time.perf_counter()
    tr.translate(sources)
    first = time.perf_counter() - start
    start = time.perf_counter()
    _, _, stats = tr.translate(sources)
    warm = time.perf_counter() - start
    logdir = args.trace or tempfile.mkdtemp(prefix="tft_decode_profile_")
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    tr.translate(sources)
    traced = time.perf_counter() - start
    tf.profiler.experimental.stop()
    totals, _ = op_times(logdir)
    total = sum(totals.values())
    print(f"decode_profile: {len(sources)} sentences, beam {args.beam}, batch {args.batch_size}, xla {args.xla}: "
          f"first pass {first:.2f} s, warm {warm:.2f} s ({len(sources) / warm:.1f} sent/s, "
          f"{stats.output_tokens} output tokens), traced {traced:.2f} s; op time {total:.2f} s; trace in {logdir}",
          file=sys.stderr)
    print("| op type | seconds | share of op time |")
    print("|---|---:|---:|")
    for name, sec in sorted(totals.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"| {name} | {sec:.3f} | {100 * sec / total:.1f}% |")


if __name__ == "__main__":
    main()
