"""Minimum Bayes risk decoding: the chrF and BLEU utilities against sacreBLEU's sentence chrF and
BLEU, the choice against a brute-force search, and `tft translate --mbr` against the n-best lists
it chooses from."""

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from helpers.tiny_model import toy_sentences

from tf_transformer.evaluation.mbr import MBRTranslator, bleu_matrix, chrf_matrix, mbr_choose

REPO = Path(__file__).resolve().parents[1]


def _lines(n=30, seed=0):
    with gzip.open(REPO / "data" / "multi30k" / "test2016.de.gz", "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    rng = random.Random(seed)
    picked = [rng.choice(lines) for _ in range(n)]
    # word orders shuffled (the same characters, other n-grams) and edge cases
    picked += [" ".join(rng.sample(t.split(), len(t.split()))) for t in picked[:10]]
    picked += [" ".join(t.split()[:n]) for n, t in enumerate(picked[:8], start=1)]  # 1-8 words: the short orders
    return picked + ["", "   ", "a", "ab", "Äö ü.", "x  y\tz", "aaaaaaa", "T-Shirt", "!!", "a b", "ab ab ab",
                     "a a a a a", "ein Hund.", "ein Hund rennt."]


def test_bleu_matrix_is_sacrebleus_sentence_bleu():
    """Every pair, short ones included (effective order, exp smoothing, brevity penalty, no match)."""
    texts = _lines(seed=3)
    got = bleu_matrix(texts)
    want = np.array([[sacrebleu.sentence_bleu(h, [r]).score for r in texts] for h in texts])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    assert ((0 < want) & (want < 100)).sum() > len(texts) ** 2 // 4 and (want == 0).any()
    np.testing.assert_allclose(bleu_matrix(texts[:3], texts[5:12]), want[:3, 5:12], rtol=0, atol=1e-9)


def test_chrf_matrix_is_sacrebleus_sentence_chrf():
    texts = _lines()
    got = chrf_matrix(texts)
    want = np.array([[sacrebleu.sentence_chrf(h, [r]).score for r in texts] for h in texts])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    assert got.shape == (len(texts), len(texts)) and 0 < got[0, 1] < 100 and got[0, 0] == pytest.approx(100)
    # hypotheses and references apart (not square)
    np.testing.assert_allclose(chrf_matrix(texts[:3], texts[5:12]), want[:3, 5:12], rtol=0, atol=1e-9)
    assert chrf_matrix([], texts[:2]).shape == (0, 2)


@pytest.mark.parametrize("utility", ["chrf", "bleu"])
def test_mbr_choice_is_the_brute_force_one(utility):
    """The choice maximises the mean sacreBLEU sentence score against every candidate
    (duplicates counted as often as drawn), the first of equal ones; checked on random candidate
    lists with repeats."""
    score = {"chrf": sacrebleu.sentence_chrf, "bleu": sacrebleu.sentence_bleu}[utility]
    rng = random.Random(1)
    pool = _lines(40, seed=2)[:45]
    for trial in range(40):
        candidates = [rng.choice(pool[trial % 9: trial % 9 + 6]) for _ in range(rng.randint(1, 9))]
        expected = [np.mean([score(h, [r]).score for r in candidates]) for h in candidates]
        index, value = mbr_choose(candidates, utility)
        assert index == int(np.argmax(expected)), (candidates, expected)
        assert value == pytest.approx(max(expected), abs=1e-9)
    assert mbr_choose([]) == (-1, pytest.approx(float("nan"), nan_ok=True))


def test_mbr_picks_the_consensus_and_breaks_ties_toward_the_first():
    candidates = ["ein hund rennt.", "ein hund läuft.", "zwei katzen schlafen.", "ein hund rennt."]
    assert mbr_choose(candidates)[0] == 0  # the repeated candidate, closest to the others
    # chrF2 weighs recall over precision: a candidate that holds the others' words and more wins
    longer = ["ein hund rennt.", "ein hund rennt schnell.", "zwei katzen schlafen.", "ein hund rennt."]
    assert mbr_choose(longer)[0] == 1
    assert mbr_choose(["b a", "a b"])[0] == 0  # equal expected utility: the earlier
    assert mbr_choose(["a", "a"]) == (0, pytest.approx(100))
    with pytest.raises(ValueError, match="utility='ter': one of bleu, chrf"):
        mbr_choose(["a", "b"], utility="ter")


class _Lists:
    """A stand-in translator that returns fixed candidate lists."""

    n_best, limit = 3, 64

    def __init__(self, lists):
        self.lists = lists

    def translate(self, texts, progress=None):
        return [self.lists[t] for t in texts], [[0.0] * len(self.lists[t]) for t in texts], "stats"


def test_mbr_translator_writes_the_chosen_candidate_and_its_expected_utility():
    lists = {"x": ["a dog", "a dog runs", "a dog runs"], "y": [], "z": ["zwei frauen", "ein mann", "ein mann"]}
    mbr = MBRTranslator(_Lists(lists))
    outputs, scores, stats = mbr.translate(["x", "y", "z"])
    assert outputs == ["a dog runs", "", "ein mann"] and stats == "stats"
    assert scores[0] == pytest.approx(mbr_choose(lists["x"])[1]) and scores[1] == 0.0
    assert mbr.limit == 64 and mbr.n_best == 3  # the wrapped translator's
    assert not hasattr(mbr, "translate_ids")  # ids would bypass the choice
    one = _Lists(lists)
    one.n_best = 1
    with pytest.raises(ValueError, match="needs n_best >= 2"):
        MBRTranslator(one)


def test_cli_translate_mbr_chooses_among_the_n_best_and_the_samples(assets, tmp_path, capsys):
    """`--mbr 3` writes, per line, what mbr_choose picks from the 3-best list of `--n-best 3`
    (beam 3) and from `--sample --n-best 3`'s samples; --scores gives the expected chrF;
    its flags are checked."""
    from tf_transformer.cli import main

    texts = toy_sentences(12, seed=21)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n")
    flags = ["translate", "--model", assets[0], "--vocab", assets[1], "--input", str(src), "--max-extra-len", "8",
             "--quiet"]

    def lists(path):
        out = {}
        for line in path.read_text().splitlines():
            index, text, score = line.split(" ||| ")
            out.setdefault(int(index), []).append(text)
        return [out.get(i, []) for i in range(len(texts))]

    for extra, utility in ((["--beam", "3"], "chrf"), (["--sample", "--seed", "4"], "chrf"),
                           (["--sample", "--seed", "4"], "bleu")):
        assert main([*flags, *extra, "--n-best", "3", "--output", str(tmp_path / "n")]) == 0
        assert main([*flags, *extra, "--mbr", "3", "--mbr-utility", utility, "--scores",
                     "--output", str(tmp_path / "m")]) == 0
        want = [(c[mbr_choose(c, utility)[0]], mbr_choose(c, utility)[1]) for c in lists(tmp_path / "n")]
        got = [line.split("\t") for line in (tmp_path / "m").read_text().splitlines()]
        assert [t for _, t in got] == [t for t, _ in want]
        np.testing.assert_allclose([float(s) for s, _ in got], [v for _, v in want], atol=1e-4)
        assert sum(len(set(c)) > 1 for c in lists(tmp_path / "n")) >= 3  # real choices were made
    err = capsys.readouterr().err
    assert "MBR by chrF among the 3 best" in err and "MBR by BLEU among them" in err
    # tft evaluate --mbr: the same choice among the beam's 3 best, scored, and said in its JSON
    reference = tmp_path / "ref.txt"
    reference.write_text("\n".join(texts) + "\n")  # the tiny model copies its input
    assert main([*flags, "--beam", "3", "--mbr", "3", "--output", str(tmp_path / "m")]) == 0
    assert main(["evaluate", "--model", assets[0], "--vocab", assets[1], "--source", str(src), "--reference",
                 str(reference), "--max-extra-len", "8", "--quiet", "--beam", "3", "--mbr", "3",
                 "--output", str(tmp_path / "e"), "--json", str(tmp_path / "e.json")]) == 0
    assert (tmp_path / "e").read_text() == (tmp_path / "m").read_text()
    assert json.loads((tmp_path / "e.json").read_text())["decode"]["mbr"] == {"candidates": 3, "utility": "chrf"}
    assert "MBR by chrF among the 3 best" in capsys.readouterr().out
    for bad, message in ((["--mbr-utility", "bleu"], "--mbr-utility applies to --mbr only"),
                         (["--mbr", "1"], "--mbr 1: the number of candidates to choose among; must be >= 2"),
                         (["--beam", "2", "--mbr", "3"], "--mbr 3: must be between 2 and the beam size (2; --beam)"),
                         (["--mbr", "3", "--n-best", "2"], "--mbr N writes one translation per line"),
                         (["--mbr", "3", "--score-target", str(src)], "--mbr, --max-extra-len do not apply to it")):
        assert main([*flags, *bad]) == 2
        assert message in capsys.readouterr().err
    # the way out through --sample is offered where the command has it
    assert main([*flags, "--beam", "2", "--mbr", "3"]) == 2
    assert "; or add --sample to choose among N samples" in capsys.readouterr().err
    assert main(["evaluate", "--model", assets[0], "--vocab", assets[1], "--source", str(src), "--reference",
                 str(reference), "--beam", "2", "--mbr", "3"]) == 2
    err = capsys.readouterr().err
    assert "--mbr 3: must be between 2 and the beam size (2; --beam)" in err and "--sample" not in err
