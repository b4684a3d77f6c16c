"""The recaser of lowercasing vocabularies: its rules on a toy corpus, its quality on the
bundled Multi30k German, the graph path equal to the Python path on every line, storage
inside a SentencePiece model that leaves the model's pieces and ids as they were, and
``tft build-vocab`` fitting it on the target side only."""

import pytest
from helpers.corpora import bundled_lines, write_tiny_parallel_corpus

from tf_transformer.data.recase import FIELD, Recaser, RecaserFitter, attach, attached

TOY = [
    "Ein Mann isst Brot.",
    "Der Mann sieht das Essen.",
    "Das Essen ist gut, sagt der Mann.",
    "Sie essen Brot im Park.",
    "Zwei Kinder essen im Park in den USA.",
    "Ein Musiker spielt.",
    "Ein Kind sieht das Essen und den Musiker.",
    "Wir essen Brot.",
    "Die Kinder essen gern.",
    "Alle essen im Park.",
]


@pytest.fixture(scope="module")
def toy():
    return Recaser.fit(TOY)


def test_the_rules_on_a_toy_corpus(toy):
    # most frequent form away from the sentence start; first word capitalised
    assert toy.recase("der mann isst brot.") == "Der Mann isst Brot."
    # "essen" is mostly a verb here (5 of 8), but a noun after "das" (3 times; min_count 2)
    assert toy.recase("ein kind sieht das essen und sie essen.") == "Ein Kind sieht das Essen und sie essen."
    assert toy.after == {"das\tessen": "Essen"}
    assert toy.recase("in den usa") == "In den USA"
    # unknown compounds take the case of their longest known ending of 4+ letters
    assert toy.recase("der straßenmusiker isst brotreste") == "Der Straßenmusiker isst brotreste"
    assert toy.recase("ein parkmusiker") == "Ein Parkmusiker"  # "musiker" (7 letters) before "park"
    # unknown short words stay as they are; everything that is not a letter is kept
    assert toy.recase("  xyz  42 ,,mann--brot!! ") == "  Xyz  42 ,,Mann--Brot!! "
    assert toy.recase("") == "" and toy.recase("123 !") == "123 !"
    assert toy(["der mann", "das essen"]) == ["Der Mann", "Das Essen"]
    assert toy.recase("DER MANN isst BROT") == "Der Mann isst Brot"  # the input's own case is ignored


def test_the_first_word_is_capitalised_only_where_the_corpus_does_so():
    lower_start = Recaser.fit(["ein mann isst.", "der Mann isst.", "Ein Hund."])
    assert not lower_start.capitalize_first
    assert lower_start.recase("ein mann") == "ein Mann"


def test_fitting_is_deterministic_and_storage_round_trips(toy):
    again = Recaser.fit(list(reversed(TOY)))
    assert again == toy and again.to_bytes() == toy.to_bytes()
    copy = Recaser.from_bytes(toy.to_bytes())
    assert copy == toy and copy.recase("das essen") == "Das Essen"
    fitter = RecaserFitter()
    for text in TOY:
        fitter.add(text)
    assert fitter.result() == toy
    with pytest.raises(ValueError, match="not a stored recaser"):
        Recaser.from_bytes(b"garbage")
    import json
    import zlib

    with pytest.raises(ValueError, match="format 'other'"):
        Recaser.from_bytes(zlib.compress(json.dumps({"format": "other", "version": 1}).encode()))


@pytest.fixture(scope="module")
def multi30k():
    return Recaser.fit(bundled_lines("train.de"))


@pytest.mark.parametrize("split", ["val", "test2016"])
def test_lowercased_references_recased_score_above_95_bleu(multi30k, split):
    """Measured 96.4 (val) and 96.2 (test2016) sacreBLEU against the original references."""
    import sacrebleu

    references = bundled_lines(f"{split}.de")
    recased = multi30k([r.lower() for r in references])
    assert sacrebleu.corpus_bleu(recased, [references]).score > 95.0
    assert sum(r == o for r, o in zip(recased, references)) > 0.8 * len(references)


@pytest.mark.parametrize("name", ["val.de", "test2016.de", "val.en"])
def test_the_graph_recases_like_python_on_every_line(multi30k, name):
    import tensorflow as tf

    lines = [line.lower() for line in bundled_lines(name)] + [
        "", "   ", "123 !!", "straßenmusiker spielen", "ßtraße", "a", "das essen ist gut",
        "ein mann im usa-t-shirt.", "éin ünbekanntes wörtchen", "x" * 80, "mann\tmann\nmann",
        "DER MANN isst BROT", "Ärger ÜBER Straßenmusiker"]
    in_graph = [t.decode("utf-8") for t in multi30k.tf_recase(tf.constant(lines)).numpy()]
    assert in_graph == multi30k(lines)


def test_inside_a_sentencepiece_model_the_pieces_and_ids_stay(multi30k, tmp_path):
    import sentencepiece as spm

    from tf_transformer.config import DataConfig
    from tf_transformer.data import build_vocab

    corpus = write_tiny_parallel_corpus(tmp_path / "c")
    cfg = DataConfig(source="text", train_source=str(corpus / "train.en"), train_target=str(corpus / "train.de"),
                     vocab_size=40)
    proto = open(build_vocab(cfg, tmp_path / "spm", progress=lambda m: None)["model"], "rb").read()
    assert attached(proto) is None
    carrying = attach(proto, multi30k)
    assert attached(carrying) == multi30k
    toy = Recaser.fit(TOY)
    assert attached(attach(carrying, toy)) == toy  # replaced, not added
    assert len(attach(carrying, toy)) == len(attach(proto, toy))
    plain, loaded = spm.SentencePieceProcessor(), spm.SentencePieceProcessor()
    plain.LoadFromSerializedProto(proto)
    loaded.LoadFromSerializedProto(carrying)
    texts = ["a man runs", "ein hund läuft auf gras"]
    assert loaded.encode(texts) == plain.encode(texts)
    assert [loaded.id_to_piece(i) for i in range(40)] == [plain.id_to_piece(i) for i in range(40)]
    assert FIELD >= 200  # the range the model format leaves to extensions


def test_build_vocab_fits_the_recaser_on_the_target_side_only(tmp_path):
    from tf_transformer.config import DataConfig
    from tf_transformer.data import Tokenizer, build_vocab

    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_text("The Dog runs.\nA Dog sleeps.\n", encoding="utf-8")
    tgt.write_text("Der Hund läuft.\nEin Hund schläft in Berlin.\n", encoding="utf-8")
    for lowercase in (True, False):
        cfg = DataConfig(source="text", train_source=str(src), train_target=str(tgt), vocab_size=30,
                         lowercase=lowercase)
        info = build_vocab(cfg, tmp_path / f"spm-{lowercase}", progress=lambda m: None)
        tok = Tokenizer(info["model"])
        if not lowercase:
            assert tok.recaser is None
            continue
        assert tok.recaser == Recaser.fit(tgt.read_text(encoding="utf-8").splitlines())
        assert "dog" not in tok.recaser.words and tok.recaser.words["berlin"] == "Berlin"
        assert "recaser of 5 target words" in info["summary"] and "recased" in repr(tok)


def test_a_sampled_vocabulary_fits_the_recaser_on_the_sampled_targets(tmp_path):
    import numpy as np

    from tf_transformer.config import DataConfig
    from tf_transformer.data import Tokenizer, build_vocab

    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    english = ["The Dog runs.", "A Cat sleeps.", "Two Birds sing.", "One Fish swims."]
    german = ["Der Hund läuft.", "Eine Katze schläft.", "Zwei Vögel singen.", "Ein Fisch schwimmt."]
    src.write_text("".join(t + "\n" for t in english), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for t in german), encoding="utf-8")
    cfg = DataConfig(source="text", train_source=str(src), train_target=str(tgt), vocab_size=30,
                     lowercase=True, vocab_input_sentence_size=5, seed=3)
    tok = Tokenizer(build_vocab(cfg, tmp_path / "spm", progress=lambda m: None)["model"])
    # the sample build_vocab draws: indices 0-3 are the English lines, 4-7 the German ones
    chosen = np.sort(np.random.default_rng(3).choice(8, size=5, replace=False))
    assert tok.recaser == Recaser.fit([german[i - 4] for i in chosen if i >= 4])
    assert 0 < sum(i >= 4 for i in chosen) < 4  # the test means something: some targets left out
