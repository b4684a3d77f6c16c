"""A synthetic WMT-sized parallel corpus made of Multi30k pairs (seeded, reproducible).

    python tools/make_synthetic_corpus.py --pairs 4500000 --output /tmp/synth45m     # ~1.3 GB, ~1 min
    python tools/make_synthetic_corpus.py --pairs 1000000 --shards 8 --output /tmp/synth1m

Each output line joins ``k`` Multi30k training pairs (drawn with replacement, the same
pairs on both sides, separated by a space), with ``k`` between ``--min-join`` (2) and
``--max-join`` (12): ``k = min-join + G`` with ``G`` geometric of mean ``--mean-extra``
(0.33), cut at ``max-join``. With the bundled Multi30k and a 8,000-piece vocabulary that
gives about 34 subword tokens per side on average and a long tail (some lines over 100
tokens), the shape of WMT14 En-De; its vocabulary is Multi30k's, so SentencePiece runs
faster on it than on real WMT text.

Writes ``train.en`` / ``train.de`` (or ``train-00000-of-00008.en`` ... with ``--shards``)
and prints the line, byte and word counts. The same ``--seed`` and arguments give
byte-identical files.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def read_multi30k(folder: Path, lang: str) -> list[bytes]:
    with gzip.open(folder / f"train.{lang}.gz", "rb") as f:
        return [line.rstrip(b"\n") for line in f]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=4_500_000, help="lines per side")
    parser.add_argument("--output", required=True, help="output folder")
    parser.add_argument("--shards", type=int, default=1, help="files per side")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-join", type=int, default=2)
    parser.add_argument("--max-join", type=int, default=12)
    parser.add_argument("--mean-extra", type=float, default=0.33,
                        help="mean of the geometric number of pairs added to --min-join")
    parser.add_argument("--multi30k", default=str(ROOT / "data" / "multi30k"))
    parser.add_argument("--source-lang", default="en")
    parser.add_argument("--target-lang", default="de")
    args = parser.parse_args(argv)
    if args.pairs < 1 or args.shards < 1 or not 1 <= args.min_join <= args.max_join:
        parser.error("need --pairs >= 1, --shards >= 1 and 1 <= --min-join <= --max-join")

    start = time.time()
    folder = Path(args.multi30k)
    src = read_multi30k(folder, args.source_lang)
    tgt = read_multi30k(folder, args.target_lang)
    assert len(src) == len(tgt)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    p = 1.0 / (1.0 + args.mean_extra)  # geometric on {0, 1, ...} with mean (1-p)/p
    per_shard = -(-args.pairs // args.shards)
    written = 0
    totals = {"bytes": [0, 0], "words": [0, 0], "joined": 0}
    last = time.time()
    for shard in range(args.shards):
        n = min(per_shard, args.pairs - written)
        if args.shards == 1:
            names = [f"train.{args.source_lang}", f"train.{args.target_lang}"]
        else:
            names = [f"train-{shard:05d}-of-{args.shards:05d}.{lang}" for lang in (args.source_lang, args.target_lang)]
        with open(out / names[0], "wb") as fs, open(out / names[1], "wb") as ft:
            done = 0
            while done < n:
                m = min(100_000, n - done)
                k = np.minimum(args.min_join + rng.geometric(p, size=m) - 1, args.max_join)
                picks = rng.integers(0, len(src), size=int(k.sum()))
                ends = np.cumsum(k)
                lines_s, lines_t = [], []
                a = 0
                for b in ends.tolist():
                    idx = picks[a:b].tolist()
                    lines_s.append(b" ".join([src[i] for i in idx]))
                    lines_t.append(b" ".join([tgt[i] for i in idx]))
                    a = b
                block_s = b"\n".join(lines_s) + b"\n"
                block_t = b"\n".join(lines_t) + b"\n"
                fs.write(block_s)
                ft.write(block_t)
                totals["bytes"][0] += len(block_s)
                totals["bytes"][1] += len(block_t)
                totals["words"][0] += block_s.count(b" ") + m
                totals["words"][1] += block_t.count(b" ") + m
                totals["joined"] += int(k.sum())
                done += m
                if time.time() - last > 5:
                    last = time.time()
                    print(f"  {written + done:,} of {args.pairs:,} lines", file=sys.stderr, flush=True)
        written += n
    print(f"wrote {args.pairs:,} lines per side in {args.shards} file(s) to {out} in {time.time() - start:.1f} s: "
          f"{totals['bytes'][0]:,} + {totals['bytes'][1]:,} bytes, {totals['words'][0]:,} + {totals['words'][1]:,} "
          f"words, {totals['joined'] / args.pairs:.2f} Multi30k pairs per line (seed {args.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
