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

Text stays cased unless ``--lowercase`` (our runs use ``data.lowercase: true``, which lowercases inside
the model, as in run 11).
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPLITS = ("train", "val", "test2016")
LANGS = ("en", "de")


def prepare(source: Path, out: Path, lowercase: bool = False) -> None:
    from sacremoses import MosesPunctNormalizer

    from tf_transformer.cli._common import read_text_lines
    from tf_transformer.evaluation.bleu import moses_tokenize  # the metric's own tokenizer settings

    out.mkdir(parents=True, exist_ok=True)
    for lang in LANGS:
        normalizer = MosesPunctNormalizer(lang=lang)
        for split in SPLITS:
            raw = read_text_lines(str(source / f"{split}.{lang}.gz"), "--source", "multi30k_pretokenize")
            normalized = [normalizer.normalize(line) for line in raw]
            tokenized = moses_tokenize(normalized, lang)
            changed_by_norm = sum(a != b for a, b in zip(raw, normalized))
            not_idempotent = sum(a != b for a, b in zip(moses_tokenize(tokenized, lang), tokenized))
            if lowercase:  # after tokenization: the order of the recorded fairseq run (RESULTS.md, fifth part)
                tokenized = [line.lower() for line in tokenized]
            with gzip.open(out / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in tokenized))
            print(f"{split}.{lang}: {len(raw):,} lines; punctuation normalisation changed {changed_by_norm:,}; "
                  f"tokenizing the output again would change {not_idempotent:,}")


def detok(path: Path, out: Path, lang: str) -> None:
    from sacremoses import MosesDetokenizer

    from tf_transformer.cli._common import read_text_lines

    detokenizer = MosesDetokenizer(lang=lang)
    lines = read_text_lines(str(path), "input", "multi30k_pretokenize")
    out.write_text("".join(detokenizer.detokenize(line.split()) + "\n" for line in lines), encoding="utf-8")
    print(f"wrote {out}: {len(lines):,} detokenized lines ({lang})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write the Moses-prepared copy of the Multi30k files")
    p.add_argument("--source", type=Path, default=ROOT / "data" / "multi30k",
                   help="folder of the raw {train,val,test2016}.{en,de}.gz (default: the bundled data/multi30k)")
    p.add_argument("--out", type=Path, required=True, help="folder to write (data.multi30k_dir)")
    p.add_argument("--lowercase", action="store_true",
                   help="lowercase the tokenized text (fairseq_multi30k.sh TEXT=moses_bpe); our runs lowercase "
                        "inside the model instead (data.lowercase)")
    d = sub.add_parser("detok", help="Moses-detokenize a file of tokenized outputs")
    d.add_argument("input", type=Path)
    d.add_argument("output", type=Path)
    d.add_argument("--lang", default="de")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from tf_transformer.errors import UserError

    try:
        if args.command == "prepare":
            prepare(args.source, args.out, args.lowercase)
        else:
            detok(args.input, args.output, args.lang)
    except UserError as e:
        sys.exit(f"multi30k_pretokenize: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
