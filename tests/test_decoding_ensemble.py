"""Ensembles: the mean of the members' probabilities, through every search and the CLI."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.cli import main
from tf_transformer.decoding.ensemble import Ensemble, mean_probabilities
from tf_transformer.decoding.translator import Translator
from tf_transformer.errors import UserError
from tf_transformer.model import Transformer


def np_(x):
    return keras.ops.convert_to_numpy(x)


def np_mixture(*logits):
    """log of the mean of softmaxes, in float64."""
    probs = [np.exp(x - x.max(-1, keepdims=True)) for x in map(np.float64, logits)]
    probs = [p / p.sum(-1, keepdims=True) for p in probs]
    return np.log(np.mean(probs, axis=0))


def perturbed(model, scale=0.3, seed=1):
    """A second member: the same architecture, every weight moved by seeded noise of ``scale``
    times the weight's own spread (so the two disagree, but both still mostly copy)."""
    other = Transformer.from_config(model.get_config())
    other.build()
    rng = np.random.default_rng(seed)
    other.set_weights([w + scale * (w.std() or 1.0) * rng.standard_normal(w.shape).astype(w.dtype)
                       for w in model.get_weights()])
    return other


def test_mean_probabilities_is_the_log_of_the_mean_softmax():
    rng = np.random.default_rng(0)
    a, b, c = (rng.normal(size=(3, 5, 11)).astype("float32") * 4 for _ in range(3))
    np.testing.assert_allclose(np_(mean_probabilities([a, b, c])), np_mixture(a, b, c), atol=1e-5)
    # normalised: a softmax leaves it unchanged; one member alone is its log-softmax
    out = np_(mean_probabilities([a, b]))
    np.testing.assert_allclose(np.exp(out).sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(np_(mean_probabilities([a])), np_(tf.nn.log_softmax(a)), atol=1e-6)
    # exact far in the tail, where a probability underflows float32 (exp(-150) = 0)
    x = np.array([[0.0, -150.0, -300.0, 5.0]], "float32")
    y = np.array([[0.0, -160.0, -250.0, -5.0]], "float32")
    out = np_(mean_probabilities([x, y]))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, np_mixture(x, y), rtol=1e-6, atol=1e-4)


def test_cached_steps_and_the_teacher_forced_call_give_the_members_mixture(tiny):
    model, _ = tiny
    other = perturbed(model)
    ensemble = Ensemble([model, other])
    rng = np.random.default_rng(3)
    src = rng.integers(4, model.vocab_size, size=(3, 7)).astype("int32")
    src[1, 5:] = 0
    tgt = np.concatenate([np.full((3, 1), 2, "int32"), rng.integers(4, model.vocab_size, size=(3, 5))], 1)
    tgt = tgt.astype("int32")
    full = np_(ensemble((src, tgt)))
    np.testing.assert_allclose(full, np_mixture(np_(model((src, tgt))), np_(other((src, tgt)))), atol=1e-5)
    memory, mask = ensemble.encode(src)
    cache = ensemble.init_cache(memory, mask)
    weights = ensemble.step_weights()
    for step in range(tgt.shape[1]):
        out, cache = ensemble.decode_step(tgt[:, step], step, cache, weights=weights)
        np.testing.assert_allclose(np_(out), full[:, step], atol=1e-5)
    np.testing.assert_allclose(np_(ensemble.decode(tgt, memory, mask)), full, atol=1e-5)


def test_greedy_search_follows_the_mixture_not_either_member(tiny):
    model, tok = tiny
    other = perturbed(model, scale=0.5, seed=4)
    ensemble = Ensemble([model, other])
    sentences = ["a dog runs in the park.", "the red ball.", "a man with a blue ball sits on the grass."]
    outputs, scores, _ = Translator(ensemble, tok, beam_size=1, max_extra_length=8).translate(sentences)
    # the reference: argmax of the NumPy mixture of the members' teacher-forced logits, one token at a time
    for sentence, output, score in zip(sentences, outputs, scores):
        src = np.array([tok.encode([sentence])[0]], "int32")
        prefix, total = [2], 0.0
        for _ in range(src.shape[1] + 8):
            tgt = np.array([prefix], "int32")
            mix = np_mixture(np_(model((src, tgt)))[0, -1], np_(other((src, tgt)))[0, -1])
            mix[[0, 2]] = -np.inf  # padding and BOS are never written
            token = int(np.argmax(mix))
            total += mix[token]
            if token == 3:
                break
            prefix.append(token)
        assert output == tok.decode([prefix[1:]])[0]
        assert score == pytest.approx(total, abs=1e-3)
    # the members alone translate differently (so the check above tells the mixture from either)
    alone = [Translator(m, tok, beam_size=1, max_extra_length=8).translate(sentences)[0] for m in (model, other)]
    assert alone[0] != alone[1]


def test_a_model_twice_translates_and_scores_as_the_model(tiny):
    model, tok = tiny
    sentences = ["a dog runs.", "the girl plays with a red ball in the water.", "", "two cats sit."]
    for beam in (1, 4):
        one = Translator(model, tok, beam_size=beam, alpha=0.6)
        two = Translator(Ensemble([model, model]), tok, beam_size=beam, alpha=0.6)
        (out1, s1, _), (out2, s2, _) = one.translate(sentences), two.translate(sentences)
        assert out1 == out2
        np.testing.assert_allclose(s1, s2, atol=1e-4)
    targets = ["a dog runs.", "the girl plays.", "", "cats."]
    np.testing.assert_allclose(np.nan_to_num(one.score(sentences, targets)[0]),
                               np.nan_to_num(two.score(sentences, targets)[0]), atol=1e-4)


def test_beam_search_through_the_cache_equals_the_uncached_decoder(tiny):
    from tf_transformer.decoding.model_fns import translate_batch

    model, tok = tiny
    ensemble = Ensemble([model, perturbed(model)])
    ids = tok.encode(["a dog runs in the park.", "the red ball."])
    src = np.zeros((2, max(map(len, ids))), "int32")
    for i, s in enumerate(ids):
        src[i, :len(s)] = s
    cached = translate_batch(ensemble, src, beam_size=4, alpha=0.6, max_extra_length=6, n_best=3)
    uncached = translate_batch(ensemble, src, beam_size=4, alpha=0.6, max_extra_length=6, n_best=3, cached=False)
    np.testing.assert_array_equal(np_(cached[0]), np_(uncached[0]))
    np.testing.assert_allclose(np_(cached[1]), np_(uncached[1]), atol=1e-4)


class Shifted(Ensemble):
    """An ensemble whose outputs are moved up by 1 (no longer normalised): shows whether decoding
    and scoring take them as they are (the ensemble's contract) or log-softmax them again."""

    def decode_step(self, token_ids, step, cache, weights=None):
        out, cache = super().decode_step(token_ids, step, cache, weights=weights)
        return out + 1.0, cache

    def __call__(self, inputs, training=None):
        return super().__call__(inputs, training=training) + 1.0


def test_searches_and_scoring_take_the_ensembles_log_probabilities_as_they_are(tiny):
    from tf_transformer.decoding.model_fns import score_batch, translate_batch

    model, tok = tiny
    members = [model, perturbed(model)]
    plain, shifted = Ensemble(members), Shifted(members)
    ids = tok.encode(["a dog runs in the park.", "the red ball."])
    src = np.zeros((2, max(map(len, ids))), "int32")
    for i, s in enumerate(ids):
        src[i, :len(s)] = s
    out, scores = map(np_, translate_batch(plain, src, beam_size=1, max_extra_length=6))
    out2, scores2 = map(np_, translate_batch(shifted, src, beam_size=1, max_extra_length=6))
    np.testing.assert_array_equal(out, out2)
    # greedy's score is a sum over the generated tokens and EOS: +1 for each
    steps = np.minimum((out != 0).sum(1) + 1, out.shape[1])
    np.testing.assert_allclose(scores2 - scores, steps, atol=1e-4)
    tgt_in = np.concatenate([np.full((2, 1), 2, "int32"), out], 1)
    tgt_out = np.concatenate([out, np.zeros((2, 1), "int32")], 1)
    tgt_out[np.arange(2), (out != 0).sum(1)] = 3  # EOS after the tokens
    total, count = map(np_, score_batch(plain, src, tgt_in, tgt_out))
    total2, count2 = map(np_, score_batch(shifted, src, tgt_in, tgt_out))
    np.testing.assert_array_equal(count, count2)
    np.testing.assert_allclose(total2 - total, count, atol=1e-4)


def test_members_must_share_the_vocabulary(tiny):
    model, _ = tiny
    with pytest.raises(UserError, match="at least two models, got 1"):
        Ensemble([model])
    small = Transformer(vocab_size=40, d_model=16, num_layers=1, num_heads=2, d_ff=32)
    with pytest.raises(UserError, match=r"differ in vocab_size \(a: 48, b: 40\)"):
        Ensemble([model, small], names=["a", "b"])
    shorter = Transformer.from_config(dict(model.get_config(), max_length=20))
    assert Ensemble([model, shorter]).max_length == 20


@pytest.fixture(scope="module")
def member_file(tiny, tmp_path_factory):
    path = tmp_path_factory.mktemp("member") / "other.keras"
    perturbed(tiny[0]).save(path)
    return str(path)


def test_cli_translate_and_evaluate_with_two_models(tiny, assets, member_file, tmp_path, capsys):
    model, tok = tiny
    sentences = ["a dog runs.", "the boy walks on the street with a blue ball.", "a cat."]
    (tmp_path / "in.en").write_text("\n".join(sentences) + "\n")
    assert main(["translate", "--model", assets[0], "--model", member_file, "--vocab", assets[1], "--beam", "3",
                 "--input", str(tmp_path / "in.en"), "--output", str(tmp_path / "out.txt"), "--quiet"]) == 0
    assert "an ensemble of 2 models" in capsys.readouterr().err
    expected = Translator(Ensemble([model, keras.saving.load_model(member_file)]), tok, beam_size=3,
                          alpha=0.6).translate(sentences)[0]
    assert (tmp_path / "out.txt").read_text().splitlines() == expected
    (tmp_path / "ref.de").write_text("\n".join(sentences) + "\n")
    assert main(["evaluate", "--model", assets[0], "--model", member_file, "--vocab", assets[1], "--beam", "3",
                 "--source", str(tmp_path / "in.en"), "--reference", str(tmp_path / "ref.de"),
                 "--output", str(tmp_path / "hyp.txt"), "--json", str(tmp_path / "e.json"), "--quiet"]) == 0
    assert (tmp_path / "hyp.txt").read_text().splitlines() == expected
    assert json.loads((tmp_path / "e.json").read_text())["ensemble"] == [member_file]
    # --resume keys its record by every member: the same output with one model is refused
    common = ["--vocab", assets[1], "--beam", "3", "--input", str(tmp_path / "in.en"), "--output",
              str(tmp_path / "r.txt"), "--resume", "--quiet"]
    assert main(["translate", "--model", assets[0], "--model", member_file, *common]) == 0
    assert (tmp_path / "r.txt").read_text().splitlines() == expected
    assert main(["translate", "--model", assets[0], *common]) == 2
    assert "ensemble" in capsys.readouterr().err


def test_cli_ensemble_errors(assets, member_file, tmp_path, capsys):
    # a member from a run directory trained on other pieces
    run = tmp_path / "run"
    run.mkdir()
    keras.saving.load_model(member_file).save(run / "model.keras")
    (run / "config.yaml").write_text("name: other\n")
    import sentencepiece as spm
    from helpers.tiny_model import toy_sentences
    spm.SentencePieceTrainer.train(sentence_iterator=iter(toy_sentences()[::-1]), model_prefix=str(run / "vocab"),
                                   vocab_size=48, model_type="unigram", pad_id=0, unk_id=1, bos_id=2, eos_id=3)
    (tmp_path / "in.en").write_text("a dog.\n")
    assert main(["translate", "--model", assets[0], "--model", str(run), "--vocab", assets[1],
                 "--input", str(tmp_path / "in.en")]) == 2
    err = capsys.readouterr().err
    assert f"--model {run}: trained with another vocabulary ({run / 'vocab.model'})" in err
    assert "different from id" in err
    assert "Traceback" not in err
    # a missing member is named; CTranslate2 takes one model; export refuses a second --model
    assert main(["translate", "--model", assets[0], "--model", str(tmp_path / "nope.keras"), "--vocab", assets[1],
                 "--input", str(tmp_path / "in.en")]) == 2
    assert f"--model {tmp_path / 'nope.keras'}: no such file or directory" in capsys.readouterr().err
    assert main(["translate", "--model", str(tmp_path), "--model", member_file, "--engine", "ctranslate2",
                 "--input", str(tmp_path / "in.en")]) == 2
    assert "an ensemble decodes with --engine tensorflow only" in capsys.readouterr().err
    assert main(["export", "--model", assets[0], "--model", member_file, "--vocab", assets[1], "--format",
                 "ctranslate2", "--output", str(tmp_path / "ct2")]) == 2
    assert "a CTranslate2 model directory holds one model" in capsys.readouterr().err
    # a command that takes one model refuses a second instead of keeping the last
    with pytest.raises(SystemExit):
        main(["plot-attention", "--model", assets[0], "--model", member_file, "--sentence", "a dog.",
              "--output", str(tmp_path / "a.png")])
    assert "--model given twice" in capsys.readouterr().err
    assert not (tmp_path / "ct2").exists() and not (tmp_path / "a.png").exists()


def test_exported_ensemble_translates_as_the_ensemble(tiny, assets, member_file, tmp_path, capsys):
    model, tok = tiny
    out = tmp_path / "export"
    assert main(["export", "--model", assets[0], "--model", member_file, "--vocab", assets[1], "--beam", "3",
                 "--output", str(out)]) == 0
    assert "an ensemble of 2 models" in capsys.readouterr().err
    info = json.loads((out / "export.json").read_text())
    assert info["ensemble"] == [member_file] and info["versions"]["1"]["ensemble"] == [member_file]
    sentences = ["a dog runs.", "the boy walks on the street with a blue ball.", ""]
    loaded = tf.saved_model.load(str(out / "1"))
    served = loaded.signatures["translate"](text=tf.constant(sentences))
    expected, scores, _ = Translator(Ensemble([model, keras.saving.load_model(member_file)]), tok, beam_size=3,
                                     alpha=0.6).translate(sentences)
    assert [t.decode() for t in served["translation"].numpy()] == expected
    np.testing.assert_allclose(served["scores"].numpy()[:2], scores[:2], atol=1e-4)
