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
precision and recall averaged over the orders that both sides have), or sentence BLEU as its
``sentence_bleu`` does (13a tokens, exp smoothing, effective order): ``chrf_matrix`` and
``bleu_matrix`` compute all ``N x N`` pairs of a sentence at once from n-gram count vectors,
instead of ``N^2`` calls.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

import numpy as np

__all__ = ["MBRTranslator", "bleu_matrix", "chrf_matrix", "mbr_choose", "UTILITIES"]

CHAR_ORDER = 6
BETA = 2
BLEU_ORDER = 4


def _ngram_counts(sequences: Sequence, order: int) -> list[np.ndarray]:
    """Per order n = 1..order: int ``[len(sequences), G_n]``, each sequence's counts of the G_n
    distinct n-grams of all sequences (a sequence: a string, for character n-grams, or a tuple
    of words)."""
    out = []
    for n in range(1, order + 1):
        index: dict = {}
        rows = [Counter(index.setdefault(seq[i:i + n], len(index)) for i in range(len(seq) - n + 1))
                for seq in sequences]
        counts = np.zeros((len(sequences), len(index)), np.int32)
        for r, row in enumerate(rows):
            if row:
                counts[r, list(row.keys())] = list(row.values())
        out.append(counts)
    return out


def _pair_matches(h: np.ndarray, r: np.ndarray) -> np.ndarray:
    """int ``[H, R]``: for each pair, the smaller of the two counts summed over the n-grams
    (in blocks of 16 hypotheses, to bound the ``[h, R, G]`` minimum)."""
    matches = np.zeros((len(h), len(r)), np.int64)
    for i in range(0, len(h), 16):
        matches[i:i + 16] = np.minimum(h[i:i + 16, None, :], r[None, :, :]).sum(-1)
    return matches


def chrf_matrix(hypotheses: Sequence[str], references: Sequence[str] | None = None) -> np.ndarray:
    """float64 ``[len(hypotheses), len(references)]``: sentence chrF (0-100) of each hypothesis
    against each reference, as sacreBLEU's ``sentence_chrf(h, [r]).score`` (default
    references: the hypotheses themselves)."""
    references = hypotheses if references is None else references
    n_hyp = len(hypotheses)
    precision = np.zeros((n_hyp, len(references)))
    recall = np.zeros_like(precision)
    effective = np.zeros(precision.shape, np.int64)  # the orders that both sides have
    joined = ["".join(text.split()) for text in list(hypotheses) + list(references)]
    for counts in _ngram_counts(joined, CHAR_ORDER):
        h, r = counts[:n_hyp], counts[n_hyp:]
        hyp_total, ref_total = h.sum(-1)[:, None], r.sum(-1)[None, :]
        matches = _pair_matches(h, r)
        both = (hyp_total > 0) & (ref_total > 0)
        precision += np.where(both, matches / np.maximum(hyp_total, 1), 0.0)
        recall += np.where(both, matches / np.maximum(ref_total, 1), 0.0)
        effective += both
    precision /= np.maximum(effective, 1)
    recall /= np.maximum(effective, 1)
    factor = BETA ** 2
    denominator = factor * precision + recall
    return 100 * (1 + factor) * precision * recall / np.where(denominator > 0, denominator, 1.0)


def bleu_matrix(hypotheses: Sequence[str], references: Sequence[str] | None = None) -> np.ndarray:
    """float64 ``[len(hypotheses), len(references)]``: sentence BLEU (0-100) of each hypothesis
    against each reference, as sacreBLEU's ``sentence_bleu(h, [r]).score`` computes it with its
    defaults: 13a tokenization, n-grams up to 4, the orders the hypothesis is long enough for
    (effective order), mteval's "exp" smoothing (the k-th order without a match counts as
    ``1 / (2^k * total)``), the brevity penalty, and 0 when no n-gram matches at all (default
    references: the hypotheses themselves)."""
    from tf_transformer.evaluation.bleu import tokenize_13a

    references = hypotheses if references is None else references
    n_hyp = len(hypotheses)
    words = [tuple(tokenize_13a(text).split()) for text in list(hypotheses) + list(references)]
    hyp_len = np.array([len(w) for w in words[:n_hyp]], np.float64)[:, None]
    ref_len = np.array([len(w) for w in words[n_hyp:]], np.float64)[None, :]
    log_sum = np.zeros((n_hyp, len(references)))
    halvings = np.zeros_like(log_sum)  # zero-match orders so far
    any_match = np.zeros(log_sum.shape, bool)
    for n, counts in enumerate(_ngram_counts(words, BLEU_ORDER), start=1):
        matches = _pair_matches(counts[:n_hyp], counts[n_hyp:])
        total = np.maximum(hyp_len - n + 1, 0)  # [H, 1]: the hypothesis's n-grams
        counted = total > 0  # the orders up to the hypothesis's length
        halvings += counted & (matches == 0)
        precision = np.where(matches > 0, matches / np.maximum(total, 1), 1 / (2 ** halvings * np.maximum(total, 1)))
        log_sum += np.where(counted, np.log(100 * precision), 0.0)
        any_match |= matches > 0
    orders = np.minimum(hyp_len, BLEU_ORDER)
    with np.errstate(divide="ignore"):
        brevity = np.where(hyp_len < ref_len, np.exp(1 - ref_len / np.maximum(hyp_len, 1)), 1.0)
    return np.where(any_match & (hyp_len > 0), brevity * np.exp(log_sum / np.maximum(orders, 1)), 0.0)


#: Utilities by name: ``(hypotheses, references) -> [H, R]`` scores, higher is better.
UTILITIES: dict[str, Callable[[Sequence[str], Sequence[str]], np.ndarray]] = {"chrf": chrf_matrix,
                                                                              "bleu": bleu_matrix}


def _check_utility(utility: str) -> None:
    if utility not in UTILITIES:
        raise ValueError(f"utility={utility!r}: one of {', '.join(sorted(UTILITIES))}")


def mbr_choose(candidates: Sequence[str], utility: str = "chrf") -> tuple[int, float]:
    """``(index, expected utility)`` of the MBR choice among one sentence's ``candidates`` (the
    candidates also serving as the pseudo-references; see the module docstring). An empty list
    gives ``(-1, nan)``."""
    _check_utility(utility)
    if not candidates:
        return -1, float("nan")
    distinct = list(dict.fromkeys(candidates))  # first appearance order; each scored once
    weight = Counter(candidates)
    weights = np.array([weight[c] for c in distinct], np.float64) / len(candidates)
    expected = UTILITIES[utility](distinct, distinct) @ weights
    best = int(np.argmax(expected))  # the first of equal maxima: the earliest candidate
    return candidates.index(distinct[best]), float(expected[best])


class MBRTranslator:
    """A translator (``Translator``, ``CT2Translator``) made to write one translation per
    sentence chosen by MBR among the ``n_best`` candidates it gives (samples, with its
    ``sample``; or its n-best lists): ``translate`` returns the chosen translations and, as
    scores, their expected utilities (0-100). Other attributes are the wrapped translator's
    (``score`` included); ``translate_ids`` is not offered (the utilities compare texts)."""

    def __init__(self, translator, utility: str = "chrf"):
        _check_utility(utility)
        if getattr(translator, "n_best", 1) < 2:
            raise ValueError("MBR chooses among several candidates: the translator needs n_best >= 2")
        self.translator = translator
        self.utility = utility

    def __getattr__(self, name):
        if name in ("translator", "translate_ids"):  # not set yet (copying, unpickling), or not offered
            raise AttributeError(name)
        return getattr(self.translator, name)

    def translate(self, texts: Sequence[str], progress=None):
        lists, _, stats = self.translator.translate(texts, progress=progress)
        chosen, scores = [], []
        for candidates in lists:
            index, expected = mbr_choose(candidates, self.utility)
            chosen.append(candidates[index] if index >= 0 else "")
            scores.append(expected if index >= 0 else 0.0)
        return chosen, scores, stats
