"""What every translator does around its decoder, whatever the engine: clip sources to the
length limit, skip empty ones, decode the rest longest first in batches, put the outputs back
in input order, and count what happened (:class:`TranslationStats`); and the checks of the
decoding settings they take (:func:`check_decode_settings`).

:class:`tf_transformer.decoding.translator.Translator` (our beam search in TensorFlow) and
:class:`tf_transformer.serving.ctranslate2.CT2Translator` (CTranslate2) differ only in the
``decode_batch`` they give :func:`decode_in_batches`. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from tf_transformer.config.schema import STOP_RULES
from tf_transformer.errors import UserError

__all__ = ["Sampling", "TranslationStats", "check_beam_settings", "check_decode_settings", "check_search_kind",
           "decode_in_batches", "score_in_batches", "score_texts", "translate_texts"]

#: ``decode_batch(rows)``: one ``(token_ids, score)`` per row of ``rows`` (non-empty id lists, no
#: BOS/EOS), in order; pad ids (0) in ``token_ids`` are dropped by :func:`decode_in_batches`.
DecodeBatch = Callable[[list[list[int]]], Iterable[tuple[Iterable[int], float]]]


class Sampling(NamedTuple):
    """How a sampling translator draws each token: from the ``top_k`` most probable tokens
    (0: all), of those the ones of probability at least ``epsilon`` (epsilon sampling; 0: all;
    the most probable always), then from the smallest set of those whose probabilities sum to
    at least ``top_p`` (nucleus sampling; 1: all of them), at ``temperature``, seeded by
    ``seed``."""

    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    seed: int = 0
    epsilon: float = 0.0


@dataclasses.dataclass
class TranslationStats:
    sentences: int = 0
    decoded: int = 0  # non-empty sentences that went through the model
    source_tokens: int = 0
    output_tokens: int = 0
    truncated: int = 0
    seconds: float = 0.0
    batches: int = 0


def check_beam_settings(beam_size: int, alpha: float) -> None:
    """Raise :class:`UserError` (a ``ValueError``) for a beam size below 1 or a negative
    ``alpha`` (the beam search's early-stop bound assumes ``alpha >= 0``), naming the argument."""
    if beam_size < 1:
        raise UserError(f"beam_size={beam_size}: must be >= 1")
    if alpha < 0:
        raise UserError(f"alpha={alpha}: must be >= 0")


def check_stop_rule(stop_rule: str) -> None:
    """Raise :class:`UserError` for a beam-search stop rule other than :data:`STOP_RULES`."""
    if stop_rule not in STOP_RULES:
        raise UserError(f"stop_rule={stop_rule!r}: expected one of {', '.join(map(repr, STOP_RULES))}")


def check_decode_settings(beam_size: int, alpha: float, max_extra_length: int, batch_size: int) -> None:
    """Raise :class:`UserError` for decoding settings no search accepts (``beam_size`` and
    ``batch_size`` >= 1, ``alpha`` and ``max_extra_length`` >= 0), naming the argument."""
    check_beam_settings(beam_size, alpha)
    if max_extra_length < 0:
        raise UserError(f"max_extra_length={max_extra_length}: must be >= 0")
    if batch_size < 1:
        raise UserError(f"batch_size={batch_size}: must be >= 1")


#: The lowest sampling temperature taken (dividing log-probabilities by much less overflows float32).
MIN_TEMPERATURE = 1e-6


def check_search_kind(beam_size: int, n_best: int, sample: bool, top_k: int = 0, temperature: float = 1.0,
                      seed: int = 0, top_p: float = 1.0, epsilon: float = 0.0) -> Sampling | None:
    """A translator's ``n_best`` and sampling arguments checked (a :class:`UserError` naming them
    otherwise): an n-best list needs as many beams (with ``sample``, ``n_best`` is the number
    of samples per sentence, any >= 1); sampling draws one token at a time (``beam_size=1``),
    at ``temperature >= MIN_TEMPERATURE``, from ``top_k >= 0`` tokens, ``0 <= epsilon < 1`` and a nucleus
    ``0 < top_p <= 1``. Returns the :class:`Sampling` (``None`` without ``sample``)."""
    if sample and n_best < 1:
        raise UserError(f"n_best={n_best}: the number of samples per sentence must be >= 1")
    if not sample and not 1 <= n_best <= beam_size:
        raise UserError(f"n_best={n_best}: must be between 1 and beam_size={beam_size} (an n-best list needs "
                        "beam search with at least that many beams)")
    if not sample:
        return None
    if beam_size != 1:
        raise UserError(f"sample=True draws one token at a time: it needs beam_size=1, not {beam_size}")
    if not (temperature > 0 and top_k >= 0):
        raise UserError(f"temperature={temperature}, top_k={top_k}: sampling needs temperature > 0 and "
                        "top_k >= 0 (0: the whole vocabulary)")
    if temperature < MIN_TEMPERATURE:
        raise UserError(f"temperature={temperature:g}: below {MIN_TEMPERATURE:g} a draw is the most probable token "
                        "(greedy search: leave out sample), and far below it the scaled log-probabilities "
                        "overflow float32")
    if not 0 < top_p <= 1:
        raise UserError(f"top_p={top_p}: sampling needs 0 < top_p <= 1 (the probability mass of the nucleus "
                        "drawn from; 1: every token)")
    if not 0 <= epsilon < 1:
        raise UserError(f"epsilon={epsilon}: sampling needs 0 <= epsilon < 1 (the least probability of a token "
                        "drawn from; 0: every token)")
    return Sampling(int(top_k), float(top_p), float(temperature), int(seed), float(epsilon))


def decode_in_batches(sources: Sequence[Sequence[int]], limit: int, batch_size: int, decode_batch: DecodeBatch,
                      progress: Callable[[int], None] | None = None, stats: TranslationStats | None = None,
                      workers: int = 1, n_best: int = 1) -> tuple[list, list, TranslationStats]:
    """Decode subword-id ``sources`` (no BOS/EOS) with ``decode_batch``; returns ``(outputs,
    scores, stats)`` in input order.

    A source longer than ``limit`` is cut to its first ``limit`` ids (``stats.truncated``); an
    empty one gives ``[]`` with score 0 and is not decoded. The rest go to ``decode_batch`` in
    batches of up to ``batch_size``, longest first (a batch that does not fit in memory fails
    at once, not at the end). ``progress(n)`` is called with the number of empty sources, then
    once per batch with its size. ``workers > 1`` decodes that many batches at once, each from
    its own thread (for a ``decode_batch`` that releases the GIL); the results are collected
    in batch order, so they do not depend on ``workers``. ``stats``: the object to fill
    (e.g. a subclass with fields of the engine's own); default a new :class:`TranslationStats`.

    ``n_best > 1``: ``decode_batch`` gives each row ``(ids [n, length], scores [n])``, best
    first; each output is then a list of hypotheses and each score a list, without the slots
    the search left empty (score ``-inf``); an empty source gives ``[[]]`` and ``[0.0]``.
    ``stats.output_tokens`` counts the best hypotheses.
    """
    stats = TranslationStats() if stats is None else stats
    stats.sentences = len(sources)
    start = time.time()
    clipped = []
    for ids in sources:
        if len(ids) > limit:
            stats.truncated += 1
            ids = ids[:limit]
        clipped.append(list(ids))
    outputs: list = [[] for _ in clipped] if n_best == 1 else [[[]] for _ in clipped]
    scores: list = [0.0] * len(clipped) if n_best == 1 else [[0.0] for _ in clipped]
    todo = [i for i, ids in enumerate(clipped) if ids]
    skipped = len(clipped) - len(todo)
    if progress and skipped:
        progress(skipped)
    todo.sort(key=lambda i: -len(clipped[i]))
    batches = [todo[b: b + batch_size] for b in range(0, len(todo), batch_size)]

    def decode(idx):
        return idx, list(decode_batch([clipped[i] for i in idx]))

    pool = None
    if workers > 1 and len(batches) > 1:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(min(workers, len(batches)))
    try:
        for idx, rows in (pool.map(decode, batches) if pool else map(decode, batches)):
            for i, (ids, score) in zip(idx, rows):
                if n_best == 1:
                    outputs[i], scores[i] = _tokens(ids), float(score)
                else:
                    kept = [(_tokens(h), float(sc)) for h, sc in zip(ids, score) if sc != float("-inf")]
                    outputs[i], scores[i] = [h for h, _ in kept], [sc for _, sc in kept]
                out = outputs[i] if n_best == 1 else outputs[i][0]
                stats.output_tokens += len(out)
                stats.source_tokens += len(clipped[i])
            stats.batches += 1
            stats.decoded += len(idx)
            if progress:
                progress(len(idx))
    finally:
        if pool:
            pool.shutdown(cancel_futures=True)
    stats.seconds = time.time() - start
    return outputs, scores, stats


def _tokens(ids) -> list[int]:
    return [int(t) for t in ids if t != 0]


def translate_texts(texts: Sequence[str], tokenizer, translate_ids, progress: Callable[[int], None] | None = None,
                    n_best: int = 1):
    """Translate detokenized ``texts`` with ``translate_ids(sources, progress=...)`` (a
    translator's) and ``tokenizer``'s ``encode``/``decode``; returns ``(translations, scores,
    stats)``. Empty or whitespace-only texts are not encoded and give ``""``; a translation has
    no CR or LF (each becomes a space), so one input line gives one output line. ``n_best > 1``:
    ``translate_ids`` gives n-best lists (:func:`decode_in_batches`), and so does this: each
    translation a list of strings, best first, each score a list."""
    texts = list(texts)
    nonempty = [i for i, t in enumerate(texts) if t.strip()]
    encoded = tokenizer.encode([texts[i] for i in nonempty]) if nonempty else []
    sources: list[list[int]] = [[] for _ in texts]
    for i, ids in zip(nonempty, encoded):
        sources[i] = ids
    outputs, scores, stats = translate_ids(sources, progress=progress)
    if n_best > 1:  # decoded as one flat list, then regrouped per sentence
        flat = [hyp for hyps in outputs for hyp in hyps]
        texts_flat = iter(_one_line(t) for t in (tokenizer.decode(flat) if flat else []))
        grouped = [[next(texts_flat) for _ in hyps] for hyps in outputs]
        return [g if sources[i] else [""] for i, g in enumerate(grouped)], scores, stats
    decoded = tokenizer.decode(outputs) if outputs else []
    result = [_one_line(text) if sources[i] else "" for i, text in enumerate(decoded)]
    return result, scores, stats


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


def score_texts(sources: Sequence[str], targets: Sequence[str], tokenizer, score_ids,
                progress: Callable[[int], None] | None = None):
    """The pairs of texts encoded with ``tokenizer`` and scored by ``score_ids(sources, targets,
    progress=...)`` (a translator's); an empty or whitespace-only source is not encoded (it
    scores ``nan``, see :func:`score_in_batches`)."""
    if isinstance(sources, str) or isinstance(targets, str):
        raise UserError("score takes two lists of strings (sources, targets)")
    sources, targets = list(sources), list(targets)
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources but {len(targets)} targets: they must be parallel")
    todo = [i for i, text in enumerate(sources) if text.strip()]
    src: list[list[int]] = [[] for _ in sources]
    tgt: list[list[int]] = [[] for _ in sources]
    if todo:
        for i, s_ids, t_ids in zip(todo, tokenizer.encode([sources[i] for i in todo]),
                                   tokenizer.encode([targets[i] for i in todo])):
            src[i], tgt[i] = s_ids, t_ids
    return score_ids(src, tgt, progress=progress)


def score_in_batches(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], limit: int,
                     batch_size: int, score_batch, progress: Callable[[int], None] | None = None
                     ) -> tuple[list[float], list[int], TranslationStats]:
    """``(log_probs, tokens, stats)`` of given translations, in input order, from
    ``score_batch(source_rows, target_rows) -> [(log P, tokens), ...]`` (ids without BOS/EOS;
    the log-probability of the target's tokens and EOS given the source, and their number).

    An empty source gives ``nan`` and 0 tokens and is not scored. A source longer than
    ``limit`` is cut to it, as in translation, and so is a target (to ``limit - 1`` tokens
    before EOS); both counted in ``stats.truncated``. Batches of ``batch_size`` pairs,
    longest first; ``progress`` as in :func:`decode_in_batches`."""
    if len(sources) != len(targets):
        raise UserError(f"{len(sources)} sources but {len(targets)} targets: they must be parallel")
    stats = TranslationStats(sentences=len(sources))
    start = time.time()
    todo = [i for i, ids in enumerate(sources) if len(ids)]
    src = {i: [int(t) for t in sources[i][:limit]] for i in todo}
    tgt = {i: [int(t) for t in targets[i][: limit - 1]] for i in todo}
    stats.truncated = sum(len(sources[i]) > limit or len(targets[i]) > limit - 1 for i in todo)
    log_probs, tokens = [float("nan")] * len(sources), [0] * len(sources)
    if progress and len(todo) < len(sources):
        progress(len(sources) - len(todo))
    todo.sort(key=lambda i: (-max(len(src[i]), len(tgt[i]) + 1), i))
    for b in range(0, len(todo), batch_size):
        idx = todo[b: b + batch_size]
        for i, (lp, n) in zip(idx, score_batch([src[i] for i in idx], [tgt[i] for i in idx])):
            log_probs[i], tokens[i] = float(lp), int(n)
            stats.source_tokens += len(src[i])
            stats.output_tokens += int(n)
        stats.batches += 1
        stats.decoded += len(idx)
        if progress:
            progress(len(idx))
    stats.seconds = time.time() - start
    return log_probs, tokens, stats
