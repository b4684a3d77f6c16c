"""What a Keras user expects of the package (issue: run-dir defaults, one CLI grammar, a quiet
log, ``summary()``, a Python API without source reading): each test drives the public surface."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.tiny_model import make_tiny_assets


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return make_tiny_assets(tmp_path_factory.getbasetemp() / "tft_tiny_copy_model")


# -- Broken before -------------------------------------------------------------------------------


@pytest.mark.parametrize("position_encoding", ["sinusoidal", "learned"])
@pytest.mark.parametrize("how", ["build", "call"])
def test_summary_of_a_built_transformer(position_encoding, how, capsys):
    from tf_transformer.model import Transformer, count_parameters

    model = Transformer(vocab_size=50, d_model=16, num_layers=1, num_heads=2, d_ff=32,
                        position_encoding=position_encoding, max_length=20)
    if how == "build":
        model.build()
    else:
        model((np.ones((2, 5), "int32"), np.ones((2, 4), "int32")))
    model.summary()
    out = capsys.readouterr().out
    assert f"Total params: {count_parameters(model):,}" in out
    assert "encoder (Encoder)" in out and "(None, None, 16)" in out
    assert "unbuilt" not in out


def test_params_counts_any_preset_or_yaml(tmp_path, capsys):
    from tf_transformer.cli import main
    from tf_transformer.model import Transformer, count_parameters

    yaml_path = tmp_path / "mine.yaml"
    yaml_path.write_text("model: {d_model: 32, num_layers: 1, num_heads: 2, d_ff: 64}\n")
    assert main(["params", "--vocab-size", "100", "multi30k_tiny", str(yaml_path)]) == 0
    captured = capsys.readouterr()
    rows = {line.split("|")[1].strip(): line for line in captured.out.splitlines() if line.startswith("| ")}
    expected = count_parameters(Transformer(vocab_size=100, d_model=32, num_layers=1, num_heads=2, d_ff=64))
    assert f"| {expected / 1e6:.1f} |" in rows[str(yaml_path)]
    assert "d_model=32, N=1, h=2" in rows[str(yaml_path)]
    cells = [c.strip() for c in rows["multi30k_tiny"].split("|")[1:-1]]
    assert cells[3] == cells[5] == ""  # not in Table 3: the paper's columns blank
    # progress before each model is built, on stderr (base is built for the "- base" column)
    assert "building base (1/3)" in captured.err and f"building {yaml_path} (3/3)" in captured.err


def test_params_unknown_preset_is_one_line(capsys):
    from tf_transformer.cli import main

    assert main(["params", "no_such_preset"]) == 2
    err = capsys.readouterr().err
    assert "'no_such_preset' is neither a file nor a preset" in err and "Traceback" not in err


def test_translator_accepts_the_tuners_training_model(assets):
    from tf_transformer.decoding.translator import Translator, load_model, load_tokenizer
    from tf_transformer.training.trainer import TrainingModel

    model = load_model(assets[0])
    tok = load_tokenizer(assets[1], model)
    wrapped = TrainingModel(model)  # what TransformerHyperModel's get_best_models() returns
    texts = ["a dog runs in the park.", "the girl plays."]
    direct = Translator(model, tok, beam_size=2).translate(texts)[0]
    assert Translator(wrapped, load_tokenizer(assets[1], wrapped), beam_size=2).translate(texts)[0] == direct
    with pytest.raises(TypeError, match="neither a tf_transformer Transformer"):
        Translator(object(), tok)


def _teacher_forced_log_prob(model, source_ids, output_ids):
    """log P(output + EOS | source) by one full forward pass (float64 sum)."""
    from tf_transformer.data.tokenizer import BOS_ID, EOS_ID

    target = list(output_ids) + [EOS_ID]
    logits = np.asarray(model((np.array([source_ids], "int32"), np.array([[BOS_ID] + target[:-1]], "int32"))))[0]
    logits = logits.astype("float64")
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    return float(sum(log_probs[i, t] for i, t in enumerate(target))), len(target)


def test_scores_are_what_the_help_says(assets, tmp_path, capsys):
    """--scores: greedy prints the total log-probability, beam search log P / ((5+|Y|)/6)^alpha
    (|Y| counting EOS), as ``tft translate --help`` says."""
    from tf_transformer.cli import main
    from tf_transformer.decoding.translator import load_model, load_tokenizer

    model = load_model(assets[0])
    tok = load_tokenizer(assets[1], model)
    src = tmp_path / "in.txt"
    src.write_text("a dog runs in the park.\nthe girl plays with a red ball.\n")
    for beam, alpha in ((1, 0.6), (3, 0.6), (3, 0.0)):
        out = tmp_path / f"out{beam}{alpha}.txt"
        assert main(["translate", "--model", assets[0], "--vocab", assets[1], "--beam", str(beam),
                     "--alpha", str(alpha), "--scores", "--input", str(src), "--output", str(out)]) == 0
        for source, line in zip(src.read_text().splitlines(), out.read_text().splitlines()):
            score, text = line.split("\t")
            log_prob, length = _teacher_forced_log_prob(model, tok.encode([source])[0], tok.encode([text])[0])
            expected = log_prob if beam == 1 else log_prob / ((5 + length) / 6) ** alpha
            assert math.isclose(float(score), expected, abs_tol=2e-3), (beam, alpha, line)
    helptext = _help("translate", capsys)
    assert "greedy (--beam 1): the total log-probability" in " ".join(helptext.split())


def _help(command, capsys):
    from tf_transformer.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out
