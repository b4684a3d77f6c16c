"""What an export says about its model, shared by both export formats.

``export.json`` (SavedModel, :mod:`tf_transformer.serving.export`) and ``tft_export.json``
(CTranslate2, :mod:`tf_transformer.serving.ctranslate2`) carry the same description of the
model a client needs to feed it: vocabulary size, length limit, special ids, whether the
vocabulary uses case markup or lowercases, and the decoding defaults. Both are built here, so the two
cannot drift apart; each format adds its own fields (signatures, quantization).
"""

from __future__ import annotations

import os
import time

__all__ = ["export_info"]


def export_info(model, tokenizer, *, source: str, decode: dict | None, ensemble=(), **fields) -> dict:
    """The JSON-ready description of ``model`` exported with ``tokenizer``.

    ``source``: where the model came from (the ``--model`` path); ``decode``: the decoding
    settings baked in or recommended (beam size, alpha, ...); ``ensemble``: the paths of an
    ensemble's further members (``source`` is its first; recorded as ``"ensemble"`` only when
    given); ``fields``: format-specific entries, placed before the common ones. The ids are
    the tokenizer's own. The model and vocabulary paths are recorded absolute, so the record
    names the same files from any working directory.
    """
    vocab = getattr(tokenizer, "model_path", None)
    info = dict(fields)
    info.update({
        "model": os.path.abspath(source) if source else source,
        **({"ensemble": [os.path.abspath(p) for p in ensemble]} if ensemble else {}),
        "vocab": os.path.abspath(vocab) if vocab else vocab,
        "vocab_size": int(model.vocab_size),
        "max_length": int(model.max_length),
        "ids": {"pad": 0, "unk": int(tokenizer.unk_id), "bos": int(tokenizer.bos_id),
                "eos": int(tokenizer.eos_id)},
        # clients that tokenize themselves mark and unmark the case (data/case_markup.py)
        "case_markup": bool(getattr(tokenizer, "case_markup", False)),
        # a lowercasing vocabulary (data.lowercase): clients lowercase the source themselves
        "lowercase": bool(getattr(tokenizer, "lowercase", False)),
        # its outputs recased by the vocabulary's recaser (inside the signatures; in Python,
        # Tokenizer.decode does it)
        "recased": getattr(tokenizer, "recaser", None) is not None,
        "decode": dict(decode or {}),
        "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    })
    return info
