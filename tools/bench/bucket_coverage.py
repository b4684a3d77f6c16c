"""Training-stream coverage: is every pair trained on about once per epoch, and how often does a
batch hold the same pair twice?

    python tools/bench/bucket_coverage.py --config multi30k_tiny --vocab runs/x/vocab.model
    python tools/bench/bucket_coverage.py --config multi30k_tiny --vocab V --no-plan   # every 2-D bucket its own

Makes the training stream exactly as ``tft train`` does (``make_dataset(cfg.data, "train",
tokenizer, training=True)``, repeated) and reads ``--epochs`` epochs' worth of rows (the
split's kept pairs, times the epochs). Reports the pairs not yet seen after 1, 2, ... epochs'
worth, the share of rows that repeat a pair already in their batch, the real share of the
padded slots per side and the mean rows per batch. ``--no-plan`` replaces the bucket plan
(``batching.bucket_plan``) by one without counts: each (source, target) length bucket keeps
its own batches, the behaviour before the plan. Not run by CI; results in tools/bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import collections
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="multi30k_tiny")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--vocab", required=True, help="SentencePiece .model of the config's data")
    parser.add_argument("--epochs", type=int, default=4, help="epochs' worth of rows to read")
    parser.add_argument("--no-plan", action="store_true", help="every 2-D bucket keeps its own batches")
    args = parser.parse_args(argv)

    from tf_transformer.config import load_config
    from tf_transformer.data import Tokenizer, batching, dataset_statistics, make_dataset

    cfg = load_config(args.config, args.overrides + [f"data.vocab_model={args.vocab}"])
    tok = Tokenizer(args.vocab)
    if args.no_plan:
        with_counts = batching.bucket_plan
        batching.bucket_plan = lambda bounds, budget, length_pairs=None, shares=1: with_counts(bounds, budget)
    kept = dataset_statistics(cfg.data, "train", tok).kept
    seen: collections.Counter = collections.Counter()
    rows = repeats = batches = 0
    slots = {"source": [0, 0], "target": [0, 0]}
    unseen = []
    for (src, tgt_in), _ in make_dataset(cfg.data, "train", tok, verbose=True).as_numpy_iterator():
        batches += 1
        pairs = [(s[s != 0].tobytes(), t[t != 0].tobytes()) for s, t in zip(src, tgt_in)]
        repeats += sum(n - 1 for n in collections.Counter(pairs).values())
        seen.update(pairs)
        rows += len(pairs)
        for side, ids in (("source", src), ("target", tgt_in)):
            slots[side][0] += int((ids != 0).sum())
            slots[side][1] += ids.size
        while rows >= (len(unseen) + 1) * kept and len(unseen) < args.epochs:
            unseen.append(kept - len(seen))
        if len(unseen) == args.epochs:
            break
    real = ", ".join(f"{side} {100 * a / b:.1f}%" for side, (a, b) in slots.items())
    print(f"{args.config} ({'no plan' if args.no_plan else 'bucket plan'}, {batching.resolve_pipelines(cfg.data)} "
          f"pipeline(s), {cfg.data.tokens_per_batch:,} tokens a batch): {batches} batches; pairs not yet seen after "
          f"1..{args.epochs} epochs' worth: {' / '.join(f'{n:,}' for n in unseen)} of {kept:,} (identical pairs "
          f"count once); rows repeating a pair in their batch {100 * repeats / rows:.2f}%; real slots {real}; "
          f"{rows / batches:.0f} rows per batch")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
