"""``tft prepare``: raw parallel text (or TFDS) -> shuffled, tokenized, sharded TFRecord files.

::

    tft prepare -c base --set data.source=text --set "data.train_source=wmt14/*.en.gz" \\
        --set "data.train_target=wmt14/*.de.gz" --vocab runs/base/spm.model --output data/wmt14-prepared
    tft train -c base --set data.source=prepared --set data.prepared_dir=data/wmt14-prepared

Writes the folder's ``manifest.json`` (pairs, token totals, length histogram per split,
the vocabulary's SHA-256, the settings), ``vocab.model``, the training shards and the
validation / test splits (with their text, for BLEU). Training from it reads no raw text,
runs no statistics pass and shuffles at the file level and in its buffer.
"""

from __future__ import annotations

import argparse

from tf_transformer.cli._common import add_config_arguments, checked_config, plain


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = plain(__doc__.split("\n\n", 1)[1]) + "\n"
    add_config_arguments(parser, required=True)
    parser.add_argument("--output", "-o", required=True, metavar="DIR", help="folder to write (new or prepared)")
    parser.add_argument("--vocab", default=None, metavar="MODEL",
                        help="SentencePiece .model (default: data.vocab_model; built there if missing)")
    parser.add_argument("--shards", type=int, default=None,
                        help="training shards (default: one per 100,000 pairs, at least 16)")
    parser.add_argument("--seed", type=int, default=None, help="shuffle seed (default: data.seed)")
    parser.add_argument("--force", action="store_true", help="replace an existing prepared folder")


def early(args: argparse.Namespace) -> None:
    """Read and check the config and the flags before TensorFlow is imported: ``args._cfg``."""
    from tf_transformer.config import load_config
    from tf_transformer.errors import UserError

    cfg = args._cfg = load_config(args.config, list(args.overrides))
    if args.vocab:
        cfg.data.vocab_model = args.vocab
    if not cfg.data.vocab_model:
        raise UserError("no vocabulary: pass --vocab MODEL or set data.vocab_model (tft build-vocab writes one)")
    if args.shards is not None and args.shards < 1:
        raise UserError(f"--shards {args.shards} must be >= 1")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tf_transformer.data.prepared import prepare
    from tf_transformer.data.tokenizer import resolve_vocabulary
    from tf_transformer.errors import UserError

    cfg = checked_config(args, early)
    tokenizer = resolve_vocabulary(cfg, Path(cfg.data.vocab_model), who="prepare")
    try:
        result = prepare(cfg.data, args.output, tokenizer, shards=args.shards, seed=args.seed,
                         overwrite=args.force)
    except UserError as e:
        text = str(e).replace("(overwrite=True)", "(--force)")
        raise type(e)(text) from None
    print(result["summary"])
    return 0
