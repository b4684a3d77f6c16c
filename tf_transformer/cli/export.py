"""``tft export``: SavedModels for TensorFlow Serving (what is written:
:mod:`tf_transformer.serving.export`, docs/serving.md)."""

from __future__ import annotations

import argparse
import sys
import time

from tf_transformer.cli._common import add_config_arguments, add_decode_settings
from tf_transformer.cli.decode import add_model_arguments
from tf_transformer.errors import UserError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "writes:\n"
        "  DIR/VERSION/           signatures translate (text -> text, default) and translate_ids;\n"
        "                         needs the TF Text ops (TF Serving >= 2.2)\n"
        "  DIR/ids_only/VERSION/  signature translate_ids only: core TF ops, any TF Serving\n"
        "  DIR/export.json        the decoding settings baked in\n"
        "with --format ctranslate2 (needs the [ct2] extra: pip install 'tf-transformer[ct2]'):\n"
        "  DIR/model.bin, config.json, shared_vocabulary.json   a CTranslate2 model directory\n"
        "  DIR/sentencepiece.model, tft_export.json             its vocabulary and our settings\n"
        "  decode it with: tft translate --engine ctranslate2 --model DIR\n"
        "see docs/serving.md for TF Serving commands, REST examples and CTranslate2\n"
        "example:\n  tft export --model runs/m30k --output export/m30k    # the run's vocab.model and config.yaml\n")
    add_model_arguments(parser, ensemble=True)
    parser.add_argument("--output", required=True,
                        help="model base directory for TF Serving (ctranslate2: the model directory)")
    parser.add_argument("--format", default="savedmodel", choices=("savedmodel", "ctranslate2"),
                        help="savedmodel (TF Serving) or ctranslate2 (a CTranslate2 model directory)")
    parser.add_argument("--quantization", default=None, metavar="TYPE",
                        help="ctranslate2 only: weight type, one of int8, int8_float32, int8_float16, "
                             "int8_bfloat16, int16, float16, bfloat16, float32 (default: float32)")
    parser.add_argument("--version", type=int, default=1, help="version sub-directory")
    add_config_arguments(parser, what=" whose decode section gives the defaults below (default: config.yaml of the "
                                      "model's run directory)")
    add_decode_settings(parser, baked_into="the export")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing version directory (ctranslate2: the output directory)")
    parser.set_defaults(batch_size=None)


def run(args: argparse.Namespace) -> int:
    from tf_transformer.cli.decode import decode_settings, describe, load_model_and_vocabulary
    from tf_transformer.serving.export import VersionExists, export_model

    cfg, decode = decode_settings(args)
    if args.format == "ctranslate2":
        return run_ctranslate2(args, cfg, decode)
    if args.quantization is not None:
        raise UserError(f"--quantization {args.quantization}: only for --format ctranslate2")
    if args.version < 1:
        raise UserError(f"--version {args.version}: must be >= 1 (TF Serving versions are positive integers)")
    start = time.time()
    model, tok = load_model_and_vocabulary(args, cfg)
    try:
        written = export_model(model, tok, args.output, version=args.version, beam_size=decode.beam_size,
                               alpha=decode.alpha, max_extra_length=decode.max_extra_length,
                               overwrite=args.force, source=args.model, stop_rule=decode.stop_rule,
                               ensemble=args.ensemble)
    except VersionExists as e:
        raise UserError(f"{e.path} already exists; export as --version {e.next_version} (TF Serving picks the "
                        "highest) or pass --force to replace it") from None
    members = f" (an ensemble of {1 + len(args.ensemble)} models)" if args.ensemble else ""
    print(f"tft export: wrote {written['full']} (translate, translate_ids) and {written['ids_only']} "
          f"(translate_ids, core ops only) with {describe(decode)}{members} in {time.time() - start:.1f} s",
          file=sys.stderr)
    return 0


def run_ctranslate2(args: argparse.Namespace, cfg, decode) -> int:
    """``tft export --format ctranslate2``: see :mod:`tf_transformer.serving.ctranslate2`."""
    from tf_transformer.cli.decode import load_model_and_vocabulary
    from tf_transformer.serving import ctranslate2 as ct2

    if args.ensemble:
        raise UserError(f"--model given {1 + len(args.ensemble)} times: a CTranslate2 model directory holds one "
                        "model; export an ensemble as a SavedModel (--format savedmodel)")
    ct2.require_ctranslate2()  # before the model is loaded: fail fast without the extra
    if args.quantization is not None and args.quantization not in ct2.QUANTIZATIONS:
        raise UserError(f"--quantization {args.quantization}: not one of {', '.join(ct2.QUANTIZATIONS)}")
    start = time.time()
    model, tok = load_model_and_vocabulary(args, cfg)
    settings = {"beam_size": decode.beam_size, "alpha": decode.alpha, "max_extra_length": decode.max_extra_length}
    written = ct2.export_ctranslate2(model, tok, args.output, quantization=args.quantization, overwrite=args.force,
                                     source=args.model, decode=settings)
    print(f"tft export: wrote the CTranslate2 model {written['dir']} ({args.quantization or 'float32'} weights) "
          f"in {time.time() - start:.1f} s; translate with: tft translate --engine ctranslate2 --model "
          f"{written['dir']}", file=sys.stderr)
    return 0
