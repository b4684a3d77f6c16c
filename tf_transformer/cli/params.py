"""``tft params``: parameter counts of presets beside the paper's Table 3 column
(:mod:`tf_transformer.params`).

    tft params                         # base, big and every Table 3 row
    tft params multi30k_small my.yaml  # any preset or YAML file (paper columns blank)
"""

from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("presets", nargs="*", metavar="PRESET_OR_YAML",
                        help="preset names or YAML files (default: base, big and every Table 3 row)")
    parser.add_argument("--vocab-size", type=int, default=37000, help="shared vocabulary size (paper: ~37,000)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def run(args: argparse.Namespace) -> int:
    from tf_transformer.errors import UserError

    if args.vocab_size < 1:
        raise UserError(f"--vocab-size {args.vocab_size}: must be >= 1")
    from tf_transformer.io import say
    from tf_transformer.params import format_table, table

    if not args.quiet:
        say("tft params: loading TensorFlow and Keras...")
    rows = table(args.presets or None, args.vocab_size,
                 log=None if args.quiet else (lambda msg: say(f"tft params: {msg}")))
    print(format_table(rows, args.vocab_size))
    return 0
