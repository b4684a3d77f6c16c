"""data.lowercase: a vocabulary built on lowercased text says so, and every path of its
tokenizer (Python, graph, exported signature) lowercases what it reads; Python and graph
lowercase alike on every line of the bundled corpus; the scorers lowercase the references
for such a model; config and vocabulary must agree."""

from types import SimpleNamespace

import pytest
from helpers.corpora import BUNDLED_FILES, bundled_lines

from tf_transformer.config import DataConfig
from tf_transformer.data import Tokenizer, build_vocab
from tf_transformer.data.case_markup import tf_lower, tf_upper
from tf_transformer.data.tokenizer import LOWERCASE_MARK, normalizer_name
from tf_transformer.errors import ConfigError, UserError

N_LINES, VOCAB = 1500, 600
TEXTS = ["Ein Mann in einem USA-T-Shirt spielt Fußball.", "A DOG runs.", "zwei hunde", ""]



@pytest.mark.parametrize("name", BUNDLED_FILES)
def test_graph_lowercases_like_python_on_the_whole_corpus(name):
    import tensorflow as tf

    lines = bundled_lines(name)
    in_graph = [t.decode("utf-8") for t in tf_lower(tf.constant(lines)).numpy()]
    assert in_graph == [line.lower() for line in lines]


def test_graph_lowercases_like_python_on_edge_cases():
    import tensorflow as tf

    texts = ["ẞ STRASSE Straße", "İstanbul", "ΣΟΦΟΣ", "ǅemal ǄEMAL", "ÄÖÜ Éé", "Ⅻ 3D K9", "", "   ",
             # TensorFlow's own UTF-8 lowering ends a string at a NUL byte ("A \0 Dog." -> "a ")
             "A \0 Dog.", "\0ABC", "Ä\0\0Ö\0"]
    in_graph = [t.decode("utf-8") for t in tf_lower(tf.constant(texts)).numpy()]
    assert in_graph == [t.lower() for t in texts]
    assert [t.decode("utf-8") for t in tf_upper(tf.constant(texts)).numpy()] == [t.upper() for t in texts]
    assert tf_lower(tf.constant("Ä\0B")).numpy().decode("utf-8") == "ä\0b"  # a scalar stays a scalar
    grid = tf_lower(tf.constant([["A\0B", "C"], ["", "\0D\0"]])).numpy().tolist()
    assert grid == [[b"a\0b", b"c"], [b"", b"\0d\0"]]
    assert "ß" in "ẞ".lower()  # lowercasing, not case folding (which writes "ss")


@pytest.fixture(scope="module")
def vocabs(tmp_path_factory):
    root = tmp_path_factory.mktemp("lowercase")
    out = {}
    for kind in ("cased", "lower", "prelowered"):
        files = {}
        for lang in ("en", "de"):
            lines = bundled_lines(f"train.{lang}")[:N_LINES]
            if kind == "prelowered":  # the corpus lowercased beforehand, the vocabulary built as a cased one
                lines = [line.lower() for line in lines]
            files[lang] = root / f"{kind}.train.{lang}"
            files[lang].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        cfg = DataConfig(source="text", train_source=str(files["en"]), train_target=str(files["de"]),
                         vocab_size=VOCAB, lowercase=kind == "lower")
        info = build_vocab(cfg, root / f"spm-{kind}", progress=lambda m: None)
        assert info["lowercase"] is (kind == "lower")
        out[kind] = info["model"]
    return out


def test_the_vocabulary_is_built_on_lowercased_text_and_says_so(vocabs):
    lower, cased, pre = Tokenizer(vocabs["lower"]), Tokenizer(vocabs["cased"]), Tokenizer(vocabs["prelowered"])
    assert lower.lowercase and not cased.lowercase and not pre.lowercase
    assert normalizer_name(lower.model_proto) == "nmt_nfkc" + LOWERCASE_MARK
    assert normalizer_name(cased.model_proto) == "nmt_nfkc"
    pieces = lower.id_to_piece(range(lower.vocab_size))
    assert not any(p != p.lower() for p in pieces[4:])  # no piece with a capital letter
    assert any(p != p.lower() for p in cased.id_to_piece(range(cased.vocab_size)))
    # the same model as one built on a corpus lowercased beforehand: only the name differs
    assert pieces == pre.id_to_piece(range(pre.vocab_size))
    words = bundled_lines("val.de")[:200]
    assert lower.encode(words) == pre.encode([w.lower() for w in words])
    assert "lowercase=True" in repr(lower) and "lowercase=True" not in repr(cased)


def test_every_tokenizer_path_lowercases(vocabs):
    import tensorflow as tf

    tok = Tokenizer(vocabs["lower"])
    ids = tok.encode(TEXTS)
    assert ids == tok.encode([t.lower() for t in TEXTS])
    assert tok.tokenize(tf.constant(TEXTS)).to_list() == ids
    # decoding gives the lowercase text its case back with the vocabulary's recaser, in both paths
    assert tok.decode(ids) == tok.recaser([t.lower() for t in TEXTS])
    # (fitted on 1,500 German training lines: "usa" is not among them, so it stays lowercase)
    assert tok.decode(ids)[:2] == ["Ein Mann in einem usa-T-Shirt spielt Fußball.", "A dog runs."]
    assert [t.decode("utf-8") for t in tok.detokenize(tf.ragged.constant(ids)).numpy()] == tok.decode(ids)
    assert tok.pieces("Ein Hund") == tok.pieces("ein hund")
    cased = Tokenizer(vocabs["cased"])  # a cased vocabulary leaves the case alone
    assert cased.encode(["Ein Mann"]) != cased.encode(["ein mann"])


def test_exported_signature_lowercases_and_recases_in_the_graph(vocabs, monkeypatch, tmp_path):
    """The SavedModel's text signature with a decoder that copies its source: it is given the
    ids of the lowercased text and returns that text recased, also once saved and loaded."""
    import tensorflow as tf

    from tf_transformer.decoding import model_fns
    from tf_transformer.model import Transformer
    from tf_transformer.serving.export import build_module
    from tf_transformer.serving.info import export_info

    tok = Tokenizer(vocabs["lower"])

    def copy(model, ids, **settings):
        return ids, tf.zeros(tf.shape(ids)[:1])

    monkeypatch.setattr(model_fns, "translate_batch", copy)
    model = Transformer(vocab_size=tok.vocab_size, d_model=16, num_layers=1, num_heads=2, d_ff=32, max_length=64)
    module = build_module(model, tok, beam_size=2, alpha=0.6, max_extra_length=6)
    served = [t.decode("utf-8") for t in module.translate(tf.constant(TEXTS))["translation"].numpy()]
    assert served == tok.recaser([t.lower() for t in TEXTS])
    tf.saved_model.save(module, str(tmp_path / "saved"), signatures={"translate": module.translate})
    loaded = tf.saved_model.load(str(tmp_path / "saved"))
    assert [t.decode("utf-8") for t in loaded.translate(tf.constant(TEXTS))["translation"].numpy()] == served
    info = export_info(model, tok, source="m.keras", decode=None)
    assert info["lowercase"] is True and info["recased"] is True
    info = export_info(model, Tokenizer(vocabs["cased"]), source="m.keras", decode=None)
    assert info["lowercase"] is False and info["recased"] is False


def test_the_config_and_the_vocabulary_must_agree(vocabs):
    from tf_transformer.config import load_config
    from tf_transformer.data.tokenizer import resolve_vocabulary

    for lower in (False, True):
        wrong, right = vocabs["cased" if lower else "lower"], vocabs["lower" if lower else "cased"]
        cfg = load_config("multi30k_tiny", [f"data.vocab_model={wrong}", f"data.lowercase={str(lower).lower()}"])
        built = "on cased" if lower else "on lowercased"
        with pytest.raises(UserError, match=f"data.lowercase={str(lower).lower()} but the vocabulary .* was built "
                                            f"{built} text"):
            resolve_vocabulary(cfg, wrong, log=lambda m: None)
        cfg = load_config("multi30k_tiny", [f"data.vocab_model={right}", f"data.lowercase={str(lower).lower()}"])
        assert resolve_vocabulary(cfg, right, log=lambda m: None).lowercase is lower


def test_lowercase_and_case_markup_exclude_each_other():
    with pytest.raises(ConfigError, match="lowercase and data.case_markup are both true"):
        DataConfig(lowercase=True, case_markup=True).validate()


def test_the_scorers_lowercase_the_references_for_a_lowercasing_model():
    from tf_transformer.evaluation.bleu import references_for
    from tf_transformer.training.validation_bleu import ValidationBLEU

    refs = ["Ein Mann spielt.", "ZWEI Hunde"]
    assert references_for(SimpleNamespace(lowercase=True), refs) == ["ein mann spielt.", "zwei hunde"]
    assert references_for(SimpleNamespace(lowercase=False), refs) == refs
    assert references_for(SimpleNamespace(), refs) == refs  # tokenizers without the attribute
    # a lowercasing vocabulary with a recaser: its outputs are cased again, the references stay
    assert references_for(SimpleNamespace(lowercase=True, recaser=lambda texts: texts), refs) == refs
    callback = ValidationBLEU(None, SimpleNamespace(lowercase=True), ["a", "b"], refs, every_steps=1)
    assert callback.references == ["ein mann spielt.", "zwei hunde"]
