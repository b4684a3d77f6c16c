"""CTranslate2 export: the exported model computes what ours computes and decodes to the same outputs.

Needs the ``ctranslate2`` package (the ``[ct2]`` extra, also in ``[dev]``)."""

import json
import os

import numpy as np
import pytest

ctranslate2 = pytest.importorskip("ctranslate2", reason="the [ct2] extra (ctranslate2) is not installed")

from helpers.tiny_model import toy_sentences  # noqa: E402

from tf_transformer.cli import main  # noqa: E402
from tf_transformer.decoding.translator import Translator  # noqa: E402
from tf_transformer.errors import UserError  # noqa: E402
from tf_transformer.serving.ctranslate2 import (  # noqa: E402
    EXPORT_INFO,
    CT2Translator,
    ct2_length_penalty,
    export_ctranslate2,
    position_table,
)


@pytest.fixture(scope="module")
def exported(tiny, tmp_path_factory):
    model, tok = tiny
    out = tmp_path_factory.mktemp("ct2") / "tiny_ct2"
    export_ctranslate2(model, tok, out, source="tiny.keras")
    return str(out)


@pytest.fixture(scope="module")
def sources(tiny):
    tok = tiny[1]
    return tok.encode(toy_sentences(120, seed=11))


def teacher_forced_log_probs(model, source, target):
    """Our log P(target[t] | source, target[:t]) for target + EOS, from the full forward pass."""
    import keras

    src = np.array([source], np.int32)
    tgt_in = np.array([[2] + list(target)], np.int32)
    logits = keras.ops.convert_to_numpy(model((src, tgt_in), training=False))[0]
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    return log_probs[np.arange(len(target) + 1), list(target) + [3]]


def test_export_directory(exported, tiny):
    model, tok = tiny
    files = set(os.listdir(exported))
    assert {"model.bin", "config.json", "sentencepiece.model", EXPORT_INFO} <= files
    info = json.loads(open(os.path.join(exported, EXPORT_INFO)).read())
    assert info["max_length"] == model.max_length and info["vocab_size"] == model.vocab_size
    assert info["ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    assert info["case_markup"] is False
    config = json.loads(open(os.path.join(exported, "config.json")).read())
    assert config["layer_norm_epsilon"] == pytest.approx(model.layer_norm_epsilon)
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert config["decoder_start_token"] == "<s>"
    assert not config["add_source_bos"] and not config["add_source_eos"]
    vocab_file = next(f for f in files if f.startswith("shared_vocabulary"))
    vocab = json.loads(open(os.path.join(exported, vocab_file)).read())
    assert vocab == tok.id_to_piece(range(tok.vocab_size))  # ids line up one to one


def test_position_table_is_ours_not_ct2_builtin(tiny):
    model = tiny[0]
    table = position_table(model)
    assert table.shape == (model.max_length, model.d_model)
    # interleaved: sin at even columns, cos at odd columns (CTranslate2's own is [sin..., cos...])
    pos, i = 7, 3
    angle = pos / 10000 ** (2 * i / model.d_model)
    assert table[pos, 2 * i] == pytest.approx(np.sin(angle), abs=1e-6)
    assert table[pos, 2 * i + 1] == pytest.approx(np.cos(angle), abs=1e-6)


def test_forward_log_probs_equal(exported, tiny, sources):
    model = tiny[0]
    ct = CT2Translator(exported, tiny[1])
    targets = [s[::-1][:9] for s in sources[:24]]  # arbitrary targets: a teacher-forced pass scores any
    theirs = ct.token_log_probs(sources[:24], targets)
    worst = 0.0
    for s, t, lp in zip(sources[:24], targets, theirs):
        ours = teacher_forced_log_probs(model, s, t)
        assert len(lp) == len(t) + 1  # every target token and EOS
        worst = max(worst, float(np.max(np.abs(ours - np.array(lp)))))
    assert worst < 1e-4


def test_scores_of_given_translations_equal_ours(exported, tiny, sources):
    """CT2Translator.score / score_ids give Translator's figures (log P of tokens and EOS, their
    number), empty sources and over-long pairs handled alike."""
    model, tok = tiny
    targets = [s[::-1][:9] for s in sources[:24]] + [[5, 6], []]
    srcs = list(sources[:24]) + [[], list(sources[0]) * 40]
    ours = Translator(model, tok, batch_size=8).score_ids(srcs, targets)
    theirs = CT2Translator(exported, tok, batch_size=8).score_ids(srcs, targets)
    np.testing.assert_allclose(theirs[0], ours[0], atol=1e-3)  # nan (the empty source) in both
    assert theirs[1] == ours[1] and ours[1][24] == 0 and ours[1][25] == 1
    assert theirs[2].truncated == ours[2].truncated == 1 and theirs[2].decoded == ours[2].decoded == 25
    texts = toy_sentences(6, seed=8)
    np.testing.assert_allclose(CT2Translator(exported, tok).score(texts, texts[::-1])[0],
                               Translator(model, tok).score(texts, texts[::-1])[0], atol=1e-3)


def test_learned_positions_and_untrained_weights_map_too(tiny, tmp_path):
    """A learned position table, attention biases and random (non-zero) biases/norms: the
    forward pass still agrees."""
    import keras

    from tf_transformer.model import Transformer

    tok = tiny[1]
    keras.utils.set_random_seed(3)
    model = Transformer(vocab_size=tok.vocab_size, d_model=24, num_layers=2, num_heads=3, d_ff=40, dropout=0.0,
                        position_encoding="learned", max_length=32, layer_norm_epsilon=1e-5,
                        attention_bias=True, qkv_init_gain=0.5)
    model.build()
    rng = np.random.default_rng(0)
    assert any("query_bias" in w.path for w in model.weights)
    for w in model.weights:  # LayerNorm gammas/betas, FFN and attention biases off their 1/0 initial values
        if "gamma" in w.path or "beta" in w.path or "bias" in w.path:
            w.assign(rng.normal(0.5 if "gamma" in w.path else 0.0, 0.3, w.shape).astype("float32"))
    export_ctranslate2(model, tok, tmp_path / "m")
    ct = CT2Translator(tmp_path / "m", tok)
    srcs = tok.encode(toy_sentences(8, seed=2))
    tgts = tok.encode(toy_sentences(8, seed=4))
    for s, t, lp in zip(srcs, tgts, ct.token_log_probs(srcs, tgts)):
        assert np.max(np.abs(teacher_forced_log_probs(model, s, t) - np.array(lp))) < 1e-4


@pytest.mark.parametrize("beam", [1, 4])
def test_decoding_equals_ours(exported, tiny, sources, beam):
    model, tok = tiny
    ours = Translator(model, tok, beam_size=beam, alpha=0.0, max_extra_length=50)
    theirs = CT2Translator(exported, tok, beam_size=beam, alpha=0.0, max_extra_length=50)
    a, sa, _ = ours.translate_ids(sources)
    b, sb, _ = theirs.translate_ids(sources)
    assert sum(x == y for x, y in zip(a, b)) == len(sources)
    assert len({len(x) for x in a}) > 3  # real outputs of varied lengths, not one degenerate answer
    assert np.max(np.abs(np.array(sa) - np.array(sb))) < 1e-4


def test_n_best_lists_and_sampling_on_ctranslate2(exported, tiny, sources):
    """CTranslate2's n-best lists (num_hypotheses) start with its 1-best, which is ours at alpha
    0, and mostly agree with ours (the third hypothesis less often: our search runs on until no
    live hypothesis can displace it and then mostly finds a better one, CTranslate2's stops at
    the beam-th ending; 14 of 120 lists differed, 12 only there); its sampling is
    reproducible for a seed (whatever the translator drew before), differs for another, and at
    a near-zero temperature or with a nucleus of one token is greedy."""
    model, tok = tiny
    ours = Translator(model, tok, beam_size=4, alpha=0.0, n_best=3, stop_rule="beam_finished")
    theirs = CT2Translator(exported, tok, beam_size=4, alpha=0.0, n_best=3)
    a, sa, _ = ours.translate_ids(sources)
    b, sb, _ = theirs.translate_ids(sources)
    one, _, _ = Translator(model, tok, beam_size=4, alpha=0.0).translate_ids(sources)
    assert [x[0] for x in b] == one
    assert all(1 <= len(x) <= 3 and sc == sorted(sc, reverse=True) for x, sc in zip(b, sb))
    assert sum(x[:2] == y[:2] for x, y in zip(a, b)) >= 0.9 * len(sources)
    assert sum(x == y for x, y in zip(a, b)) >= 0.75 * len(sources)
    draw = lambda seed, **kw: CT2Translator(exported, tok, beam_size=1, sample=True, seed=seed,  # noqa: E731
                                            batch_size=16, **kw).translate_ids(sources)[0]
    first = draw(1)
    assert draw(1) == first and sum(x != y for x, y in zip(draw(2), first)) >= 0.2 * len(sources)
    greedy, _, _ = Translator(model, tok, beam_size=1).translate_ids(sources)
    assert sum(x == y for x, y in zip(draw(1, temperature=1e-3), greedy)) >= 0.9 * len(sources)
    assert draw(1, top_p=1e-6) == draw(2, top_p=1e-6) == greedy  # a nucleus of one token: argmax
    samples, sample_scores, _ = CT2Translator(exported, tok, beam_size=1, sample=True, seed=1, n_best=3,
                                              batch_size=16).translate_ids(sources)
    assert all(len(x) == 3 and sc == sorted(sc, reverse=True) for x, sc in zip(samples, sample_scores))
    assert sum(len({tuple(h) for h in x}) > 1 for x in samples) >= 0.2 * len(sources)
    assert sum(x != y for x, y in zip(draw(1, top_p=0.5), first)) >= 1
    # the draws depend on the seed and the batch only, not on what the translator drew before
    # (CTranslate2 seeds a worker's generator once; a resumed run starts in a new process)
    again = CT2Translator(exported, tok, beam_size=1, sample=True, seed=1, batch_size=16)
    assert again.translate_ids(sources)[0] == first and again.translate_ids(sources)[0] == first
    fresh = CT2Translator(exported, tok, beam_size=1, sample=True, seed=1, batch_size=16)
    assert again.translate_ids(sources[:5])[0] == fresh.translate_ids(sources[:5])[0]
    with pytest.raises(UserError, match="sample=True draws one token at a time"):
        CT2Translator(exported, tok, beam_size=4, sample=True)
    with pytest.raises(UserError, match="epsilon=0.02: CTranslate2's sampler has no epsilon cut"):
        CT2Translator(exported, tok, beam_size=1, sample=True, epsilon=0.02)


def test_mbr_on_ctranslate2_chooses_among_its_n_best_lists(exported, tiny):
    """MBRTranslator over CT2Translator: per sentence, mbr_choose's pick from CTranslate2's own
    3-best list (texts), and its expected utility as the score."""
    from tf_transformer.evaluation.mbr import MBRTranslator, mbr_choose

    model, tok = tiny
    texts = toy_sentences(40, seed=13)
    lists, _, _ = CT2Translator(exported, tok, beam_size=3, alpha=0.0, n_best=3).translate(texts)
    chosen, scores, _ = MBRTranslator(CT2Translator(exported, tok, beam_size=3, alpha=0.0, n_best=3),
                                      "bleu").translate(texts)
    assert chosen == [c[mbr_choose(c, "bleu")[0]] for c in lists]
    np.testing.assert_allclose(scores, [mbr_choose(c, "bleu")[1] for c in lists])
    assert sum(c[0] != x for c, x in zip(lists, chosen)) >= 1  # not always the 1-best


def test_both_translators_share_the_batching(exported, tiny, monkeypatch):
    """Translator and CT2Translator decode through the one decode_in_batches/translate_texts
    (tf_transformer.decoding.batches), each with its own decode_batch."""
    from tf_transformer.decoding import batches

    model, tok = tiny
    seen = []
    for name in ("decode_in_batches", "translate_texts"):
        def spy(*args, _real=getattr(batches, name), _name=name, **kwargs):
            seen.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(batches, name, spy)
    texts = toy_sentences(5, seed=3) + [""]
    for translator in (Translator(model, tok, beam_size=2, alpha=0.0),
                       CT2Translator(exported, tok, beam_size=2, alpha=0.0)):
        seen.clear()
        outputs, _, stats = translator.translate(texts)
        assert seen == ["translate_texts", "decode_in_batches"]
        assert outputs[-1] == "" and all(outputs[:-1]) and stats.decoded == 5


@pytest.mark.parametrize("setting, message", [
    ({"beam_size": 0}, "beam_size=0: must be >= 1"),
    ({"alpha": -1.0}, "alpha=-1.0: must be >= 0"),
    ({"max_extra_length": -2}, "max_extra_length=-2: must be >= 0"),
    ({"batch_size": 0}, "batch_size=0: must be >= 1"),
])
def test_both_translators_check_settings_alike(exported, tiny, setting, message):
    model, tok = tiny
    for make in (lambda: Translator(model, tok, **setting), lambda: CT2Translator(exported, tok, **setting)):
        with pytest.raises(UserError) as e:
            make()
        assert str(e.value) == message
    with pytest.raises(UserError, match=r"^threads=-1: must be >= 0$"):
        CT2Translator(exported, tok, threads=-1)


def test_per_sentence_length_limit(exported, tiny, sources):
    """Sources of mixed lengths in one batch, limits that bind (source length + 1): the
    sentences that run past their own limit are decoded again with it."""
    model, tok = tiny
    ours = Translator(model, tok, beam_size=1, max_extra_length=1)
    theirs = CT2Translator(exported, tok, beam_size=1, max_extra_length=1, batch_size=128)
    a, sa, _ = ours.translate_ids(sources)
    b, sb, stats = theirs.translate_ids(sources)
    assert stats.redecoded > 0
    assert a == b
    assert np.max(np.abs(np.array(sa) - np.array(sb))) < 1e-4
    assert all(len(x) <= len(s) + 1 for x, s in zip(b, sources))


def test_length_penalty_per_sentence_so_batching_does_not_matter(exported, tiny, sources):
    """alpha > 0 under beam search: CTranslate2 takes one length_penalty per call, so each call
    holds sources of one length, with that length's penalty; a sentence's translation (and its
    score, up to float rounding) is then the same whatever the batch size and the other
    sentences of its batch."""
    tok = tiny[1]
    texts = [" ".join(["a dog runs in the park with the ball"] * 4), "a cat.", "the girl sits on the red ball."]
    mixed = tok.encode(texts) + sources[:60]
    alone = CT2Translator(exported, tok, beam_size=4, alpha=2.0, batch_size=1)
    expected = alone.translate_ids(mixed)[:2]
    for batch_size in (7, 128):
        theirs = CT2Translator(exported, tok, beam_size=4, alpha=2.0, batch_size=batch_size)
        calls = []
        real = theirs.engine

        class Spy:
            def translate_batch(self, tokens, **options):
                calls.append(({len(t) for t in tokens}, options["length_penalty"]))
                return real.translate_batch(tokens, **options)

        theirs.engine = Spy()
        outputs, scores, _ = theirs.translate_ids(mixed)
        assert outputs == expected[0]
        assert np.max(np.abs(np.array(scores) - np.array(expected[1]))) < 1e-4
        assert all(len(lengths) == 1 for lengths, _ in calls)
        assert all(penalty == ct2_length_penalty(2.0, n) for (n,), penalty in calls)


def test_ct2_length_penalty():
    assert ct2_length_penalty(0.0, 12) == 0.0
    beta = ct2_length_penalty(0.6, 12)
    # the same slope of log(penalty) in log(length) as GNMT's at n = 12
    n, h = 12.0, 1e-4
    gnmt_slope = (0.6 * np.log((5 + n * np.exp(h)) / 6) - 0.6 * np.log((5 + n) / 6)) / h
    assert beta == pytest.approx(gnmt_slope, rel=1e-3)
    assert 0 < beta < 0.6


def test_cli_export_and_translate(assets, tmp_path, capsys, monkeypatch):
    model_path, vocab_path = assets
    out = tmp_path / "cli_ct2"
    with monkeypatch.context() as m:  # paths relative to the working directory are recorded absolute
        m.chdir(os.path.dirname(model_path))
        assert main(["export", "--format", "ctranslate2", "--model", os.path.basename(model_path), "--vocab",
                     os.path.basename(vocab_path), "--output", str(out), "--quantization", "int8"]) == 0
    info = json.loads((out / EXPORT_INFO).read_text())
    assert info["quantization"] == "int8"
    assert os.path.isabs(model_path) and (info["model"], info["vocab"]) == (model_path, vocab_path)
    # an existing directory is not replaced without --force
    capsys.readouterr()
    assert main(["export", "--format", "ctranslate2", "--model", model_path, "--vocab", vocab_path,
                 "--output", str(out)]) == 2
    assert "--force" in capsys.readouterr().err

    f32 = tmp_path / "cli_ct2_f32"
    assert main(["export", "--format", "ctranslate2", "--model", model_path, "--vocab", vocab_path,
                 "--output", str(f32)]) == 0
    texts = toy_sentences(30, seed=8) + [""]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n")
    outputs = {}
    for engine, model_arg in (("tensorflow", model_path), ("ctranslate2", str(f32))):
        dest = tmp_path / f"out.{engine}"
        extra = ["--vocab", vocab_path] if engine == "tensorflow" else []  # ct2: the export's copy
        assert main(["translate", "--engine", engine, "--model", model_arg, *extra, "--input", str(src),
                     "--output", str(dest), "--alpha", "0", "--quiet"]) == 0
        outputs[engine] = dest.read_text().split("\n")
    assert outputs["tensorflow"] == outputs["ctranslate2"]
    assert outputs["ctranslate2"][30] == ""  # the empty line stays empty
    capsys.readouterr()
    assert main(["translate", "--engine", "ctranslate2", "--model", str(f32), "--input", str(src), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "--alpha 0" in err  # alpha 0.6 is mapped, and it says so
    # the default decode.stop_rule (bound) cannot run in CTranslate2: the note and the summary say which rule ran
    assert "cannot run our exact early stop: the default stop rule (bound) gives way to its rule here" in err
    summary = err.strip().splitlines()[-1]
    assert summary.startswith("tft translate: wrote 31 translations")
    assert "beam 4, alpha 0.6, max +50 tokens, stopping at the beam-th ending (CTranslate2's rule)" in summary
    ref = tmp_path / "ref.txt"
    ref.write_text("\n".join(texts) + "\n")
    assert main(["evaluate", "--engine", "ctranslate2", "--model", str(f32), "--source", str(src), "--reference",
                 str(ref), "--json", str(tmp_path / "eval.json"), "--quiet"]) == 0
    assert "stopping at the beam-th ending (CTranslate2's rule)" in capsys.readouterr().err
    assert json.loads((tmp_path / "eval.json").read_text())["decode"]["stop_rule"] == "beam_finished"
    # the export's recorded decode settings are the defaults without --config; flags override them
    tuned = tmp_path / "cli_ct2_tuned"
    assert main(["export", "--format", "ctranslate2", "--model", model_path, "--vocab", vocab_path, "--beam", "3",
                 "--alpha", "0.9", "--max-extra-len", "20", "--output", str(tuned)]) == 0
    for extra, said in (([], "beam 3, alpha 0.9, max +20 tokens"), (["--beam", "2"], "beam 2, alpha 0.9, max +20")):
        capsys.readouterr()
        assert main(["translate", "--engine", "ctranslate2", "--model", str(tuned), "--input", str(src), "--quiet",
                     "--output", str(tmp_path / "tuned.out"), *extra]) == 0
        assert said in capsys.readouterr().err.strip().splitlines()[-1], extra
    # an explicit --stop-rule bound is refused, saying why
    assert main(["translate", "--engine", "ctranslate2", "--model", str(f32), "--stop-rule", "bound",
                 "--input", str(src)]) == 2
    assert "CTranslate2's beam search has one stop rule" in capsys.readouterr().err
    # --scores says that CTranslate2's scores at alpha > 0 are normalised its own way
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert "With --engine ctranslate2 and --alpha > 0 under beam search, CTranslate2's own normalisation" in helptext


@pytest.mark.parametrize("argv, message", [
    (["export", "--format", "ctranslate2", "--quantization", "int4"], "--quantization int4: not one of"),
    (["export", "--quantization", "int8"], "--quantization int8: only for --format ctranslate2"),
])
def test_cli_export_errors(assets, tmp_path, capsys, argv, message):
    assert main(argv + ["--model", assets[0], "--vocab", assets[1], "--output", str(tmp_path / "x")]) == 2
    assert message in capsys.readouterr().err


def test_cli_translate_errors(assets, exported, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("a dog.\n")
    cases = [
        (["--engine", "ctranslate2", "--model", assets[0]], "not a directory"),
        (["--engine", "ctranslate2", "--model", str(tmp_path)], "no model.bin"),
        (["--engine", "ctranslate2", "--model", exported, "--xla"], "--xla: only for --engine tensorflow"),
        (["--engine", "ctranslate2", "--model", exported, "--threads", "-1"], "--threads -1: must be >= 0"),
        # TensorFlow's threads are set before its first op; this process has run many
        (["--model", assets[0], "--vocab", assets[1], "--threads", "3"], "--threads 3: TensorFlow is already running"),
    ]
    for argv, message in cases:
        assert main(["translate", *argv, "--input", str(src)]) == 2
        assert message in capsys.readouterr().err


def test_docs_python_snippet_gives_our_translations(exported, tiny, capsys):
    """The CTranslate2 snippet of docs/serving.md, run on the tiny export (``max_length`` 64):
    it reads the limit from tft_export.json, so a source over the limit is cut as ours is, and
    the output limit stays within the model's positions; it prints what our beam search gives
    at alpha 0 (what the snippet's ``length_penalty=0`` is)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "serving.md").read_text(encoding="utf-8")
    blocks = [b.split("```", 1)[0] for b in doc.split("```python\n")[1:]]
    (snippet,) = [b for b in blocks if "ctranslate2.Translator(" in b]
    sentence = '"A dog runs through the grass."'
    assert sentence in snippet
    model, tok = tiny
    texts = ["a dog runs in the park.", " ".join(["the girl plays with a red ball in the water"] * 8)]
    assert len(tok.encode(texts[1:])[0]) > model.max_length
    for text in texts:
        exec(snippet.replace("export/ct2", exported).replace(sentence, repr(text)), {})
        printed = capsys.readouterr().out.strip()
        ours = Translator(model, tok, beam_size=4, alpha=0.0, max_extra_length=50).translate([text])[0][0]
        assert printed == ours and printed


def test_wrong_vocabulary_is_refused(exported, tmp_path):
    from tf_transformer.data.tokenizer import Tokenizer, train_sentencepiece

    other = Tokenizer(train_sentencepiece(iter(toy_sentences(300, seed=1)), 40, "bpe", 1.0))
    with pytest.raises(UserError, match="40 pieces"):
        CT2Translator(exported, other)
