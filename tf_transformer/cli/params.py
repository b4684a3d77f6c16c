"""``tft params``: parameter counts of presets beside the paper's Table 3 column
(:mod:`tf_transformer.params`)."""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("presets", nargs="*", help="preset names (default: base, big and every Table 3 row)")
    parser.add_argument("--vocab-size", type=int, default=37000, help="shared vocabulary size (paper: ~37,000)")


def run(args: argparse.Namespace) -> int:
    from tf_transformer.params import format_table, table

    rows = table(args.presets or None, args.vocab_size)
    print(format_table(rows, args.vocab_size))
    return 0
