"""The description both export formats write (export.json, tft_export.json)."""

import json
import os
from types import SimpleNamespace

from tf_transformer.serving.info import export_info


def _parts(case_markup=False):
    model = SimpleNamespace(vocab_size=10000, max_length=256)
    tok = SimpleNamespace(model_path="/v/vocab.model", unk_id=7, bos_id=8, eos_id=9, case_markup=case_markup)
    return model, tok


def test_ids_come_from_the_tokenizer_and_fields_are_json():
    model, tok = _parts(case_markup=True)
    decode = {"beam_size": 5, "alpha": 0.6}
    info = export_info(model, tok, source="m.keras", decode=decode, format="ctranslate2", quantization="int8")
    assert info["ids"] == {"pad": 0, "unk": 7, "bos": 8, "eos": 9}
    assert (info["vocab_size"], info["max_length"], info["vocab"]) == (10000, 256, "/v/vocab.model")
    assert info["case_markup"] is True and info["model"] == os.path.abspath("m.keras")  # absolute: read from anywhere
    assert (info["format"], info["quantization"]) == ("ctranslate2", "int8")
    assert info["decode"] == decode and info["decode"] is not decode  # a copy, not the caller's dict
    assert json.loads(json.dumps(info)) == info


def test_both_formats_share_the_common_fields():
    model, tok = _parts()
    saved = export_info(model, tok, source="m.keras", decode={"beam_size": 4}, version=3)
    ct2 = export_info(model, tok, source="m.keras", decode={"beam_size": 4}, format="ctranslate2",
                      vocab_file="sentencepiece.model", quantization="float32")
    common = set(saved) & set(ct2)
    assert {"vocab_size", "max_length", "ids", "case_markup", "decode", "vocab", "model"} <= common
    assert all(saved[k] == ct2[k] for k in common - {"exported_at"})
    assert saved["version"] == 3 and "version" not in ct2
    # a tokenizer without the case attribute (a plain SentencePiece wrapper) has no markup
    del tok.case_markup
    assert export_info(model, tok, source="", decode=None)["case_markup"] is False
