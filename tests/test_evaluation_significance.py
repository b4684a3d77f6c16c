"""Bootstrap intervals and paired tests: against a from-scratch NumPy/Counter reference with
the same documented draws, and the properties a resampling test must have."""

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest

from tf_transformer.errors import UserError
from tf_transformer.evaluation.significance import (
    Scorer,
    bootstrap_intervals,
    format_comparisons,
    format_intervals,
    paired_bootstrap,
    resample_counts,
)

WORDS = [f"w{i}" for i in range(40)]


def corpus(n=60, length=14, noise=0.3, seed=0):
    """``(hypotheses, references)``: lowercase word sentences (13a and the compound split
    leave them as they are); each hypothesis keeps its reference's first four words, so
    every resample has matches of every order (BLEU needs no smoothing), and replaces each
    later word with probability ``noise``."""
    rng = np.random.default_rng(seed)
    refs, hyps = [], []
    for _ in range(n):
        ref = list(rng.choice(WORDS, size=length))
        hyp = ref[:4] + [w if rng.random() > noise else str(rng.choice(WORDS)) for w in ref[4:]]
        if rng.random() < 0.5:
            hyp = hyp[:-2]  # some short hypotheses: the brevity penalty takes part
        refs.append(" ".join(ref))
        hyps.append(" ".join(hyp))
    return hyps, refs


def sentence_stats(hyp, ref, max_n=4):
    h, r = hyp.split(), ref.split()
    row = [len(h), len(r)]
    for n in range(1, max_n + 1):
        hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
        rc = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
        row.append(sum(min(k, rc[g]) for g, k in hc.items()))
    row += [max(len(h) - n + 1, 0) for n in range(1, max_n + 1)]
    return row


def bleu_of(stats):
    """Corpus BLEU from summed statistics (Papineni et al. 2002)."""
    c, r, matches, totals = stats[0], stats[1], stats[2:6], stats[6:10]
    log_p = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    return 100 * (1.0 if c >= r else math.exp(1 - r / c)) * math.exp(log_p)


def reference_resamples(hyps, refs, samples, seed):
    """Each resample's BLEU, recounted from scratch over the drawn sentences."""
    draws = np.random.default_rng(seed).integers(0, len(hyps), size=(samples, len(hyps)))
    out = []
    for row in draws:
        total = np.sum([sentence_stats(hyps[i], refs[i]) for i in row], axis=0)
        out.append(bleu_of(total))
    return np.array(out)


def test_resample_counts():
    counts = resample_counts(50, samples=200, seed=7)
    assert counts.shape == (200, 50) and (counts.sum(1) == 50).all() and counts.min() >= 0
    assert (counts == resample_counts(50, samples=200, seed=7)).all()
    assert (counts != resample_counts(50, samples=200, seed=8)).any()
    # each sentence is drawn once per resample on average
    assert counts.mean() == pytest.approx(1.0)
    with pytest.raises(UserError, match="at least 2 resamples"):
        resample_counts(50, samples=1)


def test_intervals_equal_the_reference():
    hyps, refs = corpus()
    got = bootstrap_intervals(hyps, refs, samples=300, seed=3, metrics=["sacrebleu", "bleu_paper"])
    scores = reference_resamples(hyps, refs, 300, 3)
    whole = bleu_of(np.sum([sentence_stats(h, r) for h, r in zip(hyps, refs)], axis=0))
    low, high = np.percentile(scores, [2.5, 97.5])
    for key in ("sacrebleu", "bleu_paper"):
        i = got[key]
        assert i.score == pytest.approx(whole, abs=1e-6)
        assert i.low == pytest.approx(low, abs=1e-6) and i.high == pytest.approx(high, abs=1e-6)
        assert i.mean == pytest.approx(scores.mean(), abs=1e-6)
        assert i.low < i.score < i.high


def test_interval_narrows_with_a_larger_test_set():
    hyps, refs = corpus(n=80)
    one = bootstrap_intervals(hyps, refs, samples=500, metrics=["sacrebleu", "chrf"])
    four = bootstrap_intervals(hyps * 4, refs * 4, samples=500, metrics=["sacrebleu", "chrf"])
    for key in ("sacrebleu", "chrf"):
        assert four[key].score == pytest.approx(one[key].score, abs=1e-6)
        ratio = (four[key].high - four[key].low) / (one[key].high - one[key].low)
        assert 0.35 < ratio < 0.65, ratio  # about 1/sqrt(4)


def test_paired_identical_systems():
    hyps, refs = corpus()
    c = paired_bootstrap(hyps, list(hyps), refs, samples=200)
    for comp in c.values():
        assert comp.delta == 0 and comp.low == 0 and comp.high == 0
        assert comp.wins == 0 and comp.p_value == 1.0 and comp.verdict == "not significant at 0.05"


def test_paired_clear_difference_and_symmetry():
    worse, refs = corpus(noise=0.5, seed=1)
    better = [r if i % 2 else w for i, (w, r) in enumerate(zip(worse, refs))]  # half the sentences perfect
    up = paired_bootstrap(worse, better, refs, samples=400, metrics=["sacrebleu", "bleu_lc_moses"])
    down = paired_bootstrap(better, worse, refs, samples=400, metrics=["sacrebleu", "bleu_lc_moses"])
    for key in up:
        assert up[key].delta > 10 and up[key].low > 0 and up[key].wins == 1.0
        assert up[key].p_value == pytest.approx(1 / 401) and up[key].verdict == "higher, significant at 0.05"
        assert down[key].delta == pytest.approx(-up[key].delta)
        assert (down[key].low, down[key].high) == pytest.approx((-up[key].high, -up[key].low))
        assert down[key].p_value == up[key].p_value and down[key].wins == 0.0


def test_paired_p_value_against_the_reference():
    """A small difference: the p-value and the interval recomputed from the same draws."""
    base, refs = corpus(noise=0.3, seed=4)
    other, _ = corpus(noise=0.3, seed=5)
    other = [o if i % 3 else b for i, (o, b) in enumerate(zip(other, base))]
    other = [" ".join(r.split()[:4] + o.split()[4:]) for o, r in zip(other, refs)]
    got = paired_bootstrap(base, other, refs, samples=300, seed=11, metrics=["sacrebleu"])["sacrebleu"]
    a = reference_resamples(base, refs, 300, 11)
    b = reference_resamples(other, refs, 300, 11)
    d = b - a
    observed = bleu_of(np.sum([sentence_stats(h, r) for h, r in zip(other, refs)], axis=0)) - \
        bleu_of(np.sum([sentence_stats(h, r) for h, r in zip(base, refs)], axis=0))
    assert got.delta == pytest.approx(observed, abs=1e-6)
    assert (got.low, got.high) == pytest.approx(tuple(np.percentile(d, [2.5, 97.5])), abs=1e-6)
    assert got.wins == pytest.approx(np.mean(d > 0))
    expected_p = (1 + np.sum(np.abs(d - d.mean()) >= abs(observed) - 1e-9)) / 301
    assert got.p_value == pytest.approx(expected_p)
    assert 0 < got.p_value <= 1


def test_scorer_prepares_each_text_once_and_agrees_with_the_functions(monkeypatch):
    from tf_transformer.evaluation import bleu

    spec = bleu.METRICS["bleu_lc_moses"]
    prepared = []

    def counting(texts, lang):
        prepared.append(tuple(texts))
        return spec.prepare(texts, lang)

    monkeypatch.setitem(bleu.METRICS, "bleu_lc_moses", dataclasses.replace(spec, prepare=counting))
    hyps, refs = corpus(seed=5)
    other, _ = corpus(seed=6, noise=0.6)
    other = [o if i % 3 else h for i, (o, h) in enumerate(zip(other, hyps))]
    scorer = Scorer(refs, "de", samples=200, seed=3, metrics=["bleu_lc_moses"])
    base, mine = scorer.system(other), scorer.system(hyps)
    intervals, comparison = scorer.intervals(mine), scorer.compare(base, mine)
    assert sorted(prepared) == sorted([tuple(refs), tuple(other), tuple(hyps)])  # once each
    assert mine["bleu_lc_moses"].score == spec(hyps, refs, "de")
    prepared.clear()
    assert intervals == bootstrap_intervals(hyps, refs, "de", samples=200, seed=3, metrics=["bleu_lc_moses"])
    assert comparison == paired_bootstrap(other, hyps, refs, "de", samples=200, seed=3,
                                          metrics=["bleu_lc_moses"])
    assert len(prepared) == 2 + 3  # the functions prepare again: references and the systems


def test_errors_and_lines():
    hyps, refs = corpus(n=10)
    with pytest.raises(UserError, match="10 hypotheses but 9 references"):
        bootstrap_intervals(hyps, refs[:9])
    with pytest.raises(UserError, match="same sentences"):
        paired_bootstrap(hyps, hyps[:9], refs)
    with pytest.raises(UserError, match="unknown metric.*bleu4"):
        bootstrap_intervals(hyps, refs, metrics=["bleu4"])
    lines = format_intervals(bootstrap_intervals(hyps, refs, samples=50))
    assert len(lines) == 5 and "95% interval [" in lines[0] and "50 resamples" in lines[0]
    lines = format_comparisons(paired_bootstrap(hyps, hyps, refs, samples=50))
    assert len(lines) == 5 and "p=1.000: not significant at 0.05" in lines[0]

