"""SavedModels for TensorFlow Serving (behind ``tft export``).

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
    the decoding settings baked into the graphs, the vocabulary and the model they came from
    (of the latest export), ``versions``: the same for every version in ``DIR``, and
    ``served``: the version TF Serving serves (the highest).

TF Serving scans a model base path for numeric sub-directories, so ``DIR`` serves the
full model and ``DIR/ids_only`` the core-ops one. Decoding settings (beam size, alpha,
max extra length) are fixed at export time. Input rules are those of ``tft translate``:
invalid UTF-8 bytes are replaced with U+FFFD in the graph, an empty or whitespace-only
string gives an empty translation (score 0), sources are cut to the model's
``max_length`` tokens, ids outside the vocabulary are read as ``<unk>``. Whitespace is what
Python's ``str.isspace()`` calls whitespace (``tft translate`` tests ``line.strip()``): the
graph matches the text against a class of exactly those characters
(:func:`whitespace_only_pattern`), NEL (U+0085) among them, which SentencePiece's
normalisation does not drop.
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

from tf_transformer.decoding.batches import check_decode_settings, check_stop_rule
from tf_transformer.errors import UserError
from tf_transformer.io import atomic_path, atomic_write, check_writable, say, state_bytes
from tf_transformer.serving.info import export_info

IDS_ONLY_DIR = "ids_only"


@functools.lru_cache(maxsize=1)
def whitespace_only_pattern() -> str:
    """An RE2 pattern (``tf.strings.regex_full_match``) that matches a string made only of
    characters for which ``str.isspace()`` is true, the empty string included."""
    spaces = [c for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    runs = []  # [first, last] code points of consecutive runs
    for c in spaces:
        if runs and runs[-1][1] == c - 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    ranges = "".join(f"\\x{{{a:x}}}" + (f"-\\x{{{b:x}}}" if b > a else "") for a, b in runs)
    return f"[{ranges}]*"


class VersionExists(UserError):
    """The version directory to export to exists already (and ``overwrite`` is off)."""

    def __init__(self, path: Path, next_version: int):
        super().__init__(f"{path} already exists; export as version {next_version} (TF Serving picks the "
                         "highest) or replace it (overwrite=True)")
        self.path = path
        self.next_version = next_version


def _module_class():
    import tensorflow as tf

    from tf_transformer.decoding.model_fns import model_limit, translate_batch

    class TranslatorModule(tf.Module):
        """Holds the Keras model (its variables are saved through it), the SentencePiece
        resource when ``tokenizer`` is given, and the signature functions."""

        def __init__(self, model, tokenizer=None, beam_size=4, alpha=0.6, max_extra_length=50, bos_id=2,
                     eos_id=3, unk_id=1, stop_rule="bound"):
            super().__init__(name="translator")
            self.model = model
            self._settings = {"beam_size": int(beam_size), "alpha": float(alpha),
                              "max_extra_length": int(max_extra_length), "bos_id": int(bos_id),
                              "eos_id": int(eos_id), "stop_rule": str(stop_rule)}
            self._limit = model_limit(model)
            self._vocab_size = int(model.vocab_size)
            self._unk_id = int(unk_id)
            # autograph=False, as in tft translate (the same decoding function, traced the same way)
            self.translate_ids = tf.function(
                self._translate_ids, input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")],
                autograph=False)
            if tokenizer is not None:
                self.sentencepiece = tokenizer.tf_tokenizer  # a tracked resource: saved as an asset
                if getattr(tokenizer, "recaser", None) is not None:  # its lookup tables, saved with it
                    self.recaser_tables = tokenizer.recaser.tf_tables()
                # its tokenize/detokenize (case markup included) run on that same resource
                self._tokenizer = tokenizer
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
            # whitespace-only (str.isspace) -> "", which tokenizes to no ids: an empty translation
            text = tf.where(tf.strings.regex_full_match(text, whitespace_only_pattern()), "", text)
            tokens = self._tokenizer.tokenize(text)
            dense = tokens[:, : self._limit].to_tensor(default_value=0)
            result = self._translate_ids(dense)
            return {"translation": self._tokenizer.detokenize(result["ids"]), "scores": result["scores"]}

    return TranslatorModule


def build_module(model, tokenizer=None, beam_size=4, alpha=0.6, max_extra_length=50, stop_rule="bound"):
    """A ``tf.Module`` with ``translate_ids`` (and ``translate`` when ``tokenizer`` is given)."""
    check_stop_rule(stop_rule)
    cls = _module_class()
    kwargs = {"stop_rule": stop_rule}
    if tokenizer is not None:
        kwargs.update(bos_id=tokenizer.bos_id, eos_id=tokenizer.eos_id, unk_id=tokenizer.unk_id)
    return cls(model, tokenizer, beam_size=beam_size, alpha=alpha, max_extra_length=max_extra_length, **kwargs)


def export_model(model, tokenizer, output_dir, version: int = 1, beam_size: int = 4, alpha: float = 0.6,
                 max_extra_length: int = 50, overwrite: bool = False, source: str = "", log=None,
                 stop_rule: str = "bound", ensemble=()) -> dict:
    """Write ``output_dir/<version>`` (translate + translate_ids), ``output_dir/ids_only/<version>``
    (translate_ids, core ops only) and ``output_dir/export.json``. Returns their paths.
    ``model`` may be a :class:`tf_transformer.decoding.Ensemble` (its members' variables are
    saved, and the signatures decode with the mean of their probabilities); ``ensemble``: the
    paths of its further members, for ``export.json`` (``source`` names the first)."""
    import tensorflow as tf

    log = log or say
    if version < 1:
        raise UserError(f"version {version}: must be >= 1 (TF Serving versions are positive integers)")
    check_decode_settings(beam_size, alpha, max_extra_length, batch_size=1)
    if int(beam_size) != beam_size or int(max_extra_length) != max_extra_length:
        raise UserError(f"beam_size={beam_size}, max_extra_length={max_extra_length}: must be whole numbers")
    out = Path(output_dir)
    full_dir, ids_dir = out / str(version), out / IDS_ONLY_DIR / str(version)
    for d in (full_dir, ids_dir):
        if d.exists() and not overwrite:
            # the next version free in both folders (the full model's and ids_only's)
            existing = [int(p.name) for folder in (out, out / IDS_ONLY_DIR) if folder.is_dir()
                        for p in folder.iterdir() if p.name.isdigit()]
            raise VersionExists(d, max(existing, default=version) + 1)
    check_writable(out, 2 * (state_bytes(model) + 2**20), "two SavedModels")  # before tracing
    settings = {"beam_size": beam_size, "alpha": alpha, "max_extra_length": max_extra_length, "stop_rule": stop_rule}

    written = {}
    for name, target, tok in (("full", full_dir, tokenizer), ("ids_only", ids_dir, None)):
        module = build_module(model, tok, **settings)
        if tok is not None:
            signatures = {"serving_default": module.translate, "translate": module.translate,
                          "translate_ids": module.translate_ids}
        else:
            signatures = {"serving_default": module.translate_ids, "translate_ids": module.translate_ids}
        log(f"export: tracing and writing {target} ({', '.join(sorted(set(signatures) - {'serving_default'}))})")
        with atomic_path(target) as tmp:
            tf.saved_model.save(module, str(tmp), signatures=signatures)
        written[name] = str(target)

    info = export_info(model, tokenizer, source=source, decode=settings, version=version, ensemble=ensemble)
    info["signatures"] = {
        str(full_dir.relative_to(out)): ["translate (serving_default)", "translate_ids"],
        str(ids_dir.relative_to(out)): ["translate_ids (serving_default)"],
    }
    info["versions"] = _versions(out, version, info)
    # what TF Serving loads from DIR: the highest version folder there (of any export, recorded or not)
    info["served"] = max(int(p.name) for p in out.iterdir() if p.name.isdigit() and p.is_dir())
    atomic_write(out / "export.json", json.dumps(info, indent=2) + "\n")
    written["info"] = str(out / "export.json")
    return written


def _versions(out: Path, version: int, info: dict) -> dict:
    """Each version directory's own record (model, decoding settings, time), this export's
    included: the top of ``export.json`` describes the latest export, which need not be the
    version TF Serving serves (the highest). Records of versions whose directory is gone are
    dropped."""
    try:
        old = json.loads((out / "export.json").read_text()).get("versions", {})
    except (OSError, ValueError, AttributeError):
        old = {}
    record = {k: info[k] for k in ("model", "ensemble", "vocab", "decode", "exported_at") if k in info}
    versions = {k: v for k, v in old.items() if k.isdigit() and (out / k).is_dir() and k != str(version)}
    versions[str(version)] = record
    return dict(sorted(versions.items(), key=lambda kv: int(kv[0])))
