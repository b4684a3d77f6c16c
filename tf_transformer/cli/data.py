"""``tft build-vocab``: train the shared SentencePiece vocabulary of a config.

    tft build-vocab -c multi30k_small --output runs/spm --vocab-size 16000
    tft train -c multi30k_small --set data.vocab_model=runs/spm.model     # model.vocab_size follows it
    tft build-vocab -c base --set data.tfds_data_dir=/data/tfds --output runs/base/spm

Writes ``PREFIX.model`` and ``PREFIX.vocab`` (``--output`` defaults to ``data.vocab_model``)
and prints one summary line; ``tft train --set data.vocab_model=PREFIX.model`` uses it.
Re-running with the same data, settings and ``data.seed``
writes a byte-identical model; an existing, different model is kept unless ``--force``.
"""

from __future__ import annotations

import argparse

from tf_transformer.cli._common import add_config_arguments, checked_config, plain


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = plain(__doc__.split("\n\n", 1)[1])
    add_config_arguments(parser, required=True)
    parser.add_argument(
        "--output", "-o", default=None, metavar="PREFIX",
        help="write PREFIX.model and PREFIX.vocab (default: data.vocab_model without .model)",
    )
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="shortcut for --set data.vocab_size=N (default: data.vocab_size of the config)")
    parser.add_argument("--force", action="store_true", help="replace an existing, different model")


def early(args: argparse.Namespace) -> None:
    """Read and check the config and the output before TensorFlow is imported: ``args._cfg``."""
    from tf_transformer.config import load_config
    from tf_transformer.errors import UserError

    overrides = list(args.overrides)
    if args.vocab_size is not None:
        overrides.append(f"data.vocab_size={args.vocab_size}")
    cfg = args._cfg = load_config(args.config, overrides)
    if not (args.output or cfg.data.vocab_model):
        raise UserError(
            "no output given: pass --output PREFIX (writes PREFIX.model and PREFIX.vocab) "
            "or set data.vocab_model"
        )


def run(args: argparse.Namespace) -> int:
    from tf_transformer.data.tokenizer import build_vocab
    from tf_transformer.errors import UserError

    cfg = checked_config(args, early)
    output = args.output or cfg.data.vocab_model
    try:
        result = build_vocab(cfg.data, output, overwrite=args.force)
    except UserError as e:
        text = str(e).replace("write the new one elsewhere", "choose another --output")
        raise type(e)(text.replace("(overwrite=True)", "(--force)")) from None
    print(result["summary"])
    return 0
