"""``tft export``: SavedModels for TensorFlow Serving.

Two SavedModels are written, because a SavedModel is loaded whole: if any of its
functions uses the TF Text ops (``SentencepieceOp`` and friends), a server or process
without them cannot load it at all, not even its ids-only signature.

``DIR/<version>/`` (the model to serve where TF Text ops exist: TF Serving >= 2.2,
or Python with ``import tensorflow_text``)
    signature ``translate`` (also ``serving_default``):
        ``text``: tf.string ``[batch]`` -> ``translation``: tf.string ``[batch]``,
        ``scores``: float32 ``[batch]`` (length-normalised log-probability; greedy: total
        log-probability). SentencePiece tokenization and detokenization run in the graph.
    signature ``translate_ids``:
        ``source_ids``: int32 ``[batch, length]`` (subword ids without BOS/EOS, 0-padded)
        -> ``ids``: int32 ``[batch, out_length]`` (no BOS/EOS, 0-padded), ``lengths``:
        int32 ``[batch]``, ``scores``: float32 ``[batch]``.
``DIR/ids_only/<version>/`` (loads in any TF Serving build: core TensorFlow ops only)
    signature ``translate_ids`` (also ``serving_default``) as above.
``DIR/export.json``
    the decoding settings baked into the graphs, the vocabulary and the model they came from.

TF Serving scans a model base path for numeric sub-directories, so ``DIR`` serves the
full model and ``DIR/ids_only`` the core-ops one. Decoding settings (beam size, alpha,
max extra length) are fixed at export time. Input rules are those of ``tft translate``:
invalid UTF-8 bytes are replaced with U+FFFD in the graph, an empty or whitespace-only
string gives an empty translation (score 0), sources are cut to the model's
``max_length`` tokens, ids outside the vocabulary are read as ``<unk>``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from tf_transformer.errors import UserError

IDS_ONLY_DIR = "ids_only"


def _module_class():
    import tensorflow as tf

    from tf_transformer.decoding.model_fns import model_limit, translate_batch

    class TranslatorModule(tf.Module):
        """Holds the Keras model (its variables are saved through it), the SentencePiece
        resource when ``tokenizer`` is given, and the signature functions."""

        def __init__(self, model, tokenizer=None, beam_size=4, alpha=0.6, max_extra_length=50, bos_id=2,
                     eos_id=3, unk_id=1):
            super().__init__(name="translator")
            self.model = model
            self._settings = {"beam_size": int(beam_size), "alpha": float(alpha),
                              "max_extra_length": int(max_extra_length), "bos_id": int(bos_id),
                              "eos_id": int(eos_id)}
            self._limit = model_limit(model)
            self._vocab_size = int(model.vocab_size)
            self._unk_id = int(unk_id)
            # autograph=False, as in tft translate (the same decoding function, traced the same way)
            self.translate_ids = tf.function(
                self._translate_ids, input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")],
                autograph=False)
            if tokenizer is not None:
                self.sentencepiece = tokenizer.tf_tokenizer  # a tracked resource: saved as an asset
                self.translate = tf.function(
                    self._translate_text, input_signature=[tf.TensorSpec([None], tf.string, name="text")],
                    autograph=False)

        def _translate_ids(self, source_ids):
            ids = source_ids[:, : self._limit]
            ids = tf.where((ids < 0) | (ids >= self._vocab_size), self._unk_id, ids)
            # at least one column, so an all-empty batch still has a shape the encoder takes
            ids = tf.pad(ids, [[0, 0], [0, tf.maximum(1 - tf.shape(ids)[1], 0)]])
            n = tf.reduce_sum(tf.cast(ids != 0, tf.int32), axis=1)
            out, scores = translate_batch(self.model, ids, **self._settings)
            empty = n == 0
            out = tf.where(empty[:, None], 0, out)
            scores = tf.where(empty, 0.0, scores)
            lengths = tf.reduce_sum(tf.cast(out != 0, tf.int32), axis=1)
            return {"ids": out, "lengths": lengths, "scores": scores}

        def _translate_text(self, text):
            text = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace",
                                                replacement_char=0xFFFD)
            tokens = self.sentencepiece.tokenize(text)
            dense = tokens[:, : self._limit].to_tensor(default_value=0)
            result = self._translate_ids(dense)
            ids = result["ids"]
            pieces = tf.ragged.boolean_mask(ids, ids != 0)
            return {"translation": self.sentencepiece.detokenize(pieces), "scores": result["scores"]}

    return TranslatorModule


def build_module(model, tokenizer=None, beam_size=4, alpha=0.6, max_extra_length=50):
    """A ``tf.Module`` with ``translate_ids`` (and ``translate`` when ``tokenizer`` is given)."""
    cls = _module_class()
    kwargs = {}
    if tokenizer is not None:
        kwargs = {"bos_id": tokenizer.bos_id, "eos_id": tokenizer.eos_id, "unk_id": tokenizer.unk_id}
    return cls(model, tokenizer, beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length, **kwargs)


def export_model(model, tokenizer, output_dir, version: int = 1, beam_size: int = 4, alpha: float = 0.6,
                 max_extra_length: int = 50, overwrite: bool = False, source: str = "", log=None) -> dict:
    """Write ``output_dir/<version>`` (translate + translate_ids), ``output_dir/ids_only/<version>``
    (translate_ids, core ops only) and ``output_dir/export.json``. Returns their paths."""
    import tensorflow as tf

    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if version < 1:
        raise UserError(f"--version {version}: must be >= 1 (TF Serving versions are positive integers)")
    out = Path(output_dir)
    full_dir, ids_dir = out / str(version), out / IDS_ONLY_DIR / str(version)
    for d in (full_dir, ids_dir):
        if d.exists() and not overwrite:
            existing = sorted(int(p.name) for p in out.iterdir() if p.name.isdigit()) if out.exists() else []
            nxt = (max(existing) + 1) if existing else version + 1
            raise UserError(f"{d} already exists; export as --version {nxt} (TF Serving picks the highest) "
                            "or pass --force to replace it")
    settings = {"beam_size": beam_size, "alpha": alpha, "max_extra_length": max_extra_length}

    written = {}
    for name, target, tok in (("full", full_dir, tokenizer), ("ids_only", ids_dir, None)):
        module = build_module(model, tok, **settings)
        if tok is not None:
            signatures = {"serving_default": module.translate, "translate": module.translate,
                          "translate_ids": module.translate_ids}
        else:
            signatures = {"serving_default": module.translate_ids, "translate_ids": module.translate_ids}
        log(f"export: tracing and writing {target} ({', '.join(sorted(set(signatures) - {'serving_default'}))})")
        tmp = target.with_name(target.name + f".tmp{os.getpid()}")
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tf.saved_model.save(module, str(tmp), signatures=signatures)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
        written[name] = str(target)

    info = {
        "version": version,
        "model": source,
        "vocab": getattr(tokenizer, "model_path", None),
        "vocab_size": int(model.vocab_size),
        "max_length": int(model.max_length),
        "decode": settings,
        "ids": {"pad": 0, "unk": tokenizer.unk_id, "bos": tokenizer.bos_id, "eos": tokenizer.eos_id},
        "signatures": {
            str(full_dir.relative_to(out)): ["translate (serving_default)", "translate_ids"],
            str(ids_dir.relative_to(out)): ["translate_ids (serving_default)"],
        },
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    (out / "export.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    written["info"] = str(out / "export.json")
    return written


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
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
        "see docs/serving.md for TF Serving commands, REST examples and CTranslate2\n")
    parser.add_argument("--model", required=True, help="the .keras model")
    parser.add_argument("--vocab", default=None, help="its SentencePiece .model (default: data.vocab_model of --config)")
    parser.add_argument("--output", required=True,
                        help="model base directory for TF Serving (ctranslate2: the model directory)")
    parser.add_argument("--format", default="savedmodel", choices=("savedmodel", "ctranslate2"),
                        help="savedmodel (TF Serving, default) or ctranslate2 (a CTranslate2 model directory)")
    parser.add_argument("--quantization", default=None, metavar="TYPE",
                        help="ctranslate2 only: weight type, one of int8, int8_float32, int8_float16, "
                             "int8_bfloat16, int16, float16, bfloat16, float32 (default float32)")
    parser.add_argument("--version", type=int, default=1, help="version sub-directory (default 1)")
    parser.add_argument("--config", default=None, help="config whose decode section gives the defaults")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    parser.add_argument("--beam", type=int, default=None, help="beam size baked into the graph (default 4)")
    parser.add_argument("--alpha", type=float, default=None, help="length penalty (default 0.6)")
    parser.add_argument("--max-extra-len", type=int, default=None, help="input length + this (default 50)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing version directory (ctranslate2: the output directory)")
    parser.set_defaults(batch_size=None)


def run(args: argparse.Namespace) -> int:
    from tf_transformer.decoding.commands import decode_settings, describe
    from tf_transformer.decoding.translator import load_model, load_tokenizer

    cfg, decode = decode_settings(args)
    vocab = args.vocab or (cfg.data.vocab_model if cfg is not None else None)
    if not vocab:
        raise UserError("--vocab is required (or a --config whose data.vocab_model names the SentencePiece model)")
    if args.format == "ctranslate2":
        return run_ctranslate2(args, decode, vocab)
    if args.quantization is not None:
        raise UserError(f"--quantization {args.quantization}: only for --format ctranslate2")
    start = time.time()
    model = load_model(args.model)
    tok = load_tokenizer(vocab, model)
    written = export_model(model, tok, args.output, version=args.version, beam_size=decode.beam_size,
                           alpha=decode.alpha, max_extra_length=decode.max_extra_length, overwrite=args.force,
                           source=args.model)
    print(f"tft export: wrote {written['full']} (translate, translate_ids) and {written['ids_only']} "
          f"(translate_ids, core ops only) with {describe(decode)} in {time.time() - start:.1f} s",
          file=sys.stderr)
    return 0


def run_ctranslate2(args: argparse.Namespace, decode, vocab: str) -> int:
    """``tft export --format ctranslate2``: see :mod:`tf_transformer.serving.ctranslate2`."""
    from tf_transformer.decoding.translator import load_model, load_tokenizer
    from tf_transformer.serving import ctranslate2 as ct2

    ct2.require_ctranslate2()  # before the model is loaded: fail fast without the extra
    if args.quantization is not None and args.quantization not in ct2.QUANTIZATIONS:
        raise UserError(f"--quantization {args.quantization}: not one of {', '.join(ct2.QUANTIZATIONS)}")
    start = time.time()
    model = load_model(args.model)
    tok = load_tokenizer(vocab, model)
    settings = {"beam_size": decode.beam_size, "alpha": decode.alpha, "max_extra_length": decode.max_extra_length}
    written = ct2.export_ctranslate2(model, tok, args.output, quantization=args.quantization, overwrite=args.force,
                                     source=args.model, decode=settings)
    print(f"tft export: wrote the CTranslate2 model {written['dir']} ({args.quantization or 'float32'} weights) "
          f"in {time.time() - start:.1f} s; translate with: tft translate --engine ctranslate2 --model "
          f"{written['dir']}", file=sys.stderr)
    return 0
