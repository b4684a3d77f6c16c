"""Minimum Bayes risk (MBR) decoding: of a sentence's candidate translations, choose the one
with the highest expected utility against the model's distribution, estimated by the same
candidates taken as pseudo-references (Kumar & Byrne, 2004; Eikema & Aziz, 2020; Freitag et
al., 2022):

    choice = argmax_h  (1/N) sum_r  u(h, r)     over the N candidates h, r

With candidates sampled from the model (``tft translate --sample --mbr N``) the mean is a Monte
Carlo estimate of ``E_{y ~ P(y|x)} u(h, y)``; with a beam's n-best list (``--mbr N`` without
``--sample``) it weighs the list's hypotheses equally. A candidate drawn twice counts twice as a
reference (and is scored once as a hypothesis). Ties go to the earlier candidate (the beam's
better one, or the earlier draw).

The utility is sentence-level chrF (Popović, 2015) exactly as sacreBLEU's ``sentence_chrf``
computes it with its defaults (character n-grams of orders 1-6, spaces removed, beta 2,
precision and recall averaged over the orders that both sides have): ``chrf_matrix`` computes
all ``N x N`` pairs of a sentence at once from n-gram count vectors, instead of ``N^2`` calls.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

import numpy as np

__all__ = ["MBRTranslator", "chrf_matrix", "mbr_choose", "UTILITIES"]

CHAR_ORDER = 6
BETA = 2


def _char_ngram_counts(texts: Sequence[str], order: int = CHAR_ORDER) -> list[np.ndarray]:
    """Per order n = 1..order: int ``[len(texts), G_n]``, each text's counts of the G_n
    distinct character n-grams of all texts (whitespace removed)."""
    joined = ["".join(text.split()) for text in texts]
    out = []
    for n in range(1, order + 1):
        index: dict[str, int] = {}
        rows = [Counter(index.setdefault(chars[i:i + n], len(index)) for i in range(len(chars) - n + 1))
                for chars in joined]
        counts = np.zeros((len(texts), len(index)), np.int32)
        for r, row in enumerate(rows):
            if row:
                counts[r, list(row.keys())] = list(row.values())
        out.append(counts)
    return out


def chrf_matrix(hypotheses: Sequence[str], references: Sequence[str] | None = None) -> np.ndarray:
    """float64 ``[len(hypotheses), len(references)]``: sentence chrF (0-100) of each hypothesis
    against each reference, as sacreBLEU's ``sentence_chrf(h, [r]).score`` (default
    references: the hypotheses themselves)."""
    references = hypotheses if references is None else references
    n_hyp = len(hypotheses)
    precision = np.zeros((n_hyp, len(references)))
    recall = np.zeros_like(precision)
    effective = np.zeros(precision.shape, np.int64)  # the orders that both sides have
    for counts in _char_ngram_counts(list(hypotheses) + list(references)):
        h, r = counts[:n_hyp], counts[n_hyp:]
        hyp_total, ref_total = h.sum(-1)[:, None], r.sum(-1)[None, :]
        # [H, R]: the smaller of the two counts, summed; in blocks of hypotheses (an [h, R, G] minimum)
        matches = np.zeros(precision.shape, np.int64)
        for i in range(0, n_hyp, 16):
            matches[i:i + 16] = np.minimum(h[i:i + 16, None, :], r[None, :, :]).sum(-1)
        both = (hyp_total > 0) & (ref_total > 0)
        precision += np.where(both, matches / np.maximum(hyp_total, 1), 0.0)
        recall += np.where(both, matches / np.maximum(ref_total, 1), 0.0)
        effective += both
    precision /= np.maximum(effective, 1)
    recall /= np.maximum(effective, 1)
    factor = BETA ** 2
    denominator = factor * precision + recall
    return 100 * (1 + factor) * precision * recall / np.where(denominator > 0, denominator, 1.0)


#: Utilities by name: ``(hypotheses, references) -> [H, R]`` scores, higher is better.
UTILITIES: dict[str, Callable[[Sequence[str], Sequence[str]], np.ndarray]] = {"chrf": chrf_matrix}


def mbr_choose(candidates: Sequence[str], utility: str = "chrf") -> tuple[int, float]:
    """``(index, expected utility)`` of the MBR choice among one sentence's ``candidates`` (the
    candidates also serving as the pseudo-references; see the module docstring). An empty list
    gives ``(-1, nan)``."""
    if utility not in UTILITIES:
        raise ValueError(f"utility={utility!r}: one of {', '.join(sorted(UTILITIES))}")
    if not candidates:
        return -1, float("nan")
    distinct = list(dict.fromkeys(candidates))  # first appearance order
    if len(distinct) == 1:
        return 0, float(UTILITIES[utility](distinct, distinct)[0, 0])
    weight = Counter(candidates)
    weights = np.array([weight[c] for c in distinct], np.float64) / len(candidates)
    expected = UTILITIES[utility](distinct, distinct) @ weights
    best = int(np.argmax(expected))  # the first of equal maxima: the earliest candidate
    return candidates.index(distinct[best]), float(expected[best])


class MBRTranslator:
    """A translator (``Translator``, ``CT2Translator``) made to write one translation per
    sentence chosen by MBR among the ``n_best`` candidates it gives (samples, with its
    ``sample``; or its n-best lists): ``translate`` returns the chosen translations and, as
    scores, their expected utilities (0-100). Other attributes are the wrapped translator's."""

    def __init__(self, translator, utility: str = "chrf"):
        if utility not in UTILITIES:
            raise ValueError(f"utility={utility!r}: one of {', '.join(sorted(UTILITIES))}")
        if getattr(translator, "n_best", 1) < 2:
            raise ValueError("MBR chooses among several candidates: the translator needs n_best >= 2")
        self.translator = translator
        self.utility = utility

    def __getattr__(self, name):
        return getattr(self.translator, name)

    def translate(self, texts: Sequence[str], progress=None):
        lists, _, stats = self.translator.translate(texts, progress=progress)
        chosen, scores = [], []
        for candidates in lists:
            index, expected = mbr_choose(candidates, self.utility)
            chosen.append(candidates[index] if index >= 0 else "")
            scores.append(expected if index >= 0 else 0.0)
        return chosen, scores, stats
