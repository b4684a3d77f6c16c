"""Batched beam search with the GNMT length penalty, written in TensorFlow ops only.

The search is a function of a ``symbols_to_logits_fn`` and knows nothing about the model
(the design of TF Model Garden's ``ops/beam_search.py``; this is our own implementation):

``symbols_to_logits_fn(ids, step, cache) -> (logits, new_cache)``
    ``ids``: int32 ``[batch * beam, max_decode_length + 1]``, the whole preallocated id
    buffer of every hypothesis; column 0 holds the initial id (BOS) and columns
    ``1..step`` the tokens chosen so far. The function reads ``ids[:, step]`` (the decoder
    input at position ``step``; earlier columns are there for decoders without a cache).
    ``step``: int32 scalar tensor, 0-based.
    ``cache``: the nested structure given as ``initial_cache`` with every leaf tiled from
    ``[batch, ...]`` to ``[batch * beam, ...]`` (beam-major within each sentence).
    Returns ``logits`` ``[batch * beam, vocab_size]`` for the token at position
    ``step + 1`` and the updated cache: the same structure, with the same leading
    ``batch * beam`` axis; the other sizes may change from step to step (a key/value cache
    that grows by one position per step does), except under XLA, which needs fixed shapes.

The search (section 4 of the paper, with Wu et al. 2016's length penalty):

* scores of finished hypotheses are ``log P(Y|X) / lp(|Y|)`` with
  ``lp(n) = ((5 + n) / 6) ** alpha``; ``|Y|`` counts the generated tokens including EOS
  (not the initial BOS);
* every step expands each live hypothesis by every token and keeps the ``2 * beam``
  best candidates by log-probability. Candidates that end in EOS and rank in the first
  ``beam`` of them move to a separate set of finished hypotheses (the best ``beam`` by
  score are kept); the best ``beam`` candidates that do not end in EOS stay alive. Only
  EOS candidates within the first ``beam`` are finalised (as fairseq does): this makes
  ``beam_size=1, alpha=0`` exactly greedy decoding;
* a sentence stops when it reaches its maximum length or, with ``stop_early``, when its
  finished set is full and the best score any live hypothesis could still reach,
  ``best live log-prob / lp(max length)``, is below the worst score in it. Log-probabilities
  only fall as a hypothesis grows and ``lp`` only rises (``alpha >= 0``), so that bound is
  safe: no live hypothesis can enter the finished set any more, and in particular none can
  beat the best. The loop ends when every sentence has stopped. A caller that needs only
  the first ``n_best`` hypotheses (``translate_batch`` takes the best one, or an n-best
  list) waits for ``n_best`` finished ones and compares the bound with the ``n_best``-th
  score instead, and stops sooner: with ``n_best=1``, as soon as nothing live can beat the
  best finished hypothesis, which is then final;
* ``stop_rule="beam_finished"`` adds the rule of fairseq, OpenNMT and CTranslate2: a
  sentence also stops as soon as ``beam`` hypotheses have finished, whatever the live ones
  could still score. That search is not exact under the length penalty: with a large
  ``alpha`` the exact search can prefer a much longer hypothesis that ends later, often
  a loop that is cheap per token ("unglückliche unglückliche ..."), which the
  first ``beam`` endings rule out. It also runs fewer steps. The bound above still
  applies, so the best hypothesis equals that of stopping at the ``beam``-th ending alone;
* **the length limit** (the rule of tensor2tensor and TF Model Garden): a hypothesis cut
  at the limit without EOS never competes with finished ones. Only a sentence that has
  no finished hypothesis at all when it reaches its limit returns its best live
  hypotheses, cut as they are (scored ``log P / lp(limit)``). Letting cut hypotheses
  compete on equal terms favours run-ons: they never pay for EOS, so a degenerate loop
  ("sehr sehr sehr ...") that is cheap per token can outscore every real ending.

Everything runs in one ``tf.while_loop``, so the function can be wrapped in
``tf.function`` (``jit_compile=True`` works when ``max_decode_length`` is a Python int or
the input shapes are static, the cache keeps its shapes and ``drop_finished`` is off).

**Sentence-level state and finished sentences.** What is the same for every hypothesis of
a sentence (the encoder's keys/values, the source mask) can be passed as
``sentence_cache``: it is repeated ``beam_size`` times once, never reordered, and handed
to ``symbols_to_logits_fn(ids, step, cache, sentence_cache)`` as a fourth argument. With
``drop_finished=True`` the search removes stopped sentences from every tensor of its state
(the cache and ``sentence_cache`` included) once at least an eighth of the batch has
stopped, so later steps compute only the sentences still running, as CTranslate2 does.
The function must then take every batch-sized tensor from its arguments (nothing
captured); the results are the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tf_transformer.decoding.batches import check_beam_settings, check_stop_rule

__all__ = ["beam_search", "length_penalty"]

SymbolsToLogitsFn = Callable[[tf.Tensor, tf.Tensor, Any], tuple[tf.Tensor, Any]]

_NEG_INF = float("-inf")


def length_penalty(length, alpha) -> tf.Tensor:
    """GNMT length penalty ``((5 + length) / 6) ** alpha`` (float32)."""
    length = tf.cast(length, tf.float32)
    return tf.pow((5.0 + length) / 6.0, tf.cast(alpha, tf.float32))


def _dims(t: tf.Tensor, start: int = 0) -> list:
    """Shape from axis ``start`` on, as a list: Python ints where static, scalar tensors where
    not. Only the unknown axes asked for become graph ops (every ``tf.shape(t)[i]`` adds a
    strided slice and its constants to the traced graph, and tracing is part of every
    ``tft translate`` process's fixed cost)."""
    static = t.shape.as_list()
    if all(s is not None for s in static[start:]):
        return static[start:]
    dynamic = tf.shape(t)
    return [s if s is not None else dynamic[i] for i, s in enumerate(static) if i >= start]


def _tile_beam(t: tf.Tensor, beam_size: int) -> tf.Tensor:
    """``[batch, ...]`` -> ``[batch, beam, ...]`` (copies)."""
    t = tf.expand_dims(t, 1)
    multiples = [1, beam_size] + [1] * (t.shape.rank - 2)
    return tf.tile(t, multiples)


def _merge_beam(t: tf.Tensor) -> tf.Tensor:
    """``[batch, beam, ...]`` -> ``[batch * beam, ...]``."""
    return tf.reshape(t, [-1] + _dims(t, 2))


def _split_beam(t: tf.Tensor, beam_size: int) -> tf.Tensor:
    """``[batch * beam, ...]`` -> ``[batch, beam, ...]``."""
    return tf.reshape(t, [-1, beam_size] + _dims(t, 1))


def _shape_invariants(state, relaxed_index, batch_index=()):
    """Shapes of the loop state for ``tf.while_loop``: only the rank for the entries in
    ``relaxed_index`` (the model's cache, which may grow; see the module docstring), an
    unknown first axis for those in ``batch_index`` (the batch shrinks when finished
    sentences are dropped), exact for the rest."""
    relaxed_index = {relaxed_index} if isinstance(relaxed_index, int) else set(relaxed_index)

    def shape(i, t):
        if i in relaxed_index:
            return tf.TensorShape([None] * t.shape.rank)
        if i in batch_index:
            return tf.TensorShape([None] + t.shape.as_list()[1:])
        return t.shape

    return tuple(tf.nest.map_structure(lambda t, i=i: shape(i, t), v) for i, v in enumerate(state))


def _drop_rows(keep_rows, structure, per_row: int = 1):
    """Rows ``keep_rows`` (int32 ``[n]``) of every leaf of ``structure``; with ``per_row=K``
    the leaves are ``[rows * K, ...]`` and each row's ``K`` consecutive entries are kept."""
    if per_row > 1:
        keep_rows = tf.reshape(keep_rows[:, None] * per_row + tf.range(per_row)[None, :], [-1])
    return tf.nest.map_structure(lambda t: tf.gather(t, keep_rows), structure)


def _chunk_size(vocab_size: int) -> int | None:
    """The chunk length :func:`_top_candidates` splits each hypothesis's ``vocab_size``
    candidates into: the divisor of ``vocab_size`` nearest ``sqrt(vocab_size / 2)`` (which
    makes its two ``top_k`` calls about equally long), at least 4 and leaving at least two
    chunks per hypothesis; ``None`` (one ``top_k`` over everything) where there is none."""
    target = (vocab_size / 2) ** 0.5
    divisors = [c for c in range(4, vocab_size // 2 + 1) if vocab_size % c == 0]
    return min(divisors, key=lambda c: (abs(c - target), c)) if divisors else None


def _top_candidates(alive_log_probs, log_probs, k: int, chunk: int | None):
    """``tf.math.top_k`` of the ``[batch, beam * vocab]`` candidate log-probabilities
    ``alive_log_probs[:, :, None] + log_probs``, exactly: the same values and indices, ties
    going to the lower index as ``top_k`` breaks them, without sorting ``beam * vocab``
    numbers per sentence.

    ``log_probs`` ``[batch, beam, vocab]`` is cut into chunks of ``chunk`` tokens. Adding a
    beam's log-probability keeps the order of its candidates (rounding is monotone), so a
    chunk's best candidate is ``alive + max(chunk)``; the ``k`` best chunks by that (ties to
    the lower chunk) hold the ``k`` best candidates: a candidate outside them is preceded,
    in ``top_k``'s order, by the ``k`` chunks' maxima. The chunks, put back in index order,
    go through one ``top_k`` of ``k * chunk`` candidates, computed as the plain sum is.
    ``chunk=None`` is the plain ``top_k`` over all of them.
    """
    K, V = log_probs.shape[1], log_probs.shape[2]
    if chunk is None:
        return tf.math.top_k(tf.reshape(alive_log_probs[:, :, None] + log_probs, [-1, K * V]), k=k)
    n = V // chunk  # chunks per hypothesis
    chunks = tf.reshape(log_probs, [-1, K * n, chunk])
    offsets = tf.repeat(alive_log_probs, n, axis=1)  # [batch, K * n]: each chunk's beam log-prob
    _, best_chunks = tf.math.top_k(offsets + tf.reduce_max(chunks, axis=2), k=k)
    best_chunks = tf.sort(best_chunks, axis=1)  # index order, so that ties keep top_k's order
    picked = tf.gather(offsets, best_chunks, batch_dims=1)[:, :, None] + tf.gather(chunks, best_chunks, batch_dims=1)
    values, at = tf.math.top_k(tf.reshape(picked, [-1, k * chunk]), k=k)
    return values, tf.gather(best_chunks, at // chunk, batch_dims=1) * chunk + at % chunk


def _call(fn, ids, step, cache, sentence_cache):
    if sentence_cache is None:
        return fn(ids, step, cache)
    return fn(ids, step, cache, sentence_cache)


def never_written(log_probs, never_ids):
    """``log_probs`` ``[..., V]`` with the entries of ``never_ids`` set to ``-inf`` (a search never
    picks them; the other entries are unchanged, not renormalised)."""
    if not never_ids:
        return log_probs
    ids = tf.range(tf.shape(log_probs)[-1])
    banned = tf.reduce_any(tf.equal(ids[:, None], tf.constant(list(never_ids), tf.int32)[None, :]), axis=1)
    return tf.where(banned, tf.constant(_NEG_INF, log_probs.dtype), log_probs)


def step_log_probs(logits, never_ids, normalized: bool = False):
    """A step's float32 log-probabilities from the function's output ``[..., V]``: its
    log-softmax, or the values themselves when ``normalized`` (the function already returns
    log-probabilities, as an ensemble's mixture does: a second log-softmax would only cost a
    pass over ``[rows, V]``), with ``never_ids`` set to ``-inf``."""
    values = tf.cast(logits, tf.float32)
    return never_written(values if normalized else tf.nn.log_softmax(values, axis=-1), never_ids)


def beam_search(
    symbols_to_logits_fn: SymbolsToLogitsFn,
    initial_ids,
    initial_cache,
    vocab_size: int,
    beam_size: int,
    alpha: float = 0.6,
    max_decode_length: int | tf.Tensor = 256,
    eos_id: int = 3,
    max_lengths=None,
    stop_early: bool = True,
    pad_id: int = 0,
    n_best: int | None = None,
    sentence_cache=None,
    drop_finished: bool = False,
    stop_rule: str = "bound",
    never_ids: tuple = (),
    normalized: bool = False,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Beam search over ``symbols_to_logits_fn`` (see the module docstring for its contract).

    Args:
      symbols_to_logits_fn: ``(ids, step, cache) -> (logits [batch*beam, V], cache)``, or
        ``(ids, step, cache, sentence_cache) -> ...`` when ``sentence_cache`` is given.
      initial_ids: int32 ``[batch]``, the first decoder input (BOS).
      initial_cache: nested structure of tensors, every leaf ``[batch, ...]``; may be ``{}``.
      vocab_size: ``V``, the size of the logits' last axis (Python int, >= 2).
      beam_size: hypotheses kept per sentence (Python int, >= 1).
      alpha: length-penalty exponent (>= 0); 0 disables the penalty.
      max_decode_length: size of the id buffer: at most this many tokens are generated
        (Python int for static shapes, or an int32 scalar tensor).
      eos_id: the end-of-sentence id.
      max_lengths: optional int32 ``[batch]``, per-sentence maximum number of generated
        tokens (e.g. source length + 50), clipped to ``[1, max_decode_length]``. A
        hypothesis that reaches it without EOS is returned only when the sentence has no
        finished hypothesis (see the module docstring).
      stop_early: stop a sentence as soon as no live hypothesis can reach a score above
        the worst finished one (exact; switch off only to test that claim).
      n_best: with ``stop_early``, how many of the returned hypotheses must be exact
        (default ``beam_size``: all); the search stops as soon as ``n_best`` hypotheses
        have finished and no live one can enter among them. Slots from ``n_best`` on are
        then only the best found so far. ``n_best=1`` returns the same best hypothesis, with
        the same score, in fewer steps.
      pad_id: the id written after EOS.
      sentence_cache: optional nested tensors, leaves ``[batch, ...]``, the same for every
        hypothesis of a sentence: passed to the function repeated ``beam_size`` times
        (``[batch * beam, ...]``, beam-major), never reordered.
      drop_finished: remove stopped sentences from the state as the search goes (see the
        module docstring); needs dynamic shapes (not under XLA).
      stop_rule: ``"bound"`` (exact: a sentence runs until no live hypothesis can beat its
        finished ones, or its limit) or ``"beam_finished"`` (also stop a sentence once
        ``beam_size`` hypotheses have finished; see the module docstring).
      never_ids: ids the search never writes (padding, the initial id): their log-probability
        is set to ``-inf`` after the softmax, so every other token's score is unchanged.
      normalized: the function returns log-probabilities (each row's ``exp`` sums to 1, as
        :class:`tf_transformer.decoding.Ensemble`'s do), not logits: they are used as they are,
        without a log-softmax.

    Returns:
      ``(ids, scores)``: ``ids`` int32 ``[batch, beam, max_decode_length + 1]`` with the
      initial id in column 0, the generated tokens (EOS included when produced) and
      ``pad_id`` after them; ``scores`` float32 ``[batch, beam]``, length-normalised
      log-probabilities, best first. Slot 0 is the result. Early stopping can end a
      sentence before ``beam`` hypotheses were finalised (past ``n_best``, or at the length
      limit): the empty slots come last with score ``-inf``.
    """
    check_beam_settings(beam_size, alpha)
    check_stop_rule(stop_rule)
    if vocab_size < 2:
        raise ValueError(f"vocab_size={vocab_size} must be >= 2")
    K = int(beam_size)
    V = int(vocab_size)
    n_best = K if n_best is None else int(n_best)
    if not 1 <= n_best <= K:
        raise ValueError(f"n_best={n_best} must be between 1 and beam_size={K}")
    initial_ids = tf.cast(tf.convert_to_tensor(initial_ids), tf.int32)
    batch = _dims(initial_ids)[0]
    if isinstance(max_decode_length, int):
        L = max_decode_length
    else:
        L = tf.cast(max_decode_length, tf.int32)
    if max_lengths is None:
        max_lengths = tf.fill([batch], tf.cast(L, tf.int32))
    max_lengths = tf.clip_by_value(tf.cast(max_lengths, tf.int32), 1, tf.maximum(tf.cast(L, tf.int32), 1))

    # ---- state ---------------------------------------------------------------------
    first = tf.tile(tf.reshape(initial_ids, [-1, 1, 1]), [1, K, 1])
    alive_seq = tf.concat([first, tf.fill([batch, K, L], tf.constant(pad_id, tf.int32))], axis=2)
    # All beams start identical; only beam 0 may expand at step 0.
    alive_log_probs = tf.tile(
        tf.constant([[0.0] + [_NEG_INF] * (K - 1)], tf.float32), [batch, 1]
    )
    alive_cache = tf.nest.map_structure(lambda t: _tile_beam(t, K), initial_cache)
    finished_seq = tf.identity(alive_seq)
    finished_scores = tf.fill([batch, K], _NEG_INF)
    finished_flags = tf.zeros([batch, K], tf.bool)
    done = tf.zeros([batch], tf.bool)
    if sentence_cache is not None:
        sentence_cache = tf.nest.map_structure(lambda t: tf.repeat(tf.convert_to_tensor(t), K, axis=0),
                                               sentence_cache)

    max_lp = length_penalty(max_lengths, alpha)  # [batch], for the early-stop bound
    positions = tf.range(tf.shape(alive_seq)[2])
    first_k = tf.range(2 * K) < K  # [2K]: candidate ranks that may be finalised
    rows = tf.range(batch)  # each state row's sentence in the input batch
    # Results of the sentences dropped from the state (drop_finished), in input order.
    out_seq, out_scores, out_flags = tf.identity(alive_seq), tf.identity(alive_log_probs), finished_flags

    has_sentence_cache = sentence_cache is not None
    chunk = _chunk_size(V)

    def body(i, alive_seq, alive_log_probs, alive_cache, finished_seq, finished_scores, finished_flags, done,
             rows, max_lengths, max_lp, sentence_cache, out_seq, out_scores, out_flags):
        flat_ids = _merge_beam(alive_seq)
        flat_cache = tf.nest.map_structure(_merge_beam, alive_cache)
        logits, new_flat_cache = _call(symbols_to_logits_fn, flat_ids, i, flat_cache,
                                       sentence_cache if has_sentence_cache else None)
        log_probs = tf.reshape(step_log_probs(logits, never_ids, normalized), [-1, K, V])

        # Expand every live hypothesis by every token; keep the 2K best by log-prob.
        topk_log_probs, topk_index = _top_candidates(alive_log_probs, log_probs, 2 * K, chunk)
        origin = topk_index // V  # [batch, 2K] beam each candidate extends
        token = topk_index % V
        topk_seq = tf.gather(alive_seq, origin, batch_dims=1)
        at_step = tf.equal(positions, i + 1)[None, None, :]
        topk_seq = tf.where(at_step, token[:, :, None], topk_seq)

        length = i + 1
        is_eos = tf.equal(token, eos_id)
        reached = (length >= max_lengths)[:, None]
        valid = topk_log_probs > _NEG_INF
        finalise = first_k[None, :] & is_eos & valid & ~done[:, None]

        # Live set: the K best candidates that did not end in EOS (there are >= K).
        alive_candidates = tf.where(is_eos, _NEG_INF, topk_log_probs)
        new_alive_log_probs, alive_index = tf.math.top_k(alive_candidates, k=K)
        new_alive_seq = tf.gather(topk_seq, alive_index, batch_dims=1)
        alive_origin = tf.gather(origin, alive_index, batch_dims=1)
        new_alive_cache = tf.nest.map_structure(
            lambda t: tf.gather(_split_beam(t, K), alive_origin, batch_dims=1), new_flat_cache
        )

        # Finished set: merge the finalised candidates, keep the K best by score.
        candidate_scores = tf.where(finalise, topk_log_probs / length_penalty(length, alpha), _NEG_INF)
        all_seq = tf.concat([finished_seq, topk_seq], axis=1)
        all_scores = tf.concat([finished_scores, candidate_scores], axis=1)
        all_flags = tf.concat([finished_flags, finalise], axis=1)
        new_finished_scores, finished_index = tf.math.top_k(all_scores, k=K)
        new_finished_seq = tf.gather(all_seq, finished_index, batch_dims=1)
        new_finished_flags = tf.gather(all_flags, finished_index, batch_dims=1)
        # Keep stopped sentences exactly as they were (top_k of ties could reorder them).
        keep = done[:, None]
        new_finished_scores = tf.where(keep, finished_scores, new_finished_scores)
        new_finished_flags = tf.where(keep, finished_flags, new_finished_flags)
        new_finished_seq = tf.where(keep[:, :, None], finished_seq, new_finished_seq)
        # At the length limit, a sentence without any finished hypothesis returns its best
        # live ones as they are (cut); one that has finished hypotheses keeps only those.
        fallback = reached[:, 0] & ~done & ~tf.reduce_any(new_finished_flags, axis=1)
        cut_valid = new_alive_log_probs > _NEG_INF
        cut_scores = tf.where(cut_valid, new_alive_log_probs / length_penalty(length, alpha), _NEG_INF)
        new_finished_seq = tf.where(fallback[:, None, None], new_alive_seq, new_finished_seq)
        new_finished_scores = tf.where(fallback[:, None], cut_scores, new_finished_scores)
        new_finished_flags = tf.where(fallback[:, None], cut_valid, new_finished_flags)

        # Which sentences stop now.
        new_done = done | reached[:, 0]
        if stop_early:
            best_possible = tf.reduce_max(new_alive_log_probs, axis=1) / max_lp
            # the finished set is sorted best first: the bar is its n_best-th entry; while that
            # slot is empty, any live hypothesis can still fill it
            bar = tf.where(new_finished_flags[:, n_best - 1], new_finished_scores[:, n_best - 1], _NEG_INF)
            hopeless = (best_possible < bar) | tf.equal(best_possible, _NEG_INF)  # or nothing is live
            new_done = new_done | hopeless
        if stop_rule == "beam_finished":
            new_done = new_done | tf.reduce_all(new_finished_flags, axis=1)
        new_alive_log_probs = tf.where(new_done[:, None], _NEG_INF, new_alive_log_probs)
        state = (new_alive_seq, new_alive_log_probs, new_alive_cache, new_finished_seq, new_finished_scores,
                 new_finished_flags, new_done, rows, max_lengths, max_lp, sentence_cache,
                 out_seq, out_scores, out_flags)
        if drop_finished:
            n_done = tf.reduce_sum(tf.cast(new_done, tf.int32))
            n = tf.size(new_done)
            worth_it = (n_done >= (n + 7) // 8) & (n_done < n)  # an eighth of the rows idle, some still running
            state = tf.cond(worth_it, lambda: _drop_stopped(*state), lambda: state)
        return (i + 1,) + tuple(state)

    def _drop_stopped(alive_seq, alive_log_probs, alive_cache, finished_seq, finished_scores, finished_flags, done,
                      rows, max_lengths, max_lp, sentence_cache, out_seq, out_scores, out_flags):
        out_seq, out_scores, out_flags = _store(done, rows, finished_seq, finished_scores, finished_flags,
                                                alive_seq, alive_log_probs, out_seq, out_scores, out_flags)
        keep = tf.cast(tf.where(~done)[:, 0], tf.int32)
        (alive_seq, alive_log_probs, alive_cache, finished_seq, finished_scores, finished_flags, done, rows,
         max_lengths, max_lp) = _drop_rows(keep, (alive_seq, alive_log_probs, alive_cache, finished_seq,
                                                  finished_scores, finished_flags, done, rows, max_lengths, max_lp))
        sentence_cache = _drop_rows(keep, sentence_cache, per_row=K)
        return (alive_seq, alive_log_probs, alive_cache, finished_seq, finished_scores, finished_flags, done,
                rows, max_lengths, max_lp, sentence_cache, out_seq, out_scores, out_flags)

    def cond(i, alive_seq, alive_log_probs, alive_cache, finished_seq, finished_scores, finished_flags, done,
             *rest):
        return (i < L) & ~tf.reduce_all(done)

    state = (tf.constant(0, tf.int32), alive_seq, alive_log_probs, alive_cache, finished_seq, finished_scores,
             finished_flags, done, rows, max_lengths, max_lp, sentence_cache, out_seq, out_scores, out_flags)
    if sentence_cache is None:  # tf.while_loop takes no None in its state
        state = state[:11] + ({},) + state[12:]
    batch_index = range(1, 12) if drop_finished else ()
    state = tf.while_loop(cond, body, state, maximum_iterations=L,
                          shape_invariants=_shape_invariants(state, relaxed_index=(3, 11), batch_index=batch_index))
    (_, alive_seq, alive_log_probs, _, finished_seq, finished_scores, finished_flags, _, rows, _, _, _,
     out_seq, out_scores, out_flags) = state
    everyone = tf.ones_like(rows, tf.bool)
    ids, scores, flags = _store(everyone, rows, finished_seq, finished_scores, finished_flags, alive_seq,
                                alive_log_probs, out_seq, out_scores, out_flags)
    return ids, scores


def _store(which, rows, finished_seq, finished_scores, finished_flags, alive_seq, alive_log_probs,
           out_seq, out_scores, out_flags):
    """Write the results of the state rows ``which`` (bool ``[n]``) into the input-order
    buffers at ``rows``. A sentence without finished hypotheses (only when the loop never
    ran, ``L == 0``) returns its live ones."""
    has_finished = tf.reduce_any(finished_flags, axis=1)
    ids = tf.where(has_finished[:, None, None], finished_seq, alive_seq)
    scores = tf.where(has_finished[:, None], finished_scores, alive_log_probs)
    at = tf.cast(tf.where(which)[:, 0], tf.int32)
    index = tf.gather(rows, at)[:, None]
    return (tf.tensor_scatter_nd_update(out_seq, index, tf.gather(ids, at)),
            tf.tensor_scatter_nd_update(out_scores, index, tf.gather(scores, at)),
            tf.tensor_scatter_nd_update(out_flags, index, tf.gather(finished_flags, at)))
