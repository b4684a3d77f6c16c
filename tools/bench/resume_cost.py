"""What exact resume costs: training throughput A/B against another source tree, and the
time a resumed run spends skipping the batches it has already trained on.

    python tools/bench/resume_cost.py ab --base /tmp/base-tree [--rounds 2] [--steps 40]
    python tools/bench/resume_cost.py skip --vocab runs/x/vocab.model [--batches 0,500,2000]

``ab``: the same short ``train()`` run (Multi30k, a d_model 64 model, dropout 0.1,
``data.cache``, backups every 10 updates so that backup writes are inside the timing)
once with this tree and once with ``--base`` on ``PYTHONPATH``, alternating, each in its
own process; prints target tokens/s inside training batches (``TrainResult``) and the
whole command's seconds for every run, then the medians.

``skip``: ``make_dataset(..., skip=N)`` on the ``multi30k_small`` training pipeline (the
vocabulary given, cached tokenized pairs): seconds until the first batch after the skip,
i.e. what positioning the stream adds to a resume after N micro-batches.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

RUN = r"""
import json, sys, time
t0 = time.time()
from tf_transformer.config import load_config
from tf_transformer.training import train
overrides = json.loads(sys.argv[2])
result = train(load_config("multi30k_small", overrides), model_dir=sys.argv[1], valid_data=False, verbose=0)
print(json.dumps({"tokens_per_second": result.tokens_per_second, "train_seconds": result.train_seconds,
                  "seconds": time.time() - t0, "final_step": result.final_step}))
"""


def _overrides(vocab: str, steps: int) -> list:
    return [f"data.vocab_model={vocab}", "model.vocab_size=null", "model.d_model=64", "model.d_ff=256",
            "model.num_layers=2", "data.tokens_per_batch=1024", f"train.train_steps={steps}",
            "train.steps_per_epoch=20", "train.backup_every_steps=10", "train.checkpoint_every_minutes=60",
            "train.warmup_steps=20", "train.strategy=default"]


def ab(args) -> None:
    rows = []
    trees = [("this", str(REPO)), ("base", str(Path(args.base).resolve()))]
    with tempfile.TemporaryDirectory(prefix="resume-cost-") as tmp:
        for r in range(args.rounds):
            for name, tree in (trees if r % 2 == 0 else trees[::-1]):
                env = dict(os.environ, PYTHONPATH=tree, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
                model_dir = Path(tmp) / f"{name}-{r}"
                out = subprocess.run([sys.executable, "-c", RUN, str(model_dir),
                                      json.dumps(_overrides(args.vocab, args.steps))],
                                     env=env, capture_output=True, text=True, cwd=tree)
                if out.returncode != 0:
                    sys.exit(f"{name}: failed\n{out.stderr[-3000:]}")
                row = json.loads(out.stdout.strip().splitlines()[-1])
                row["tree"] = name
                rows.append(row)
                print(f"round {r} {name}: {row['tokens_per_second']:,.0f} target tokens/s, "
                      f"{row['seconds']:.1f} s in all", flush=True)
    for name, _ in trees:
        mine = [x for x in rows if x["tree"] == name]
        print(f"{name}: median {statistics.median(x['tokens_per_second'] for x in mine):,.0f} target tokens/s, "
              f"median {statistics.median(x['seconds'] for x in mine):.1f} s per command ({len(mine)} runs)")


def skip(args) -> None:
    from tf_transformer.config import load_config
    from tf_transformer.data import Tokenizer, make_dataset

    cfg = load_config("multi30k_small", [f"data.vocab_model={args.vocab}", "model.vocab_size=null"])
    tokenizer = Tokenizer(args.vocab)
    make_dataset(cfg.data, "train", tokenizer, verbose=False)  # the statistics pass, cached for the process
    for n in [int(x) for x in args.batches.split(",")]:
        start = time.perf_counter()
        ds = make_dataset(cfg.data, "train", tokenizer, verbose=False, skip=n)
        next(iter(ds))
        print(f"skip {n:,} batches: first batch after {time.perf_counter() - start:.2f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    a = sub.add_parser("ab")
    a.add_argument("--base", required=True, help="another source tree (e.g. git archive of the base commit)")
    a.add_argument("--vocab", required=True, help="a Multi30k SentencePiece model (both trees read it)")
    a.add_argument("--rounds", type=int, default=2)
    a.add_argument("--steps", type=int, default=40)
    s = sub.add_parser("skip")
    s.add_argument("--vocab", required=True)
    s.add_argument("--batches", default="0,500,2000")
    args = ap.parse_args()
    {"ab": ab, "skip": skip}[args.mode](args)


if __name__ == "__main__":
    main()
