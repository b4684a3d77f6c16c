"""`tft export`: SavedModels reload in fresh processes with the same outputs; the ids-only
model needs no TF Text; saved_model_cli lists the signatures."""

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers.tiny_model import toy_sentences

TEXTS = toy_sentences(58, seed=11) + [
    "",
    "   ",
    "the cat \udcff sits",  # placeholder, replaced by invalid bytes below
    " ".join(["a dog runs in the park"] * 40),  # over the model limit of 64 tokens
    "a",
    "a red ball in the blue water with the girl and the boy.",
]
RAW_TEXTS = [t.encode("utf-8", "surrogateescape") for t in TEXTS]  # line 61 holds the byte 0xff
SOURCE_IDS = [[5, 6, 7, 8, 0, 0], [9, 10, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [11, 12, 13, 14, 15, 999]]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


@pytest.fixture(scope="module")
def exported(assets, tmp_path_factory):
    from tf_transformer.decoding.translator import load_model, load_tokenizer
    from tf_transformer.serving.export import build_module, export_model

    model = load_model(assets[0])
    tok = load_tokenizer(assets[1], model)
    out = tmp_path_factory.mktemp("export") / "translator"
    written = export_model(model, tok, out, version=1, beam_size=3, alpha=0.6, max_extra_length=8,
                           log=lambda m: None)
    module = build_module(model, tok, beam_size=3, alpha=0.6, max_extra_length=8)
    import tensorflow as tf

    text = module.translate(tf.constant(RAW_TEXTS))
    ids = module.translate_ids(tf.constant(SOURCE_IDS, tf.int32))
    reference = {
        "translation": [t.decode("utf-8") for t in text["translation"].numpy()],
        "text_scores": text["scores"].numpy().tolist(),
        "ids": ids["ids"].numpy().tolist(),
        "lengths": ids["lengths"].numpy().tolist(),
        "ids_scores": ids["scores"].numpy().tolist(),
    }
    return out, written, reference


def _run(code, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(code))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, env=ENV, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def test_layout_and_in_process_rules(exported):
    out, _written, ref = exported
    assert (out / "1" / "saved_model.pb").is_file()
    assert (out / "ids_only" / "1" / "saved_model.pb").is_file()
    info = json.loads((out / "export.json").read_text())
    assert info["decode"] == {"beam_size": 3, "alpha": 0.6, "max_extra_length": 8, "stop_rule": "bound"}
    assert info["case_markup"] is False  # the tiny vocabulary has no case markers
    tr = ref["translation"]
    assert len(tr) == 64
    assert tr[58] == "" and tr[59] == "" and ref["text_scores"][58] == 0.0
    assert sum(1 for t in tr if t) > 40  # real outputs
    assert ref["lengths"][2] == 0 and ref["ids"][2] == [0] * len(ref["ids"][2])
    assert all(n <= src + 8 for n, src in zip(ref["lengths"], [4, 2, 0, 6]))


@pytest.mark.slow
def test_full_model_reloads_in_fresh_process(exported, tmp_path):
    out, _, ref = exported
    got = _run(f"""
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # registers the SentencePiece ops
        m = tf.saved_model.load({str(out / "1")!r})
        text = m.signatures["translate"](text=tf.constant({RAW_TEXTS!r}))
        ids = m.signatures["translate_ids"](source_ids=tf.constant({SOURCE_IDS!r}, tf.int32))
        default = m.signatures["serving_default"](text=tf.constant({RAW_TEXTS[:3]!r}))
        print(json.dumps({{
            "translation": [t.decode("utf-8") for t in text["translation"].numpy()],
            "text_scores": text["scores"].numpy().tolist(),
            "default": [t.decode("utf-8") for t in default["translation"].numpy()],
            "ids": ids["ids"].numpy().tolist(), "lengths": ids["lengths"].numpy().tolist(),
            "ids_scores": ids["scores"].numpy().tolist()}}))
        """, tmp_path)
    assert got["translation"] == ref["translation"]
    assert got["default"] == ref["translation"][:3]
    np.testing.assert_allclose(got["text_scores"], ref["text_scores"], atol=1e-4)
    assert got["ids"] == ref["ids"] and got["lengths"] == ref["lengths"]
    np.testing.assert_allclose(got["ids_scores"], ref["ids_scores"], atol=1e-4)


@pytest.mark.slow
def test_ids_only_model_runs_without_tensorflow_text(exported, tmp_path):
    out, _, ref = exported
    got = _run(f"""
        import json, sys
        import tensorflow as tf
        m = tf.saved_model.load({str(out / "ids_only" / "1")!r})
        res = m.signatures["translate_ids"](source_ids=tf.constant({SOURCE_IDS!r}, tf.int32))
        assert "tensorflow_text" not in sys.modules
        print(json.dumps({{"ids": res["ids"].numpy().tolist(), "lengths": res["lengths"].numpy().tolist(),
                          "scores": res["scores"].numpy().tolist(),
                          "tf_text_loaded": "tensorflow_text" in sys.modules}}))
        """, tmp_path)
    assert got["tf_text_loaded"] is False
    assert got["ids"] == ref["ids"] and got["lengths"] == ref["lengths"]
    np.testing.assert_allclose(got["scores"], ref["ids_scores"], atol=1e-4)


@pytest.mark.slow
def test_saved_model_cli_lists_signatures(exported):
    import tensorflow as tf

    out, _, _ = exported
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")

    def show(d):
        proc = subprocess.run([cli, "show", "--dir", str(d), "--all"], capture_output=True, env=ENV, timeout=300,
                              check=False)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        return proc.stdout.decode()

    full = show(out / "1")
    for name in ("translate", "translate_ids", "serving_default"):
        assert f"signature_def['{name}']" in full
    assert "inputs['text']" in full and "inputs['source_ids']" in full and "outputs['translation']" in full
    ids_only = show(out / "ids_only" / "1")
    assert "signature_def['translate_ids']" in ids_only and "signature_def['translate']" not in ids_only
    # every op of the ids-only graph is a core TensorFlow op
    line = next(x for x in ids_only.splitlines() if "contains the following ops:" in x)
    ops = {o.strip().strip("'") for o in line.split("{", 1)[1].rstrip("}").split(",")}
    assert ops and not [o for o in ops if not hasattr(tf.raw_ops, o)]
    assert not [o for o in ops if "Sentencepiece" in o]


def test_cli_export_refuses_to_overwrite(assets, tmp_path, capsys):
    from tf_transformer.cli import main

    out = tmp_path / "m"
    (out / "1").mkdir(parents=True)
    assert main(["export", "--model", assets[0], "--vocab", assets[1], "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--version 2" in err
    assert main(["export", "--model", assets[0], "--vocab", assets[1], "--output", str(out), "--version", "0"]) == 2
    # the version offered is free in ids_only/ too
    (out / "ids_only" / "3").mkdir(parents=True)
    assert main(["export", "--model", assets[0], "--vocab", assets[1], "--output", str(out), "--version", "3"]) == 2
    assert "ids_only/3 already exists; export as --version 4" in capsys.readouterr().err


def test_export_model_checks_its_decode_settings(tiny, tmp_path):
    """export_model (Python) refuses what tft export refuses, before tracing anything."""
    from tf_transformer.errors import UserError
    from tf_transformer.serving.export import export_model

    model, tok = tiny
    for bad, message in (({"beam_size": 0}, "beam_size=0: must be >= 1"),
                         ({"max_extra_length": -3}, "max_extra_length=-3: must be >= 0"),
                         ({"beam_size": 2.7}, "beam_size=2.7, max_extra_length=50: must be whole numbers")):
        with pytest.raises(UserError, match=re.escape(message)):
            export_model(model, tok, tmp_path / "x", **bad)
        assert not (tmp_path / "x").exists()


def test_export_json_records_every_version_and_the_served_one(assets, tmp_path, capsys, monkeypatch):
    """Exporting version 2 (greedy) and then version 1 (beam 2): the top of export.json is the
    latest export, ``versions`` keeps both settings, ``served`` is the one TF Serving loads.
    The model and vocabulary, given relative to the working directory, are recorded absolute."""
    from tf_transformer.cli import main

    out = tmp_path / "m"
    monkeypatch.chdir(os.path.dirname(assets[0]))
    model, vocab = os.path.basename(assets[0]), os.path.basename(assets[1])
    base = ["export", "--model", model, "--vocab", vocab, "--output", str(out), "--max-extra-len", "5"]
    assert main(base + ["--version", "2", "--beam", "1"]) == 0
    assert main(base + ["--version", "1", "--beam", "2"]) == 0
    info = json.loads((out / "export.json").read_text())
    assert info["version"] == 1 and info["decode"]["beam_size"] == 2 and info["served"] == 2
    assert list(info["versions"]) == ["1", "2"]
    assert [info["versions"][v]["decode"]["beam_size"] for v in ("1", "2")] == [2, 1]
    assert os.path.isabs(assets[0]) and info["versions"]["2"]["model"] == assets[0]
    assert info["model"] == assets[0] and info["vocab"] == assets[1]
    # a version folder that export.json does not record (an older export) still counts for served
    (out / "7").mkdir()
    assert main(base + ["--version", "3", "--beam", "1"]) == 0
    info = json.loads((out / "export.json").read_text())
    assert info["served"] == 7 and list(info["versions"]) == ["1", "2", "3"]


def test_whitespace_only_strings_translate_to_empty_as_in_tft_translate(assets):
    """Every character ``str.isspace()`` calls whitespace, alone or in a run, gives "" (score 0)
    through the ``translate`` signature, as through ``Translator`` (``tft translate`` tests
    ``line.strip()``): NEL (U+0085) too, which SentencePiece reads as a token. Text around
    such characters is translated, the same on both paths."""
    import tensorflow as tf

    from tf_transformer.decoding.translator import Translator, load_model, load_tokenizer
    from tf_transformer.serving.export import build_module

    model = load_model(assets[0])
    tok = load_tokenizer(assets[1], model)
    spaces = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    blank = spaces + ["".join(spaces), " \x85\u2028 ", "\x85\x85", ""]
    texts = blank + ["a dog\x85", "\x85 the cat sits.", "\u200b", "\xad", "a\u3000ball."]
    assert tok.encode(["\x85"])[0]  # not dropped by SentencePiece: the whitespace test must catch it
    settings = dict(beam_size=2, alpha=0.6, max_extra_length=4)
    served = build_module(model, tok, **settings).translate(tf.constant([t.encode("utf-8") for t in texts]))
    got = [t.decode("utf-8") for t in served["translation"].numpy()]
    ours, scores, _ = Translator(model, tok, **settings).translate(texts)
    assert got == ours
    assert got[: len(blank)] == [""] * len(blank)
    assert served["scores"].numpy()[: len(blank)].tolist() == [0.0] * len(blank)
    assert got[len(blank)] and got[len(blank) + 1]
    np.testing.assert_allclose(served["scores"].numpy(), scores, atol=1e-3)
