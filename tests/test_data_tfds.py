"""The TFDS source, offline: a tiny translation builder prepared in a temporary data_dir."""

from collections import Counter

import numpy as np
import pytest
import tensorflow_datasets as tfds

from tf_transformer.config import DataConfig
from tf_transformer.data import (
    Tokenizer,
    build_vocab,
    dataset_statistics,
    make_dataset,
    read_parallel_text,
)
from tf_transformer.errors import DataError

EN = ["A dog runs on the beach.", "Two men are playing chess.", "A girl reads a book.",
      "People walk in the street.", "A cat sleeps.", "", "The sun is shining.",
      "Children are playing football in a park."]
DE = ["Ein Hund rennt am Strand.", "Zwei Männer spielen Schach.", "Ein Mädchen liest ein Buch.",
      "Menschen gehen auf der Straße.", "Eine Katze schläft.", "Leer.", "Die Sonne scheint.",
      "Kinder spielen Fußball in einem Park."]
TRAIN = 6


class TftTestTinyTranslation(tfds.core.GeneratorBasedBuilder):
    """Eight En-De pairs written by the test; no download."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.Translation(languages=("de", "en")),
            supervised_keys=("de", "en"),
        )

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(0, TRAIN), "validation": self._generate_examples(TRAIN, len(EN))}

    def _generate_examples(self, start, stop):
        for i in range(start, stop):
            yield i, {"en": EN[i], "de": DE[i]}


NAME = "tft_test_tiny_translation"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tfds")
    TftTestTinyTranslation(data_dir=str(path)).download_and_prepare()
    return str(path)


def tfds_config(data_dir, **kw):
    return DataConfig(source="tfds", tfds_name=NAME, tfds_data_dir=data_dir, vocab_size=60,
                      vocab_character_coverage=1.0, **kw)


@pytest.fixture(scope="module")
def tok(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("spm") / "spm"
    build_vocab(tfds_config(data_dir), out, progress=lambda m: None)
    return Tokenizer(str(out) + ".model")


def test_tfds_pairs_batches_and_statistics(data_dir, tok, capsys):
    cfg = tfds_config(data_dir)
    got = Counter()
    for (src, tgt_in), tgt_out in make_dataset(cfg, "train", tok, training=False).as_numpy_iterator():
        assert (tgt_in[:, 0] == 2).all()
        for s, t in zip(src, tgt_out):
            got[(tuple(int(v) for v in s if v), tuple(int(v) for v in t if v)[:-1])] += 1
    assert "data train" in capsys.readouterr().err
    # the train split holds EN[0:6]; pair 5 has an empty English side and is dropped
    kept = [i for i in range(TRAIN) if EN[i]]
    expected = Counter(zip(map(tuple, tok.encode([EN[i] for i in kept])),
                           map(tuple, tok.encode([DE[i] for i in kept]))))
    assert got == expected
    stats = dataset_statistics(cfg, "train", tok)
    assert (stats.pairs, stats.kept, stats.dropped_empty) == (TRAIN, TRAIN - 1, 1)
    assert stats.origin.startswith(f"tfds:{NAME}[train]")
    # training: shuffled with a seed, repeated
    a = list(make_dataset(cfg, "train", tok, seed=3, verbose=False).take(5).as_numpy_iterator())
    b = list(make_dataset(cfg, "train", tok, seed=3, verbose=False).take(5).as_numpy_iterator())
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[0][0], y[0][0])
        np.testing.assert_array_equal(x[1], y[1])


def test_tfds_direction_and_read_parallel_text(data_dir):
    cfg = tfds_config(data_dir, source_lang="de", target_lang="en")
    src, tgt = read_parallel_text(cfg, "valid")
    assert sorted(zip(src, tgt)) == sorted(zip(DE[TRAIN:], EN[TRAIN:]))


def test_tfds_clear_errors(data_dir, tmp_path):
    with pytest.raises(DataError, match="not prepared in .*tfds build"):
        read_parallel_text(tfds_config(str(tmp_path / "empty")), "train")
    with pytest.raises(DataError, match=r"data.target_lang='fr' is not a feature .*de, en"):
        read_parallel_text(tfds_config(data_dir, target_lang="fr"), "train")
    with pytest.raises(DataError, match=r"data.tfds_test_split='test' is not a split .*train, validation"):
        read_parallel_text(tfds_config(data_dir), "test")
    with pytest.raises(DataError, match="data.tfds_name='no_such_dataset_xyz'"):
        read_parallel_text(DataConfig(source="tfds", tfds_name="no_such_dataset_xyz",
                                      tfds_data_dir=str(tmp_path)), "train")


def test_a_failed_tfds_download_is_a_data_error(tmp_path, monkeypatch):
    """data.tfds_download without a network: TFDS' own error (a urllib3 one, after retries) is
    said in the package's terms, with the way to prepare the data elsewhere."""
    import tensorflow_datasets as tfds

    class Offline:
        def is_prepared(self):
            return False

        def download_and_prepare(self):
            raise ConnectionError("HTTPConnectionPool(host='www.statmt.org', port=80): Max retries exceeded")

    monkeypatch.setattr(tfds, "builder", lambda name, data_dir=None: Offline())
    cfg = tfds_config(str(tmp_path), tfds_download=True)
    with pytest.raises(DataError, match=r"could not be downloaded and prepared in .*\(ConnectionError: "
                                        r"HTTPConnectionPool.*tfds build .* --data_dir DIR"):
        read_parallel_text(cfg, "train")


def test_tfds_vocabulary_sample_is_selected_in_the_graph(data_dir, tmp_path):
    from tf_transformer.data import prepare, sources

    cfg = tfds_config(data_dir)
    every = list(sources.iter_training_sentences(cfg))
    assert len(every) == 2 * TRAIN and sorted(every[:TRAIN]) == sorted(EN[:TRAIN])
    picked = [0, 3, 7, 11]
    assert list(sources.iter_training_sentences(cfg, picked)) == [every[i] for i in picked]
    # a TFDS corpus prepares like text: the same ids, from the shards
    out = tmp_path / "prepared"
    tok = Tokenizer(build_vocab(cfg, tmp_path / "spm", progress=lambda m: None)["model"])
    prepare(cfg, out, tok, shards=2, log=lambda m: None)
    pcfg = DataConfig(source="prepared", prepared_dir=str(out), max_length=cfg.max_length)

    def ids(c):
        out = Counter()
        for (src, _), tgt in make_dataset(c, "train", tok, repeat=False, verbose=False).as_numpy_iterator():
            out.update((tuple(s[s != 0]), tuple(t[t != 0])) for s, t in zip(src, tgt))
        return out

    assert ids(pcfg) == ids(cfg) and sum(ids(cfg).values()) == TRAIN - 1  # the empty pair is dropped
