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
the tokens; 1: the model's own distribution). ``epsilon`` (epsilon sampling; Hewitt et al.,
2022, "Truncation Sampling as Language Model Desmoothing"; 0: none) drops the tokens of
probability below it (renormalised over the ``top_k``; the most probable token is always kept)
before the nucleus is taken. Tokens tied with the nucleus's least probable
one are kept with it. The returned score is the model's log-probability of the drawn tokens
(at temperature 1, over the whole vocabulary), as for greedy decoding.

**Each row draws from its own random numbers**: the Gumbel-max trick (``argmax(x + g)``, ``g``
standard Gumbel noise), with each row's noise hashed from its seed pair, the step and the token
id (MurmurHash3's finalisers: a counter-based generator). So a row's tokens depend on its seed
pair and its logits only, not on the other rows of the batch, its place in it, or which rows
finished first: :func:`sentence_seeds` gives each sentence a pair made of the user's seed and a
hash of its source ids, and a sentence then samples the same translation alone or in any batch
(the logits of a sentence differ between batch shapes only by float rounding, about 1e-7,
which moves an argmax of noisy scores only when two are that close).
"""

from __future__ import annotations

import tensorflow as tf

from tf_transformer.decoding.beam_search import _call, _drop_rows, _shape_invariants, step_log_probs

__all__ = ["greedy_search", "sentence_seeds"]


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
    epsilon: float = 0.0,
    normalized: bool = False,
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
      epsilon: with ``sample``, draw only from tokens of probability at least this (``0 <=
        epsilon < 1``; the most probable always; 0: all), applied before ``top_p``.
      seed: with ``sample``, the rows' seed pairs: int ``[batch, 2]`` (e.g. from
        :func:`sentence_seeds`), or one pair ``[2]`` (two integers) from which row ``r`` gets
        ``(seed[0], seed[1] + r)``.
      normalized: the function returns log-probabilities, not logits (no log-softmax is
        taken), as in beam search.

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
    if sample and not 0 <= epsilon < 1:
        raise ValueError(f"epsilon={epsilon}: must be in [0, 1) (0: no cut)")
    initial_ids = tf.cast(tf.convert_to_tensor(initial_ids), tf.int32)
    static_batch = initial_ids.shape[0]
    batch = static_batch if static_batch is not None else tf.shape(initial_ids)[0]
    seeds = tf.cast(tf.convert_to_tensor(seed), tf.int64)
    if seeds.shape.rank == 1:  # one pair: row r gets (seed[0], seed[1] + r)
        seeds = tf.stack([tf.fill([batch], seeds[0]), seeds[1] + tf.range(tf.cast(batch, tf.int64))], axis=1)
    row_keys = _mix64(_mix64(seeds[:, 0]) + seeds[:, 1])  # [batch]: each sentence's stream
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
        log_probs = step_log_probs(logits, never_ids, normalized)
        if sample:
            token = _draw(log_probs, top_k, temperature, _step_keys(tf.gather(row_keys, rows), i), top_p, epsilon)
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


def _draw(log_probs, top_k: int, temperature: float, keys, top_p: float = 1.0, epsilon: float = 0.0):
    """One token per row drawn from ``softmax(log_probs / temperature)`` restricted to the
    row's ``top_k`` most probable tokens (0: all; ties broken toward the lower id, as
    ``tf.math.top_k`` does), of those to the ones of probability at least ``epsilon`` (0: all)
    and to the nucleus of ``top_p`` among them (1: all): the Gumbel-max trick, ``argmax(x +
    g)``, with each row's noise ``g`` from its own key (:func:`_gumbel_noise`; int32 ``keys
    [batch]``)."""
    scaled = log_probs / temperature
    vocab = log_probs.shape[-1]
    if top_k and (vocab is None or top_k < vocab):
        values, ids = tf.math.top_k(scaled, k=top_k)
        values = _truncated(values, top_p, epsilon)
        pick = tf.argmax(values + _gumbel_noise(keys, ids), axis=-1, output_type=tf.int32)
        return tf.gather(ids, pick, batch_dims=1)
    scaled = _truncated(scaled, top_p, epsilon)
    tokens = tf.range(tf.shape(scaled)[-1], dtype=tf.int32)[None, :]
    return tf.argmax(scaled + _gumbel_noise(keys, tokens), axis=-1, output_type=tf.int32)


def _truncated(scaled, top_p: float, epsilon: float):
    """``scaled`` (unnormalised log-probabilities ``[batch, n]``) with the tokens outside the
    cut set to -inf: those of probability below ``epsilon`` (but the most probable), then
    those outside the nucleus of ``top_p`` of what is left."""
    never = tf.constant(float("-inf"), scaled.dtype)
    if epsilon > 0:
        top = tf.reduce_max(scaled, axis=-1, keepdims=True)
        keep = (tf.nn.softmax(scaled, axis=-1) >= epsilon) | (scaled >= top)
        scaled = tf.where(keep, scaled, never)
    if top_p < 1:
        scaled = tf.where(scaled < _nucleus_floor(scaled, top_p), never, scaled)
    return scaled


def _gumbel_noise(keys, tokens):
    """float32 standard Gumbel noise ``-log(-log(u))`` for each row's ``tokens`` (int32
    ``[batch, n]``, or ``[1, n]`` for every row): ``u`` from 24 bits of MurmurHash3's 32-bit
    finaliser of ``key + token * golden``, so that a token's noise depends on the row's key and
    the token id only (not on the other rows, nor on which tokens are candidates)."""
    whole_vocabulary = tokens.shape[0] == 1 and (tokens.shape[1] or 0) >= _FUSED_FROM
    if whole_vocabulary and not tf.config.list_logical_devices("GPU"):  # on a GPU the ops are cheap as they are
        u = _fused_uniform(keys, tokens)
    else:
        u = _uniform(keys, tokens)
    return -tf.math.log(-tf.math.log(u))  # u in (0, 1)


def _uniform(keys, tokens):
    """The ``u`` of :func:`_gumbel_noise`, in (0, 1): integer ops, then an exact conversion."""
    v = tf.cast(keys, tf.uint32)[:, None] + tf.cast(tokens, tf.uint32) * tf.constant(0x9E3779B9, tf.uint32)
    v = _fmix(v, (16, 13, 16), (0x85EBCA6B, 0xC2B2AE35))
    return (tf.cast(tf.bitwise.right_shift(v, tf.constant(8, tf.uint32)), tf.float32) + 0.5) * (1.0 / (1 << 24))


#: :func:`_uniform` as one XLA kernel: TensorFlow runs its dozen integer ops over ``[batch,
#: vocabulary]`` one pass each (1.6 ms for 64 rows of 10,000 on a 2-vCPU EPYC), XLA in one
#: (0.45 ms). Integer ops and an exact conversion, so the same bits.
_uniform_xla = tf.function(_uniform, jit_compile=True, autograph=False, reduce_retracing=True)

#: The smallest vocabulary whose noise goes through :data:`_uniform_xla`: below about 2,000
#: tokens the kernel's launch costs what it saves (the same 0.4 ms at 64 rows of 1,000).
_FUSED_FROM = 4096


def _fused_uniform(keys, tokens):
    """:func:`_uniform` of every row over the same ``tokens [1, n]`` through :data:`_uniform_xla`.
    XLA compiles a kernel per shape (about 40 ms each): a batch whose size is known only when it
    runs (rows drop out as they finish) is padded to the next power of two, so that a decoding
    run compiles a handful of kernels, not one per batch size."""
    if keys.shape[0] is not None:
        return _uniform_xla(keys, tokens)
    rows = tf.shape(keys)[0]
    padded = rows - 1  # the next power of two >= rows: smear the highest bit down, add one
    for bits in (1, 2, 4, 8, 16):
        padded = tf.bitwise.bitwise_or(padded, tf.bitwise.right_shift(padded, bits))
    padded = tf.maximum(padded + 1, 1)
    return _uniform_xla(tf.pad(keys, [[0, padded - rows]]), tokens)[:rows]


def _fmix(v, shifts, multipliers):
    """MurmurHash3's finaliser on unsigned ``v`` (uint32: fmix32, shifts 16, 13, 16; uint64:
    fmix64, 33, 33, 33): xor-shifts and products, which wrap, so that each output bit depends
    on every input bit."""
    for bits, multiplier in zip(shifts, multipliers):
        v = tf.bitwise.bitwise_xor(v, tf.bitwise.right_shift(v, tf.constant(bits, v.dtype))) * tf.constant(
            multiplier, v.dtype)
    return tf.bitwise.bitwise_xor(v, tf.bitwise.right_shift(v, tf.constant(shifts[-1], v.dtype)))


def _mix64(x):
    """fmix64 (:func:`_fmix`) on int64 ``x``, bit for bit as on uint64."""
    return tf.cast(_fmix(tf.cast(x, tf.uint64), (33, 33, 33), (0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53)), tf.int64)


#: The golden ratio's 64-bit Weyl step, as a signed int64 (TensorFlow's integer ops wrap around).
_WEYL = 0x9E3779B97F4A7C15 - (1 << 64)


def _step_keys(keys, step):
    """int32 ``[batch]``: the rows' keys for ``step``, the low 32 bits of
    ``fmix64(key + (step + 1) * golden)`` (a counter-based generator: any row and step at once)."""
    return tf.cast(_mix64(keys + (tf.cast(step, tf.int64) + 1) * tf.constant(_WEYL, tf.int64)), tf.int32)


def sentence_seeds(source_ids, seed, pad_id: int = 0, copies: int = 1):
    """int64 ``[batch, 2]`` seed pairs for :func:`greedy_search`'s sampling: ``(seed, a hash of
    the row's source ids and their places, padding left out)``, so that a sentence draws the
    same tokens whatever batch it is decoded in (and the same sentence twice draws the same).
    ``copies > 1``: the rows are each sentence ``copies`` times in a row (``tf.repeat``), and
    copy ``k > 0`` gets ``fmix64(seed * golden + k)`` instead of ``seed``, so that each draws
    apart (copy 0 as a single draw would)."""
    ids = tf.cast(source_ids, tf.int64)
    places = tf.range(1, tf.shape(ids, out_type=tf.int64)[1] + 1)[None, :]
    each = _mix64(ids * tf.constant(_WEYL, tf.int64) + places)
    salt = tf.reduce_sum(tf.where(tf.equal(ids, pad_id), tf.zeros_like(each), each), axis=1)
    seed = tf.fill(tf.shape(salt), tf.cast(seed, tf.int64))
    if copies > 1:
        copy = tf.math.floormod(tf.range(tf.shape(salt, out_type=tf.int64)[0]), copies)
        seed = tf.where(copy == 0, seed, _mix64(seed * tf.constant(_WEYL, tf.int64) + copy))
    return tf.stack([seed, salt], axis=1)


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
