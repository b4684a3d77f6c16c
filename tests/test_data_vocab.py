"""The shared SentencePiece vocabulary: determinism, ids, tft build-vocab, Tokenizer."""

import gzip
import hashlib

import pytest

from tf_transformer import cli
from tf_transformer.config import DataConfig
from tf_transformer.data import Tokenizer, build_vocab
from tf_transformer.data.sources import bundled_multi30k_dir
from tf_transformer.errors import DataError, UserError

N_LINES = 1500
VOCAB = 500


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first 1,500 Multi30k training pairs as plain text files."""
    root = tmp_path_factory.mktemp("corpus")
    paths = {}
    for lang in ("en", "de"):
        with gzip.open(bundled_multi30k_dir() / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(N_LINES)]
        paths[lang] = root / f"train.{lang}"
        paths[lang].write_text("".join(lines), encoding="utf-8")
    return paths


def text_config(corpus, **kw):
    kw.setdefault("vocab_size", VOCAB)
    return DataConfig(source="text", train_source=str(corpus["en"]), train_target=str(corpus["de"]), **kw)


@pytest.fixture(scope="module")
def model_path(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("vocab") / "spm"
    build_vocab(text_config(corpus), out, progress=lambda m: None)
    return str(out) + ".model"


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_build_vocab_is_byte_identical_and_has_fixed_ids(corpus, model_path, tmp_path):
    result = build_vocab(text_config(corpus), tmp_path / "again" / "spm.model", progress=lambda m: None)
    assert result["model"] == str(tmp_path / "again" / "spm.model")
    assert sha(result["model"]) == sha(model_path)
    assert result["sentences"] == 2 * N_LINES
    vocab = (tmp_path / "again" / "spm.vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == VOCAB
    assert [line.split("\t")[0] for line in vocab[:4]] == ["<pad>", "<unk>", "<s>", "</s>"]
    tok = Tokenizer(model_path)
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert tok.vocab_size == VOCAB
    assert tok.id_to_piece([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]


def test_sampled_input_is_deterministic_and_differs_from_full(corpus, model_path, tmp_path):
    cfg = text_config(corpus, vocab_input_sentence_size=1000)
    a = build_vocab(cfg, tmp_path / "a", progress=lambda m: None)
    b = build_vocab(cfg, tmp_path / "b", progress=lambda m: None)
    assert a["sentences"] == 1000
    assert sha(a["model"]) == sha(b["model"])
    assert sha(a["model"]) != sha(model_path)
    other_seed = build_vocab(text_config(corpus, vocab_input_sentence_size=1000, seed=7),
                             tmp_path / "c", progress=lambda m: None)
    assert sha(other_seed["model"]) != sha(a["model"])


def test_cli_build_vocab_summary_and_no_silent_overwrite(corpus, model_path, tmp_path, capsys):
    out = tmp_path / "cli" / "spm"
    args = ["build-vocab", "--config", "multi30k_small", "--set", "data.source=text",
            "--set", f"data.train_source={corpus['en']}", "--set", f"data.train_target={corpus['de']}",
            "--set", f"data.vocab_size={VOCAB}", "--output", str(out)]
    assert cli.main(args) == 0
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"wrote {out}.model and {out}.vocab")
    assert "500 pieces" in lines[0] and "3,000 sentences" in lines[0]
    assert "build-vocab: training" in captured.err  # progress goes to stderr
    assert sha(str(out) + ".model") == sha(model_path)
    # same output, same model: fine; a different model is refused and the old file kept
    assert cli.main(args) == 0
    assert cli.main(args[:-2] + ["--vocab-size", "400", "--output", str(out)]) == 2
    assert "holds a different model" in capsys.readouterr().err
    assert sha(str(out) + ".model") == sha(model_path)
    assert cli.main(args[:-2] + ["--vocab-size", "400", "--output", str(out), "--force"]) == 0
    assert Tokenizer(str(out) + ".model").vocab_size == 400


def test_a_folder_as_the_vocabulary_prefix_is_refused(corpus, tmp_path):
    """``--output DIR/`` would write the hidden files ``DIR/.model`` and ``DIR/.vocab``."""
    for output in (f"{tmp_path}/", tmp_path, f"{tmp_path}/.model"):
        with pytest.raises(UserError, match=r"a folder; the vocabulary takes a file prefix, e.g. .*spm"):
            build_vocab(text_config(corpus), output, progress=lambda m: None)
    assert not list(tmp_path.iterdir())


def test_vocab_too_large_is_a_clear_error(corpus, tmp_path):
    with pytest.raises(DataError, match="data.vocab_size=100000"):
        build_vocab(text_config(corpus, vocab_size=100000), tmp_path / "x", progress=lambda m: None)


def test_empty_or_blank_corpus_is_a_clear_error(tmp_path):
    """No sentence to learn from is said as such, naming the files, not as SentencePiece's
    internal ``[!sentences_.empty()]`` check."""
    for name, text in (("empty", ""), ("blank", "\n  \n\n")):
        paths = {lang: tmp_path / f"{name}.{lang}" for lang in ("en", "de")}
        for path in paths.values():
            path.write_text(text, encoding="utf-8")
        with pytest.raises(DataError) as e:
            build_vocab(text_config(paths), tmp_path / name, progress=lambda m: None)
        assert str(tmp_path / name) in str(e.value) and "no sentences to build a vocabulary from" in str(e.value)
        assert "sentences_" not in str(e.value)
        assert not (tmp_path / f"{name}.model").exists()


def test_tokenizer_python_and_graph_agree(model_path):
    import tensorflow as tf

    tok = Tokenizer(model_path)
    texts = ["A man in a blue shirt is standing on a ladder.", "Zwei Hunde spielen im Schnee.", "x"]
    ids = tok.encode(texts)
    graph = tok.tokenize(tf.constant(texts)).to_list()
    assert ids == graph
    assert all(i >= 4 or i == tok.unk_id for seq in ids for i in seq)  # no pad/bos/eos from text
    assert tok.decode(ids) == texts
    # decode: pad/BOS dropped, everything after the first EOS ignored
    noisy = [[tok.bos_id] + seq + [tok.eos_id] + seq + [0, 0] for seq in ids]
    assert tok.decode(noisy) == texts
    width = max(len(s) for s in noisy)
    dense = tf.constant([s + [0] * (width - len(s)) for s in noisy])
    assert [t.decode("utf-8") for t in tok.detokenize(dense).numpy()] == texts
    assert [t.decode("utf-8") for t in tok.detokenize(tf.ragged.constant(noisy)).numpy()] == texts
    # the in-graph tokenizer works from the serialized proto alone
    assert Tokenizer(tok.model_proto).encode(texts) == ids


def test_tokenizer_rejects_models_with_other_ids(corpus, tmp_path):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(corpus["en"]), model_prefix=str(tmp_path / "default_ids"), vocab_size=300,
        model_type="bpe", minloglevel=2,
    )  # SentencePiece's defaults: unk=0, bos=1, eos=2, no pad
    with pytest.raises(DataError, match="special ids"):
        Tokenizer(tmp_path / "default_ids.model")
    with pytest.raises(DataError, match="tft build-vocab"):
        Tokenizer(tmp_path / "missing.model")
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(DataError, match="not a SentencePiece model"):
        Tokenizer(tmp_path / "junk.model")
    with pytest.raises(DataError, match="data.vocab_model is not set"):
        Tokenizer.from_config(DataConfig())
