"""Input-pipeline benchmark: tokens/s, padding efficiency and tokens per batch.

    python tools/bench/input_pipeline.py                       # multi30k_small, 4,096-token budget
    python tools/bench/input_pipeline.py --epochs 5 --set data.tokens_per_batch=8192
    python tools/bench/input_pipeline.py --vocab runs/multi30k_small/vocab.model

Builds (or loads) the shared vocabulary, makes the training dataset exactly as ``tft
train`` does (``make_dataset(cfg.data, "train", tokenizer, training=True)``), lets it warm
up (shuffle buffer filled, graph functions traced), then times the batches of
``--epochs`` epochs of target tokens, consumed from Python as ``model.fit`` would
consume them. Reports:

* throughput: pairs/s, source and target tokens/s (real tokens, padding excluded);
* padding efficiency: real tokens / padded slots, per side and both together;
* tokens per batch (real, and padded slots) min / mean / max against the budget;
* the ratio of the pipeline's target tokens/s to what training consumes
  (``--train-tokens-per-s``; default 4,000, the top of the 1-4k target tokens/s that a
  training step reaches on the 2-core development machine).

Not run by CI; results are recorded in tools/bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="multi30k_small")
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--vocab", default=None, help="SentencePiece .model (default: data.vocab_model, "
                        "else one is built in a temporary folder)")
    parser.add_argument("--epochs", type=float, default=5.0, help="epochs of target tokens to time")
    parser.add_argument("--warmup-batches", type=int, default=50)
    parser.add_argument("--train-tokens-per-s", type=float, default=4000.0,
                        help="target tokens/s that training consumes, for the ratio")
    args = parser.parse_args(argv)

    import numpy as np

    from tf_transformer.config import load_config
    from tf_transformer.data import (
        Tokenizer,
        batching,
        build_vocab,
        dataset_statistics,
        make_dataset,
    )

    load_start = os.getloadavg()[0]
    cfg = load_config(args.config, args.overrides)
    vocab = args.vocab or cfg.data.vocab_model
    if not vocab or not os.path.isfile(vocab):
        tmp = tempfile.mkdtemp(prefix="tft-bench-vocab-")
        t = time.time()
        vocab = build_vocab(cfg.data, os.path.join(tmp, "spm"), progress=lambda m: None)["model"]
        print(f"built vocabulary {vocab} ({cfg.data.vocab_size:,} pieces) in {time.time() - t:.1f} s",
              file=sys.stderr)
    tok = Tokenizer(vocab)
    import tensorflow  # noqa: F401  (imported before timing: its import takes seconds)

    tok.tf_tokenizer  # noqa: B018  (loaded before timing)
    t = time.time()
    stats = dataset_statistics(cfg.data, "train", tok)
    stats_seconds = time.time() - t
    ds = make_dataset(cfg.data, "train", tok, training=True)
    epoch_tokens = stats.target_tokens
    budget = cfg.data.tokens_per_batch

    it = iter(ds)
    t = time.time()
    for _ in range(args.warmup_batches):
        next(it)
    warmup_seconds = time.time() - t

    goal = args.epochs * epoch_tokens
    src_real, tgt_real, src_slots, tgt_slots, rows = [], [], [], [], []
    start = time.perf_counter()
    while sum(tgt_real) < goal:
        (src, tgt_in), tgt_out = next(it)
        src, tgt_out = src.numpy(), tgt_out.numpy()
        src_real.append(int(np.count_nonzero(src)))
        tgt_real.append(int(np.count_nonzero(tgt_out)))
        src_slots.append(src.size)
        tgt_slots.append(tgt_out.size)
        rows.append(src.shape[0])
    seconds = time.perf_counter() - start

    # one shuffled pass without repeat: group_by_window flushes the partly filled buckets
    # at its end as smaller batches; their pairs are what waits in buckets at any time
    bounds = batching.bucket_bounds(cfg.data.max_length, cfg.data.bucket_width)
    rows_table = batching.bucket_rows(bounds, budget)
    one_pass = make_dataset(cfg.data, "train", tok, training=True, repeat=False, verbose=False)
    waiting = 0
    for (src, tgt_in), tgt_out in one_pass.as_numpy_iterator():
        i = int(np.searchsorted(bounds, src.shape[1]))
        j = int(np.searchsorted(bounds, tgt_out.shape[1]))
        if src.shape[0] < rows_table[i][j]:
            waiting += src.shape[0]

    def mmm(values):
        return f"{min(values):,} / {np.mean(values):,.0f} / {max(values):,}"

    n_batches = len(rows)
    tgt_rate = sum(tgt_real) / seconds
    lines = [
        ("config", f"{args.config} {' '.join(args.overrides)}".strip()),
        ("machine", f"{os.cpu_count()} CPUs; load average {load_start:.1f} at start, {os.getloadavg()[0]:.1f} at end"),
        ("corpus (train split)", (f"{stats.origin}: {stats.kept:,} pairs kept of {stats.pairs:,}; "
                                  f"{stats.source_tokens:,} source + {stats.target_tokens:,} target tokens")),
        ("vocabulary", f"{tok.vocab_size:,} pieces ({vocab})"),
        ("budget (tokens_per_batch)", f"{budget:,} per side, max_length {cfg.data.max_length}"),
        ("statistics pass", f"{stats_seconds:.2f} s"),
        ("warm-up", f"{args.warmup_batches} batches in {warmup_seconds:.2f} s"),
        ("timed", f"{n_batches:,} batches = {sum(tgt_real) / epoch_tokens:.2f} epochs in {seconds:.2f} s"),
        ("pairs/s", f"{sum(rows) / seconds:,.0f}"),
        ("source tokens/s", f"{sum(src_real) / seconds:,.0f}"),
        ("target tokens/s", f"{tgt_rate:,.0f}"),
        ("padding efficiency src / tgt / both",
         (f"{sum(src_real) / sum(src_slots):.3f} / {sum(tgt_real) / sum(tgt_slots):.3f} / "
          f"{(sum(src_real) + sum(tgt_real)) / (sum(src_slots) + sum(tgt_slots)):.3f}")),
        ("source tokens/batch min/mean/max", mmm(src_real)),
        ("target tokens/batch min/mean/max", mmm(tgt_real)),
        ("source slots/batch min/mean/max", mmm(src_slots)),
        ("target slots/batch min/mean/max", mmm(tgt_slots)),
        ("batches over budget", f"{sum(1 for a, b in zip(src_slots, tgt_slots) if max(a, b) > budget)}"),
        ("rows/batch min/mean/max", mmm(rows)),
        ("pairs waiting in partly filled buckets",
         f"{waiting:,} ({waiting / stats.kept:.0%} of an epoch; delayed, not dropped)"),
        ("ratio to training",
         f"{tgt_rate / args.train_tokens_per_s:.1f}x (vs {args.train_tokens_per_s:,.0f} target tokens/s consumed)"),
    ]
    width = max(len(k) for k, _ in lines)
    print("| measure | value |")
    print("|---|---|")
    for k, v in lines:
        print(f"| {k:<{width}} | {v} |")
    print()
    print("command: python tools/bench/input_pipeline.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
