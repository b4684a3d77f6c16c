"""What CTranslate2 sampling costs with a new CTranslate2 translator (worker) per sampled
batch, as :class:`tf_transformer.serving.ctranslate2.CT2Translator` does so that a batch's draws
depend on ``--seed`` and the batch only, against one translator for every batch (as before:
faster, but each batch's draws continued the process's earlier ones, so a resumed or streamed
run drew otherwise than a whole one).

    tft export --format ctranslate2 --model runs/a/averaged-5.keras --output /tmp/ct2
    python tools/bench/ct2_sampling.py --export /tmp/ct2 [--split test] [--batch-size 64] [--rounds 3]
        [--sample-topk 10] [--json FILE]

Each round samples the split both ways (interleaved, after one untimed batch), prints wall and
CPU seconds, and whether translating the split twice with one ``CT2Translator`` gave the same
samples both times (they must, now; with one translator for every batch they did not).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_throughput import cpu_seconds, machine, print_and_write  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--export", required=True, help="a directory written by tft export --format ctranslate2")
    p.add_argument("--config", default=None, help="config whose data section names the split (default: Multi30k)")
    p.add_argument("--split", default="test", choices=("train", "valid", "test"))
    p.add_argument("--limit", type=int, default=0, help="only the first N sentences (0: all)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--sample-topk", type=int, default=10)
    p.add_argument("--threads", type=int, default=2, help="CTranslate2's intra_threads")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write the figures here")
    args = p.parse_args(argv)

    from tf_transformer.config import Config, load_config
    from tf_transformer.data import read_parallel_text
    from tf_transformer.data.sources import describe
    from tf_transformer.serving.ctranslate2 import CT2Translator

    cfg = load_config(args.config) if args.config else Config()
    sources, _ = read_parallel_text(cfg.data, args.split)
    sources = sources[: args.limit] if args.limit else sources
    translator = CT2Translator(args.export, beam_size=1, sample=True, seed=1, top_k=args.sample_topk,
                               batch_size=args.batch_size, threads=args.threads)
    fresh = translator._new_engine
    ways = {"a new translator per batch (now)": fresh, "one translator for all (before)": lambda: translator.engine}
    translator.translate(sources[: args.batch_size])
    rounds = {name: [] for name in ways}
    for r in range(args.rounds):
        for name, new_engine in ways.items():
            translator._new_engine = new_engine
            start, cpu = time.perf_counter(), cpu_seconds()
            translator.translate(sources)
            rounds[name].append((time.perf_counter() - start, cpu_seconds() - cpu))
        print(f"  round {r + 1}: " + "; ".join(f"{n} {w:.2f} s ({c:.2f} CPU-s)" for n, [*_, (w, c)] in rounds.items()),
              file=sys.stderr, flush=True)
    same = {}
    for name, new_engine in ways.items():
        translator._new_engine = new_engine
        same[name] = translator.translate(sources)[0] == translator.translate(sources)[0]
    translator._new_engine = fresh
    start = time.perf_counter()
    for _ in range(10):
        fresh()
    making = (time.perf_counter() - start) / 10
    medians = {n: (statistics.median(w for w, _ in rs), statistics.median(c for _, c in rs))
               for n, rs in rounds.items()}
    now, before = medians.values()
    what = describe(cfg.data, args.split)
    print(f"| sampling {len(sources)} sentences of {what} (top {args.sample_topk}), batches of {args.batch_size} "
          "| wall s per round | median | CPU-s median | the same samples twice in one process |")
    print("|---|---|---:|---:|---|")
    for name, rs in rounds.items():
        print(f"| {name} | {', '.join(f'{w:.2f}' for w, _ in rs)} | {medians[name][0]:.2f} | {medians[name][1]:.2f} "
              f"| {'yes' if same[name] else 'no'} |")
    print(f"\nnow / before: {now[0] / before[0]:.2f}x wall, {now[1] / before[1]:.2f}x CPU; making one translator: "
          f"{making * 1e3:.1f} ms")
    figures = {"command": sys.argv, "what": what, "rounds": rounds, "medians": medians, "same_samples_twice": same,
               "translator_ms": making * 1e3, "sentences": len(sources), "machine": machine()}
    return print_and_write(figures, args.json)


if __name__ == "__main__":
    sys.exit(main())
