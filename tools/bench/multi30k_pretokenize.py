"""Multi30k as Wu et al. (ACL 2021) fed it to their BPE: Moses punctuation normalisation and
Moses tokenization (no aggressive hyphen splitting, no XML escaping) of every split and
language, written as a folder that ``data.multi30k_dir`` can point at.

The experiment it serves (run 13 in tools/bench/RESULTS.md): train ``multi30k_tiny`` on the
pre-tokenized copy, so that SentencePiece learns its pieces on tokenized text as their BPE
did, and score the (tokenized) outputs against the bundled raw references with
``tft score``: the lowercased Moses-tokenized BLEU tokenizes both sides again, which leaves
tokenized German unchanged (the script counts the lines it would change). For sacreBLEU the
outputs are detokenized first (``detok``).

    python tools/bench/multi30k_pretokenize.py prepare --out runs/m30k_tok
    PY=python MINUTES=100 tools/reproduce_multi30k.sh runs/multi30k_tiny_moses -- \\
        data.multi30k_dir=runs/m30k_tok ...
    python tools/bench/multi30k_pretokenize.py detok RUN/report/outputs/FILE.de OUT.de
    tft score --reference data/multi30k/test2016.de.gz OUT.de

Text stays cased (``data.lowercase: true`` lowercases inside the model, as in run 11).
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPLITS = ("train", "val", "test2016")
LANGS = ("en", "de")


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def prepare(source: Path, out: Path) -> None:
    from sacremoses import MosesPunctNormalizer, MosesTokenizer

    out.mkdir(parents=True, exist_ok=True)
    for lang in LANGS:
        tokenizer, normalizer = MosesTokenizer(lang=lang), MosesPunctNormalizer(lang=lang)

        def tokenize(text: str) -> str:
            return tokenizer.tokenize(text, escape=False, return_str=True)

        for split in SPLITS:
            path = source / f"{split}.{lang}.gz"
            if not path.is_file():
                sys.exit(f"multi30k_pretokenize: {path} does not exist (--source names the folder of "
                         f"{{{','.join(SPLITS)}}}.{{{','.join(LANGS)}}}.gz)")
            raw = read_lines(path)
            normalized = [normalizer.normalize(line) for line in raw]
            tokenized = [tokenize(line) for line in normalized]
            with gzip.open(out / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in tokenized))
            changed_by_norm = sum(a != b for a, b in zip(raw, normalized))
            not_idempotent = sum(tokenize(t) != t for t in tokenized)
            print(f"{split}.{lang}: {len(raw):,} lines; punctuation normalisation changed {changed_by_norm:,}; "
                  f"tokenizing the output again would change {not_idempotent:,}")


def detok(path: Path, out: Path, lang: str) -> None:
    from sacremoses import MosesDetokenizer

    detokenizer = MosesDetokenizer(lang=lang)
    lines = read_lines(path)
    out.write_text("".join(detokenizer.detokenize(line.split()) + "\n" for line in lines), encoding="utf-8")
    print(f"wrote {out}: {len(lines):,} detokenized lines ({lang})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write the Moses-prepared copy of the Multi30k files")
    p.add_argument("--source", type=Path, default=ROOT / "data" / "multi30k",
                   help="folder of the raw files (default: the bundled data/multi30k)")
    p.add_argument("--out", type=Path, required=True, help="folder to write (data.multi30k_dir)")
    d = sub.add_parser("detok", help="Moses-detokenize a file of tokenized outputs")
    d.add_argument("input", type=Path)
    d.add_argument("output", type=Path)
    d.add_argument("--lang", default="de")
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.source, args.out)
    else:
        detok(args.input, args.output, args.lang)
    return 0


if __name__ == "__main__":
    sys.exit(main())
