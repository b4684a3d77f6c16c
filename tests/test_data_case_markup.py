"""Case markup (data.case_markup): the rule on examples, the round trip and the graph twin on
every line of the bundled corpus, the vocabulary's markers, and every path of the tokenizer
(Python, graph, exported signature) reading and writing cased text."""

import pytest
from helpers.corpora import BUNDLED_FILES, bundled_lines

from tf_transformer.data import Tokenizer, build_vocab
from tf_transformer.data.case_markup import PIECES, TITLE, UPPER, mark, mark_word, tf_mark, tf_unmark, unmark
from tf_transformer.errors import UserError

T, U = TITLE, UPPER


@pytest.mark.parametrize("word, marked", [
    ("mann", ["mann"]), ("Mann", [T, "mann"]), ("A", [T, "a"]), ("USA", [U, "usa"]),
    ("USA-T-Shirt", ["USA-T-Shirt"]), ("T-Shirt", ["T-Shirt"]), ("USA-T-SHIRT", [U, "usa-t-shirt"]),
    ("McDonald", ["McDonald"]),
    ("(Mann)", [T, "(mann)"]), ("„Ärger“", [T, "„ärger“"]), ("ÄRGER!", [U, "ärger!"]),
    ("Straße", [T, "straße"]), ("42", ["42"]), ("3D", [T, "3d"]), ("K9", [T, "k9"]), ("...", ["..."]),
    ("⇧x", ["⇧x"]), ("Ⅻ", ["Ⅻ"]),  # not a letter (a number): left alone
])
def test_mark_word(word, marked):
    assert mark_word(word) == marked
    assert unmark(" ".join(marked)) == word


def test_mark_and_unmark_sentences():
    text = "Ein Mann  in einem  USA-T-Shirt\tspielt mit dem iPod."
    assert mark(text) == f"{T} ein {T} mann in einem USA-T-Shirt spielt mit dem iPod."
    assert unmark(mark(text)) == "Ein Mann in einem USA-T-Shirt spielt mit dem iPod."
    # what a model may write: consecutive markers (the last one counts), one at the end (dropped)
    assert unmark(f"{T} {U} ein hund {T}") == "EIN hund"
    assert unmark(f"{U}") == "" and unmark("") == "" and mark("") == "" and mark("  ") == ""



@pytest.mark.parametrize("name", BUNDLED_FILES)
def test_round_trip_and_graph_twin_on_the_whole_corpus(name):
    import tensorflow as tf

    lines = bundled_lines(name)
    marked = [mark(line) for line in lines]
    assert [unmark(m) for m in marked] == [" ".join(line.split()) for line in lines]
    in_graph = [m.decode("utf-8") for m in tf_mark(tf.constant(lines)).numpy()]
    assert in_graph == marked
    assert [t.decode("utf-8") for t in tf_unmark(tf.constant(marked)).numpy()] == [unmark(m) for m in marked]
    if name.endswith(".de"):  # German: a capitalised word in almost every line, and some in capitals
        assert sum(T in m.split() for m in marked) > 0.9 * len(lines)


def test_graph_twin_on_edge_cases():
    import tensorflow as tf

    texts = ["", "   ", "A", "Mann\u00a0Hut", "x\u2003Y", "(Mann) USA-T-Shirt 3D K9 ÄRGER!", "⇧x ⇧ y",
             "Ⅻ Ⅻa", "İstanbul Straße ǅemal", "A Dog \0Runs.", "\0"]
    assert [m.decode("utf-8") for m in tf_mark(tf.constant(texts)).numpy()] == [mark(t) for t in texts]
    outputs = ["", f"{T}", f"{T} {U} ein", f"hund {T}", f"{U} usa {T} (mann) {T} k9 {T} 42", f"{T}  ein\u00a0{T} hut",
               f"{T} ⇧x {U} ärger!", f"{T} \0ein {U} a\0b"]
    assert [t.decode("utf-8") for t in tf_unmark(tf.constant(outputs)).numpy()] == [unmark(o) for o in outputs]


# -- the vocabulary and the tokenizer ---------------------------------------------------------
N_LINES, VOCAB = 1500, 600


@pytest.fixture(scope="module")
def vocabs(tmp_path_factory):
    from tf_transformer.config import DataConfig

    root = tmp_path_factory.mktemp("markup")
    files = {}
    for lang in ("en", "de"):
        files[lang] = root / f"train.{lang}"
        lines = bundled_lines(f"train.{lang}")[:N_LINES]
        files[lang].write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    out = {}
    for markup in (False, True):
        cfg = DataConfig(source="text", train_source=str(files["en"]), train_target=str(files["de"]),
                         vocab_size=VOCAB, case_markup=markup)
        info = build_vocab(cfg, root / f"spm-{markup}", progress=lambda m: None)
        assert info["case_markup"] is markup
        out[markup] = info["model"]
    return out


def test_the_vocabulary_holds_the_markers_at_4_and_5(vocabs):
    marked, plain = Tokenizer(vocabs[True]), Tokenizer(vocabs[False])
    assert marked.case_markup and not plain.case_markup
    assert marked.id_to_piece([4, 5]) == list(PIECES)
    assert not any(p in plain.id_to_piece(range(plain.vocab_size)) for p in PIECES)
    # fewer pieces spent on case: more distinct lowercase words have a piece of their own
    words = {w.lower() for line in bundled_lines("train.de")[:N_LINES] for w in line.split()}
    assert sum(len(marked.pieces(w)) for w in words) < sum(len(plain.pieces(w)) for w in words)


def test_every_tokenizer_path_reads_and_writes_cased_text(vocabs):
    import tensorflow as tf

    tok = Tokenizer(vocabs[True])
    texts = ["Ein Mann in einem USA-T-Shirt spielt Fußball.", "A DOG runs.", "zwei hunde", ""]
    ids = tok.encode(texts)
    assert ids[1][:2] == [4, tok._sp.piece_to_id("▁a")]  # ⇧ a
    assert 5 in ids[1]  # ⇪ dog
    assert tok.tokenize(tf.constant(texts)).to_list() == ids
    assert tok.decode(ids) == texts
    assert [t.decode("utf-8") for t in tok.detokenize(tf.ragged.constant(ids)).numpy()] == texts
    assert tok.pieces("Ein Hund")[:2] == ["▁⇧", "▁ein"]
    assert "case_markup=True" in repr(tok)


def test_the_config_and_the_vocabulary_must_agree(vocabs):
    from tf_transformer.config import load_config
    from tf_transformer.data.tokenizer import resolve_vocabulary

    for markup in (False, True):
        cfg = load_config("multi30k_tiny", [f"data.vocab_model={vocabs[not markup]}",
                                            f"data.case_markup={str(markup).lower()}"])
        with pytest.raises(UserError, match=f"data.case_markup={str(markup).lower()} but the vocabulary .*spm-"
                                            f"{not markup}.model was built {'without' if markup else 'with'} case"):
            resolve_vocabulary(cfg, vocabs[not markup], log=lambda m: None)
        cfg = load_config("multi30k_tiny", [f"data.vocab_model={vocabs[markup]}",
                                            f"data.case_markup={str(markup).lower()}"])
        assert resolve_vocabulary(cfg, vocabs[markup], log=lambda m: None).case_markup is markup


def test_exported_signature_marks_and_unmarks_in_the_graph(vocabs, monkeypatch):
    """The SavedModel's text signature with a decoder that copies its source: the ids it is
    given are those of the marked text, and what it returns is the cased text again."""
    import tensorflow as tf

    from tf_transformer.decoding import model_fns
    from tf_transformer.model import Transformer
    from tf_transformer.serving.export import build_module

    tok = Tokenizer(vocabs[True])
    texts = ["Ein Mann in einem USA-T-Shirt spielt Fußball.", "A DOG runs.", "zwei hunde", ""]
    seen = []

    def copy(model, ids, **settings):
        seen.append(ids)
        return ids, tf.zeros(tf.shape(ids)[:1])

    monkeypatch.setattr(model_fns, "translate_batch", copy)
    model = Transformer(vocab_size=tok.vocab_size, d_model=16, num_layers=1, num_heads=2, d_ff=32, max_length=64)
    module = build_module(model, tok, beam_size=2, alpha=0.6, max_extra_length=6)
    served = module.translate(tf.constant(texts))["translation"].numpy()
    assert [t.decode("utf-8") for t in served] == texts

    @tf.function
    def source_ids(text):  # what the decoder was given, in a graph of the signature's function
        module._translate_text(text)
        return seen[-1]

    ids = source_ids(tf.constant(texts)).numpy()
    marked = tok.encode(texts)
    assert [[i for i in row if i] for row in ids.tolist()] == marked
    assert marked[1][0] == 4 and 5 in marked[1]


def test_exported_signature_equals_the_translator_with_case_markup(vocabs):
    """On an untrained model both paths (graph and Python) give the same strings."""
    import keras
    import tensorflow as tf

    from tf_transformer.decoding.translator import Translator
    from tf_transformer.model import Transformer
    from tf_transformer.serving.export import build_module

    tok = Tokenizer(vocabs[True])
    keras.utils.set_random_seed(4)
    model = Transformer(vocab_size=tok.vocab_size, d_model=16, num_layers=1, num_heads=2, d_ff=32, dropout=0.0,
                        max_length=64)
    texts = bundled_lines("val.en")[:32]
    model((tf.constant(tok.encode(texts[:1])), tf.constant([[2]])))
    ours, _, _ = Translator(model, tok, beam_size=2, alpha=0.6, max_extra_length=6).translate(texts)
    module = build_module(model, tok, beam_size=2, alpha=0.6, max_extra_length=6)
    served = [t.decode("utf-8") for t in module.translate(tf.constant(texts))["translation"].numpy()]
    assert served == ours
    assert len(set(ours)) > 1
