"""The batching every translator shares (tf_transformer.decoding.batches), with a fake decoder:
clipping, empty sources, longest-first batches, input order restored, pads dropped, stats,
progress, and workers that do not change the results."""

import threading

import pytest

from tf_transformer.decoding.batches import TranslationStats, check_decode_settings, decode_in_batches, translate_texts
from tf_transformer.errors import UserError


class FakeDecoder:
    """Decodes a row to its ids reversed, with a pad (0) after each id, and scores it -len;
    records the rows of each batch and the threads that decoded them."""

    def __init__(self):
        self.batches = []
        self.threads = set()
        self.lock = threading.Lock()

    def __call__(self, rows):
        with self.lock:
            self.batches.append([list(r) for r in rows])
            self.threads.add(threading.get_ident())
        return [([t for i in reversed(r) for t in (i, 0)], -float(len(r))) for r in rows]


SOURCES = [[5, 6, 7], [], [4] * 12, [8], [9, 10], [], [11, 12, 13, 14, 15], [6, 5]]


def test_decode_in_batches_clips_skips_sorts_and_restores_order():
    fake, calls = FakeDecoder(), []
    outputs, scores, stats = decode_in_batches(SOURCES, limit=10, batch_size=3, decode_batch=fake,
                                               progress=calls.append)
    clipped = [s[:10] for s in SOURCES]
    assert outputs == [list(reversed(s)) for s in clipped]  # input order, pads dropped
    assert scores == [-float(len(s)) if s else 0.0 for s in clipped]
    assert all(type(t) is int for o in outputs for t in o) and all(type(s) is float for s in scores)
    # empty sources are not decoded; the rest go longest first, batch_size at a time
    assert [len(r) for b in fake.batches for r in b] == [10, 5, 3, 2, 2, 1]
    assert [len(b) for b in fake.batches] == [3, 3]
    assert [4] * 10 in fake.batches[0]  # cut to the limit before decoding
    assert calls == [2, 3, 3]  # the skipped ones first, then one call per batch
    assert stats == TranslationStats(sentences=8, decoded=6, source_tokens=23, output_tokens=23, truncated=1,
                                     seconds=stats.seconds, batches=2)
    assert stats.seconds >= 0


def test_decode_in_batches_fills_the_stats_it_is_given():
    class Stats(TranslationStats):
        extra = 0

    given = Stats()
    _, _, stats = decode_in_batches([[1], []], 5, 4, FakeDecoder(), stats=given)
    assert stats is given and (stats.sentences, stats.decoded, stats.batches) == (2, 1, 1)
    assert decode_in_batches([], 5, 4, FakeDecoder())[:2] == ([], [])


@pytest.mark.parametrize("workers", [2, 4])
def test_workers_give_the_same_results(workers):
    sources = [[i % 7 + 1] * (i % 9 + 1) for i in range(40)] + [[]]
    one = decode_in_batches(sources, 6, 4, FakeDecoder())
    fake, calls = FakeDecoder(), []
    many = decode_in_batches(sources, 6, 4, fake, progress=calls.append, workers=workers)
    assert many[:2] == one[:2]
    assert sum(calls) == len(sources) and many[2].batches == 10 == len(fake.batches)
    assert dataclass_counts(many[2]) == dataclass_counts(one[2])


def dataclass_counts(stats):
    return (stats.sentences, stats.decoded, stats.source_tokens, stats.output_tokens, stats.truncated, stats.batches)


class FakeTokenizer:
    """Words <-> ids: a word is its length + 3; decoding writes each id as that many 'x' and
    puts a line break inside (to be removed)."""

    def encode(self, texts):
        return [[len(w) + 3 for w in t.split()] for t in texts]

    def decode(self, outputs):
        return ["\r\n".join("x" * (i - 3) for i in ids) for ids in outputs]


def test_translate_texts_encodes_non_empty_and_keeps_one_line_each():
    seen = []

    def translate_ids(sources, progress=None):
        seen.append((sources, progress))
        return [list(s) for s in sources], [1.0 * len(s) for s in sources], "stats"

    texts = ["ab c", "", "   ", "abcd"]
    out, scores, stats = translate_texts(texts, FakeTokenizer(), translate_ids, progress=print)
    assert seen == [([[5, 4], [], [], [7]], print)]
    assert out == ["xx  x", "", "", "xxxx"]  # CR and LF each become a space
    assert scores == [2.0, 0.0, 0.0, 1.0] and stats == "stats"


@pytest.mark.parametrize("setting, message", [
    ({"beam_size": 0}, "beam_size=0: must be >= 1"),
    ({"alpha": -0.1}, "alpha=-0.1: must be >= 0"),
    ({"max_extra_length": -1}, "max_extra_length=-1: must be >= 0"),
    ({"batch_size": 0}, "batch_size=0: must be >= 1"),
])
def test_check_decode_settings(setting, message):
    edge = {"beam_size": 1, "alpha": 0.0, "max_extra_length": 0, "batch_size": 1}
    check_decode_settings(**edge)  # the smallest accepted values
    with pytest.raises(UserError) as e:
        check_decode_settings(**{**edge, **setting})
    assert str(e.value) == message
