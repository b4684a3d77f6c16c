"""How sure a score is: bootstrap confidence intervals and paired significance tests.

A test set is a sample of sentences, so a corpus score has a sampling error of its own:
on Multi30k's test2016 (1,000 sentences) a BLEU of 40 is good to about +-1.6 (95%). Two
figures that differ by less say little until that error is accounted for. Both tools here
resample the test sentences with replacement (bootstrap resampling, Koehn, EMNLP 2004):

* :func:`bootstrap_intervals`: for one system, each metric of
  :data:`tf_transformer.evaluation.bleu.METRICS` on ``samples`` resampled test sets; the 95%
  interval is the 2.5th to 97.5th percentile of those scores (the percentile bootstrap).
* :func:`paired_bootstrap`: for two systems on the same sentences, both scored on the
  *same* resampled test sets (paired), so the noise they share (hard sentences) cancels.
  Reported: the observed difference (system minus baseline), its 95% interval, the share
  of resampled sets on which the system scores higher (Koehn's measure: >= 95% is
  "better with 95% confidence"), and a two-sided p-value for "no difference", from the
  differences shifted to mean zero (the bootstrap's null distribution):
  ``p = (1 + #{|d_i - mean(d)| >= |observed|}) / (samples + 1)``.

Each resampled corpus score is computed from summed per-sentence statistics (n-gram
matches and counts, lengths; chrF's character and word n-gram counts) by sacreBLEU's own
code, so a resample of all sentences once gives exactly the reported score. Resampling is
seeded (default 12345, sacreBLEU's default seed), so the figures repeat run to run; draw
``i`` of resample ``r`` is ``numpy.random.default_rng(seed).integers(0, n, (samples, n))[r, i]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Optional

from tf_transformer.errors import UserError
from tf_transformer.evaluation.bleu import METRICS, MetricSpec, Score, _check

__all__ = [
    "DEFAULT_SAMPLES",
    "DEFAULT_SEED",
    "Comparison",
    "Interval",
    "Scorer",
    "bootstrap_intervals",
    "format_comparisons",
    "format_intervals",
    "paired_bootstrap",
    "resample_counts",
]

DEFAULT_SAMPLES = 1000
DEFAULT_SEED = 12345


@dataclasses.dataclass
class Interval:
    """One metric of one system with its bootstrap 95% interval ``[low, high]`` and the
    mean over the ``samples`` resampled test sets."""

    key: str
    name: str
    score: float
    low: float
    high: float
    mean: float
    samples: int
    seed: int

    def line(self, width: int = 28) -> str:
        return (f"{self.name:<{width}} {self.score:6.2f}  95% interval [{self.low:.2f}, {self.high:.2f}] "
                f"(+-{(self.high - self.low) / 2:.2f}; mean {self.mean:.2f} over {self.samples:,} resamples)")

    def as_dict(self) -> dict:
        return {"score": round(self.score, 4), "low": round(self.low, 4), "high": round(self.high, 4),
                "mean": round(self.mean, 4), "samples": self.samples, "seed": self.seed}


@dataclasses.dataclass
class Comparison:
    """One metric, a system against a baseline on the same resampled test sets:
    ``delta = system - baseline``, its 95% interval, ``wins`` (share of resamples where the
    system scores higher) and the two-sided ``p_value`` of "no difference"."""

    key: str
    name: str
    baseline: float
    system: float
    delta: float
    low: float
    high: float
    wins: float
    p_value: float
    samples: int
    seed: int

    @property
    def verdict(self) -> str:
        if self.p_value >= 0.05:
            return "not significant at 0.05"
        return ("higher" if self.delta > 0 else "lower") + ", significant at 0.05"

    def line(self, width: int = 28) -> str:
        return (f"{self.name:<{width}} {self.system:6.2f} vs {self.baseline:6.2f}  {self.delta:+.2f} "
                f"[{self.low:+.2f}, {self.high:+.2f}]  higher in {100 * self.wins:.1f}% of resamples  "
                f"p={self.p_value:.3f}: {self.verdict}")

    def as_dict(self) -> dict:
        return {"baseline": round(self.baseline, 4), "system": round(self.system, 4),
                "delta": round(self.delta, 4), "low": round(self.low, 4), "high": round(self.high, 4),
                "wins": round(self.wins, 4), "p_value": round(self.p_value, 4),
                "samples": self.samples, "seed": self.seed}


def resample_counts(n: int, samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED):
    """``[samples, n]`` int array: how often resample ``r`` draws sentence ``i`` (each resample
    draws ``n`` sentences with replacement)."""
    import numpy as np

    if n < 1:
        raise UserError("no sentences to resample")
    if samples < 2:
        raise UserError(f"bootstrap resampling needs at least 2 resamples (got {samples}); 1000 is usual")
    draws = np.random.default_rng(seed).integers(0, n, size=(samples, n))
    counts = np.zeros((samples, n), dtype=np.int64)
    np.add.at(counts, (np.arange(samples)[:, None], draws), 1)
    return counts


class _Stats:
    """Per-sentence sufficient statistics of one metric for one system, and the corpus
    score of any weighting of its sentences. ``references``: as ``spec`` prepares them
    (:meth:`MetricSpec.prepared`; the same for every system, so prepared once)."""

    def __init__(self, spec: MetricSpec, hypotheses: Sequence[str], references: list[str], lang: str):
        import numpy as np

        self.spec = spec
        hyp, ref = spec.prepared(hypotheses, lang), references
        self.metric = spec.metric()
        self.result = self.metric.corpus_score(hyp, [ref])
        self.score: Score = spec.score_of(self.metric, self.result, lang)
        self.rows = np.asarray(self.metric._extract_corpus_statistics(hyp, [ref]), dtype=np.float64)
        whole = self.metric._compute_score_from_stats(list(self.rows.sum(0))).score
        if abs(whole - self.result.score) > 1e-6:  # sacreBLEU's internals moved: refuse, do not mislead
            raise RuntimeError(f"{spec.name}: the per-sentence statistics give {whole} for the whole corpus, "
                               f"not its score {self.result.score}; this sacreBLEU version is not supported here")

    def resampled(self, counts):
        """The corpus score of each resample (``counts``: :func:`resample_counts`)."""
        import numpy as np

        sums = counts @ self.rows
        compute = self.metric._compute_score_from_stats
        return np.array([compute(list(row)).score for row in sums])


def _specs(metrics: Optional[Iterable[str]]) -> list[MetricSpec]:
    keys = list(METRICS) if metrics is None else list(metrics)
    unknown = [k for k in keys if k not in METRICS]
    if unknown:
        raise UserError(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(METRICS)}")
    return [METRICS[k] for k in keys]


class Scorer:
    """Scores many systems against one reference, each system's text prepared (e.g. Moses-
    tokenized, the slow part) once for its scores, its intervals and all its comparisons,
    and the references once for all systems. Every resample draws the same sentences
    (:func:`resample_counts` with ``samples`` and ``seed``), so any two systems scored here
    are paired.

    >>> scorer = Scorer(["Ein Hund läuft im Park .", "Zwei Männer spielen Fußball .",
    ...                  "Eine Frau liest ein Buch ."], "de", samples=200, metrics=["bleu_lc_moses"])
    >>> base = scorer.system(["Ein Hund rennt im Park .", "Zwei Männer spielen .", "Eine Frau liest ."])
    >>> mine = scorer.system(["Ein Hund läuft im Park .", "Zwei Männer spielen Fußball .",
    ...                       "Eine Frau liest ein Heft ."])
    >>> c = scorer.compare(base, mine)["bleu_lc_moses"]
    >>> round(c.baseline, 2), round(c.system, 2), c.low < c.delta < c.high, c.p_value < 0.05
    (31.14, 83.88, True, True)
    >>> i = scorer.intervals(mine)["bleu_lc_moses"]
    >>> i.low <= i.score <= i.high
    True
    """

    def __init__(self, references: Sequence[str], lang: str = "de", *, samples: int = DEFAULT_SAMPLES,
                 seed: int = DEFAULT_SEED, metrics: Optional[Iterable[str]] = None):
        if not references:
            raise UserError("no reference sentences to score against")
        self.references = list(references)
        self.lang = lang
        self.samples, self.seed = samples, seed
        self.specs = _specs(metrics)
        self._prepared = {spec.key: spec.prepared(self.references, lang) for spec in self.specs}
        self._counts = None

    @property
    def counts(self):
        """The ``[samples, n]`` resample counts, drawn on first use."""
        if self._counts is None:
            self._counts = resample_counts(len(self.references), self.samples, self.seed)
        return self._counts

    def system(self, hypotheses: Sequence[str]) -> dict[str, _Stats]:
        """One system's statistics for each metric; ``[key].score`` is its :class:`Score`."""
        _check(hypotheses, self.references)
        return {spec.key: _Stats(spec, hypotheses, self._prepared[spec.key], self.lang)
                for spec in self.specs}

    def intervals(self, stats: dict[str, _Stats]) -> dict[str, Interval]:
        """95% bootstrap interval of each metric of one system (:meth:`system`)."""
        import numpy as np

        out = {}
        for key, st in stats.items():
            scores = st.resampled(self.counts)
            low, high = np.percentile(scores, [2.5, 97.5])
            out[key] = Interval(key, st.spec.name, st.result.score, float(low), float(high),
                                float(scores.mean()), self.samples, self.seed)
        return out

    def compare(self, base: dict[str, _Stats], mine: dict[str, _Stats]) -> dict[str, Comparison]:
        """System ``mine`` against ``base`` on the same resampled test sets, on each metric."""
        import numpy as np

        out = {}
        for key, st in mine.items():
            diffs = st.resampled(self.counts) - base[key].resampled(self.counts)
            observed = st.result.score - base[key].result.score
            low, high = np.percentile(diffs, [2.5, 97.5])
            extreme = np.abs(diffs - diffs.mean()) >= abs(observed) - 1e-9
            out[key] = Comparison(
                key, st.spec.name, base[key].result.score, st.result.score, observed, float(low), float(high),
                float(np.mean(diffs > 0)), float((1 + extreme.sum()) / (self.samples + 1)), self.samples,
                self.seed)
        return out


def bootstrap_intervals(hypotheses: Sequence[str], references: Sequence[str], lang: str = "de", *,
                        samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED,
                        metrics: Optional[Iterable[str]] = None) -> dict[str, Interval]:
    """95% bootstrap interval of each metric (all of :data:`METRICS` unless ``metrics``)."""
    _check(hypotheses, references)
    scorer = Scorer(references, lang, samples=samples, seed=seed, metrics=metrics)
    return scorer.intervals(scorer.system(hypotheses))


def paired_bootstrap(baseline: Sequence[str], system: Sequence[str], references: Sequence[str], lang: str = "de",
                     *, samples: int = DEFAULT_SAMPLES, seed: int = DEFAULT_SEED,
                     metrics: Optional[Iterable[str]] = None) -> dict[str, Comparison]:
    """``system`` against ``baseline`` (translations of the same sentences) on each metric."""
    _check(baseline, references)
    if len(system) != len(baseline):
        raise UserError(f"the system has {len(system):,} translations but the baseline {len(baseline):,}: "
                        "a paired test needs translations of the same sentences")
    scorer = Scorer(references, lang, samples=samples, seed=seed, metrics=metrics)
    return scorer.compare(scorer.system(baseline), scorer.system(system))


def format_intervals(intervals: dict[str, Interval]) -> list[str]:
    """One line per metric."""
    width = max(len(i.name) for i in intervals.values())
    return [i.line(width) for i in intervals.values()]


def format_comparisons(comparisons: dict[str, Comparison]) -> list[str]:
    """One line per metric."""
    width = max(len(c.name) for c in comparisons.values())
    return [c.line(width) for c in comparisons.values()]
