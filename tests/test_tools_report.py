"""tools/multi30k_report.py: the choice of weights and beam is made on val alone."""

from __future__ import annotations

import pytest
from helpers.tools import load_tool


@pytest.fixture(scope="module")
def report():
    return load_tool("multi30k_report")


def scored(val: dict, test: dict) -> dict:
    """``{(split, beam): {"scores": {"bleu_lc_moses": x}}}`` from ``{beam: x}`` per split."""
    out = {}
    for split, by_beam in (("val", val), ("test2016", test)):
        for beam, value in by_beam.items():
            out[(split, beam)] = {"scores": {"bleu_lc_moses": value, "sacrebleu": value - 0.3}}
    return out


def test_choice_follows_val_and_ignores_test(report):
    results = {
        "final": scored({4: 37.4, 5: 37.5}, {4: 41.9, 5: 42.0}),  # best on test, not on val
        "average of last 5": scored({4: 38.0, 5: 37.9}, {4: 39.1, 5: 39.0}),  # best on val
        "best (best-4200)": scored({4: 36.6, 5: 36.7}, {4: 40.0, 5: 40.1}),
    }
    assert report.choose_on_val(results, [4, 5]) == ("average of last 5", 4)
    # raising every test score of another set changes nothing; raising its val score does
    results["final"] = scored({4: 37.4, 5: 37.5}, {4: 99.0, 5: 99.0})
    assert report.choose_on_val(results, [4, 5]) == ("average of last 5", 4)
    results["final"] = scored({4: 37.4, 5: 38.2}, {4: 0.0, 5: 0.0})
    assert report.choose_on_val(results, [4, 5]) == ("final", 5)


def test_choice_ties_go_to_the_first_set_and_beam(report):
    results = {"a": scored({4: 30.0, 5: 30.0}, {4: 1.0, 5: 2.0}), "b": scored({4: 30.0, 5: 30.0}, {4: 3.0, 5: 4.0})}
    assert report.choose_on_val(results, [4, 5]) == ("a", 4)
    assert report.choose_on_val(results, [5, 4]) == ("a", 5)


def test_run_on_count(report):
    sources = ["a man sleeps", "two dogs", ""]
    hypotheses = ["ein Mann schläft", "zwei Hunde sehr sehr sehr sehr sehr", "ein Wort zwei"]
    # over twice the source's words: line 2 (6 > 4) and line 3 (3 > 2, an empty source counts as one word)
    assert report.run_on_count(sources, hypotheses) == 2
