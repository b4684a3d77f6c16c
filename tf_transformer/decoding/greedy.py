"""Batched greedy decoding, and sampling, in TensorFlow ops only (one ``tf.while_loop`` over
fixed-shape search state).

Same ``symbols_to_logits_fn(ids, step, cache) -> (logits, cache)`` contract as
:func:`tf_transformer.decoding.beam_search.beam_search`, without the beam axis: ``ids`` is
``[batch, max_decode_length + 1]`` and cache leaves keep their leading ``batch`` axis (their
other sizes may change from step to step, as in beam search).

**Sampling** (``sample=True``) draws each token from the model's distribution instead of
taking the most probable one, as back-translation does to make varied synthetic sources
(Edunov et al., 2018, "Understanding Back-Translation at Scale"): from the ``top_k`` most
probable tokens only (0: all), and of those from the nucleus of ``top_p`` (the fewest most
probable tokens whose probabilities, renormalised, sum to at least ``top_p``; Holtzman et al.,
2020, "The Curious Case of Neural Text Degeneration"; 1: all), at ``temperature`` (the
log-probabilities divided by it before renormalising, and before ``top_k`` and ``top_p`` pick
the tokens; 1: the model's own distribution). Tokens tied with the nucleus's least probable
one are kept with it. The draw is the Gumbel-max trick on
stateless random numbers seeded by ``seed`` and the step, so the same ``seed`` and the same
batch give the same tokens; the returned score is the model's log-probability of the drawn
tokens (at temperature 1, over the whole vocabulary), as for greedy decoding.
"""

from __future__ import annotations

import tensorflow as tf

from tf_transformer.decoding.beam_search import _call, _drop_rows, _shape_invariants, never_written

__all__ = ["greedy_search"]

_TINY = 1.1754944e-38  # the smallest normal float32: u > 0, so -log(-log(u)) is finite


def greedy_search(
    symbols_to_logits_fn,
    initial_ids,
    initial_cache,
    max_decode_length: int | tf.Tensor = 256,
    eos_id: int = 3,
    max_lengths=None,
    pad_id: int = 0,
    sentence_cache=None,
    drop_finished: bool = False,
    never_ids: tuple = (),
    sample: bool = False,
    top_k: int = 0,
    temperature: float = 1.0,
    seed=(0, 0),
    top_p: float = 1.0,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Pick the most probable token at every step (or draw one: ``sample``) until EOS or the
    maximum length.

    Args:
      symbols_to_logits_fn: ``(ids [batch, L+1], step, cache) -> (logits [batch, V], cache)``
        (with ``sentence_cache``: ``(ids, step, cache, sentence_cache)``).
      initial_ids: int32 ``[batch]`` (BOS).
      initial_cache: nested tensors, leaves ``[batch, ...]``; may be ``{}``.
      max_decode_length: at most this many tokens are generated (int or int32 scalar tensor).
      eos_id: end-of-sentence id.
      max_lengths: optional int32 ``[batch]`` per-sentence limits, clipped to
        ``[1, max_decode_length]``.
      pad_id: written after EOS (and after a sentence reaches its limit).
      sentence_cache: optional nested tensors, leaves ``[batch, ...]``, passed to the function
        as they are (never updated).
      drop_finished: remove finished sentences from the state (ids, cache, sentence_cache)
        once an eighth of the batch has finished, as beam search does (see its module
        docstring); needs dynamic shapes (not under XLA). The results are the same.
      never_ids: ids never picked (padding, the initial id), as in beam search.
      sample: draw each token (see the module docstring) instead of taking the most probable.
      top_k: with ``sample``, draw from the ``top_k`` most probable tokens only (0: from all).
      temperature: with ``sample``, divide the log-probabilities by it before drawing (> 0).
      top_p: with ``sample``, draw from the nucleus of this probability mass (``0 < top_p <= 1``;
        1: from all the ``top_k``).
      seed: with ``sample``, two integers (a shape-``[2]`` int tensor is accepted): the draws
        of step ``i`` use the stateless seed ``(seed[0], seed[1] + i)``.

    Returns:
      ``(ids, scores)``: int32 ``[batch, max_decode_length + 1]`` (initial id in column 0,
      EOS included when produced, ``pad_id`` after), and float32 ``[batch]`` total
      log-probabilities of the generated tokens (no length penalty).
    """
    if sample and not temperature > 0:
        raise ValueError(f"temperature={temperature}: must be > 0")
    if sample and top_k < 0:
        raise ValueError(f"top_k={top_k}: must be >= 0 (0: the whole vocabulary)")
    if sample and not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p}: must be in (0, 1] (1: no nucleus)")
    seed = tf.cast(tf.convert_to_tensor(seed), tf.int64)
    initial_ids = tf.cast(tf.convert_to_tensor(initial_ids), tf.int32)
    static_batch = initial_ids.shape[0]
    batch = static_batch if static_batch is not None else tf.shape(initial_ids)[0]
    L = max_decode_length if isinstance(max_decode_length, int) else tf.cast(max_decode_length, tf.int32)
    if max_lengths is None:
        max_lengths = tf.fill([batch], tf.cast(L, tf.int32))
    max_lengths = tf.clip_by_value(tf.cast(max_lengths, tf.int32), 1, tf.maximum(tf.cast(L, tf.int32), 1))

    ids = tf.concat([initial_ids[:, None], tf.fill([batch, L], tf.constant(pad_id, tf.int32))], axis=1)
    scores = tf.zeros([batch], tf.float32)
    finished = tf.zeros([batch], tf.bool)
    positions = tf.range(tf.shape(ids)[1])
    rows = tf.range(batch)  # each state row's sentence in the input batch
    has_sentence_cache = sentence_cache is not None
    initial_cache = tf.nest.map_structure(tf.convert_to_tensor, initial_cache)
    if has_sentence_cache:
        sentence_cache = tf.nest.map_structure(tf.convert_to_tensor, sentence_cache)
    out_ids, out_scores = tf.identity(ids), tf.identity(scores)  # sentences dropped from the state

    def body(i, ids, scores, finished, cache, rows, max_lengths, sentence_cache, out_ids, out_scores):
        logits, cache = _call(symbols_to_logits_fn, ids, i, cache, sentence_cache if has_sentence_cache else None)
        log_probs = never_written(tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1), never_ids)
        if sample:
            token = _draw(log_probs, top_k, temperature, tf.stack([seed[0], seed[1] + tf.cast(i, tf.int64)]), top_p)
        else:
            token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        token_log_prob = tf.gather(log_probs, token, batch_dims=1)
        token = tf.where(finished, pad_id, token)
        scores = scores + tf.where(finished, 0.0, token_log_prob)
        ids = tf.where(tf.equal(positions, i + 1)[None, :], token[:, None], ids)
        finished = finished | tf.equal(token, eos_id) | (i + 1 >= max_lengths)
        state = (ids, scores, finished, cache, rows, max_lengths, sentence_cache, out_ids, out_scores)
        if drop_finished:
            n_done = tf.reduce_sum(tf.cast(finished, tf.int32))
            n = tf.size(finished)
            worth_it = (n_done >= (n + 7) // 8) & (n_done < n)
            state = tf.cond(worth_it, lambda: _drop_finished(*state), lambda: state)
        return (i + 1,) + tuple(state)

    def _drop_finished(ids, scores, finished, cache, rows, max_lengths, sentence_cache, out_ids, out_scores):
        out_ids, out_scores = _store(finished, rows, ids, scores, out_ids, out_scores)
        keep = tf.cast(tf.where(~finished)[:, 0], tf.int32)
        return _drop_rows(keep, (ids, scores, finished, cache, rows, max_lengths, sentence_cache)) + (out_ids,
                                                                                                     out_scores)

    def cond(i, ids, scores, finished, *rest):
        return (i < L) & ~tf.reduce_all(finished)

    state = (tf.constant(0, tf.int32), ids, scores, finished, initial_cache, rows, max_lengths,
             sentence_cache if has_sentence_cache else {}, out_ids, out_scores)
    state = tf.while_loop(
        cond,
        body,
        state,
        maximum_iterations=L,
        shape_invariants=_shape_invariants(state, relaxed_index=(4, 7),
                                           batch_index=range(1, 8) if drop_finished else ()),
    )
    _, ids, scores, _, _, rows, _, _, out_ids, out_scores = state
    return _store(tf.ones_like(rows, tf.bool), rows, ids, scores, out_ids, out_scores)


def _draw(log_probs, top_k: int, temperature: float, seed, top_p: float = 1.0):
    """One token per row drawn from ``softmax(log_probs / temperature)`` restricted to the
    row's ``top_k`` most probable tokens (0: all) and to the nucleus of ``top_p`` among them
    (1: all): the Gumbel-max trick, ``argmax(x + g)`` with ``g = -log(-log(u))``, ``u``
    uniform in (0, 1) from the stateless ``seed``."""
    scaled = log_probs / temperature
    vocab = log_probs.shape[-1]
    never = tf.constant(float("-inf"), scaled.dtype)
    if top_k and (vocab is None or top_k < vocab):
        kth = tf.math.top_k(scaled, k=top_k).values[:, -1:]
        scaled = tf.where(scaled < kth, never, scaled)
    if top_p < 1:
        scaled = tf.where(scaled < _nucleus_floor(scaled, top_p), never, scaled)
    u = tf.random.stateless_uniform(tf.shape(scaled), seed, minval=_TINY, maxval=1.0)
    return tf.argmax(scaled - tf.math.log(-tf.math.log(u)), axis=-1, output_type=tf.int32)


def _nucleus_floor(scaled, top_p: float):
    """``[batch, 1]``: the least value of each row's nucleus of ``softmax(scaled)`` (the fewest
    largest values whose probabilities sum to at least ``top_p``: a value is in it while the mass
    before it, largest first, is below ``top_p``). Found among the row's :data:`_NUCLEUS_FIRST`
    largest values (a ``top_k``) where they hold that mass; the other rows are sorted whole
    (a sort of a 10k vocabulary costs about ten times that ``top_k``)."""
    log_total = tf.reduce_logsumexp(scaled, axis=-1, keepdims=True)

    def floor(ranked, log_total):  # ranked: a row's largest values, descending
        before = tf.cumsum(tf.exp(ranked - log_total), axis=-1, exclusive=True)
        kept = tf.maximum(tf.reduce_sum(tf.cast(before < top_p, tf.int32), axis=-1), 1)
        return tf.gather(ranked, kept - 1, batch_dims=1)[:, None]

    def sort(rows):
        return tf.sort(rows, axis=-1, direction="DESCENDING")

    vocab = scaled.shape[-1]
    if vocab is None or vocab <= _NUCLEUS_FIRST:
        return floor(sort(scaled), log_total)
    first = tf.math.top_k(scaled, k=_NUCLEUS_FIRST).values
    covered = tf.reduce_sum(tf.exp(first - log_total), axis=-1) >= top_p
    floors = floor(first, log_total)

    def sorted_rows():
        rows = tf.where(~covered)
        return tf.tensor_scatter_nd_update(
            floors, rows, floor(sort(tf.gather_nd(scaled, rows)), tf.gather_nd(log_total, rows)))

    return tf.cond(tf.reduce_all(covered), lambda: floors, sorted_rows)


#: How many of a row's most probable tokens :func:`_nucleus_floor` looks at before it sorts
#: the whole vocabulary.
_NUCLEUS_FIRST = 64


def _store(which, rows, ids, scores, out_ids, out_scores):
    """Write the state rows ``which`` (bool ``[n]``) into the input-order buffers at ``rows``."""
    at = tf.cast(tf.where(which)[:, 0], tf.int32)
    index = tf.gather(rows, at)[:, None]
    return (tf.tensor_scatter_nd_update(out_ids, index, tf.gather(ids, at)),
            tf.tensor_scatter_nd_update(out_scores, index, tf.gather(scores, at)))
