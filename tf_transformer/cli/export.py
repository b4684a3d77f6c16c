"""``tft export``: SavedModels for TensorFlow Serving (what is written:
:mod:`tf_transformer.serving.export`, docs/serving.md)."""

from __future__ import annotations

import argparse
import sys
import time

from tf_transformer.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = (
        "writes:\n"
        "  DIR/VERSION/           signatures translate (text -> text, default) and translate_ids;\n"
        "                         needs the TF Text ops (TF Serving >= 2.2)\n"
        "  DIR/ids_only/VERSION/  signature translate_ids only: core TF ops, any TF Serving\n"
        "  DIR/export.json        the decoding settings baked in\n"
        "see docs/serving.md for TF Serving commands and REST examples\n")
    parser.add_argument("--model", required=True, help="the .keras model")
    parser.add_argument("--vocab", default=None,
                        help="its SentencePiece .model (default: data.vocab_model of --config)")
    parser.add_argument("--output", required=True, help="model base directory for TF Serving")
    parser.add_argument("--version", type=int, default=1, help="version sub-directory (default 1)")
    parser.add_argument("--config", default=None, help="config whose decode section gives the defaults")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    parser.add_argument("--beam", type=int, default=None, help="beam size baked into the graph (default 4)")
    parser.add_argument("--alpha", type=float, default=None, help="length penalty (default 0.6)")
    parser.add_argument("--max-extra-len", type=int, default=None, help="input length + this (default 50)")
    parser.add_argument("--force", action="store_true", help="replace an existing version directory")
    parser.set_defaults(batch_size=None)


def run(args: argparse.Namespace) -> int:
    from tf_transformer.cli.decode import decode_settings, describe, load_model_and_vocabulary
    from tf_transformer.serving.export import VersionExists, export_model

    cfg, decode = decode_settings(args)
    if args.version < 1:
        raise UserError(f"--version {args.version}: must be >= 1 (TF Serving versions are positive integers)")
    start = time.time()
    model, tok = load_model_and_vocabulary(args, cfg)
    try:
        written = export_model(model, tok, args.output, version=args.version, beam_size=decode.beam_size,
                               alpha=decode.alpha, max_extra_length=decode.max_extra_length,
                               overwrite=args.force, source=args.model)
    except VersionExists as e:
        raise UserError(f"{e.path} already exists; export as --version {e.next_version} (TF Serving picks the "
                        "highest) or pass --force to replace it") from None
    print(f"tft export: wrote {written['full']} (translate, translate_ids) and {written['ids_only']} "
          f"(translate_ids, core ops only) with {describe(decode)} in {time.time() - start:.1f} s",
          file=sys.stderr)
    return 0
