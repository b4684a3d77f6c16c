"""Adapters from a :class:`tf_transformer.model.Transformer` to the decoding functions,
and :func:`translate_batch`, the one TF function behind ``tft translate``/``evaluate``,
the exported SavedModel and the benchmark.

Length rules (documented in ``tft translate --help`` as well):

* ``limit = model.max_length`` (the model config's ``max_length``: rows of a learned
  position table; for sinusoids the same number is the supported length). Sources
  longer than ``limit`` tokens are cut to their first ``limit`` tokens
  (:func:`truncate_source`); the encoder never sees more.
* A sentence with ``n`` source tokens may produce up to
  ``min(n + max_extra_length, limit)`` target tokens, EOS included (the paper's
  "input length + 50").
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from tf_transformer.decoding.batches import Sampling
from tf_transformer.decoding.beam_search import beam_search, step_log_probs
from tf_transformer.decoding.greedy import greedy_search, sentence_seeds
from tf_transformer.errors import UserError

__all__ = [
    "cached_decoder",
    "cached_decoder_parts",
    "model_limit",
    "score_batch",
    "strip_after_eos",
    "translate_batch",
    "truncate_source",
    "uncached_decoder",
]


def outputs_log_probabilities(model) -> bool:
    """Whether ``model`` returns log-probabilities where a Transformer returns logits (an
    :class:`~tf_transformer.decoding.ensemble.Ensemble`): decoding and scoring then take no
    log-softmax of them."""
    return bool(getattr(model, "outputs_log_probabilities", False))


def model_limit(model) -> int:
    """Longest source and longest output the model takes: ``model.max_length``."""
    return int(model.max_length)


def truncate_source(ids: Sequence[int], limit: int) -> list:
    """The documented rule for over-long inputs: keep the first ``limit`` tokens."""
    return list(ids[:limit])


# Cache entries that are the same for every hypothesis of a sentence (the source side).
# They are kept out of the search state so beam search does not reorder them each step.
_SOURCE_SIDE = ("source_mask", "cross_key", "cross_value")


def _split_cache(cache):
    """``(source_side, per_hypothesis)`` parts of a nested cache dict."""
    static, dynamic = {}, {}
    for key, value in cache.items():
        if isinstance(value, dict):
            s, d = _split_cache(value)
            if s:
                static[key] = s
            if d:
                dynamic[key] = d
        elif key in _SOURCE_SIDE:
            static[key] = value
        else:
            dynamic[key] = value
    return static, dynamic


def _join_cache(static, dynamic):
    out = dict(dynamic)
    for key, value in static.items():
        out[key] = _join_cache(value, out.get(key, {})) if isinstance(value, dict) else value
    return out


def in_xla_context() -> bool:
    """True while tracing a function that XLA compiles (``tf.function(jit_compile=True)``)."""
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover (private module; without it, assume no XLA)
        return False
    return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))


def cached_decoder_parts(model, source_ids, max_decode_length=None, static_cache: bool | None = None):
    """``(symbols_to_logits_fn, initial_cache, sentence_cache)`` for the searches'
    ``sentence_cache`` form: ``symbols_to_logits_fn(ids, step, cache, sentence_cache)``.

    ``sentence_cache`` (leaves ``[batch, ...]``) is the source side of the model's cache: each
    layer's cross-attention keys/values and the source mask, computed once by the encoder
    here; the searches repeat it per beam, never reorder it, and drop the rows of finished
    sentences (``drop_finished``). ``initial_cache`` holds the self-attention keys/values
    (see :func:`cached_decoder` for ``static_cache``; a static cache needs
    ``max_decode_length``).
    """
    if static_cache is None:
        static_cache = in_xla_context()
    memory, source_mask = model.encode(source_ids, training=False)
    cache = model.init_cache(memory, source_mask, max_decode_length if static_cache else None)
    sentence, per_hypothesis = _split_cache(cache)
    weights = model.step_weights() if hasattr(model, "step_weights") else None  # once, outside the loop

    def symbols_to_logits_fn(ids, step, cache, sentence_cache):
        kwargs = {} if weights is None else {"weights": weights}
        logits, new_cache = model.decode_step(ids[:, step], step, _join_cache(sentence_cache, cache), **kwargs)
        return logits, _split_cache(new_cache)[1]

    return symbols_to_logits_fn, per_hypothesis, sentence


def cached_decoder(model, source_ids, max_decode_length, beam_size: int = 1, static_cache: bool | None = None):
    """``(symbols_to_logits_fn, initial_cache)`` using the model's key/value cache.

    Runs the encoder once. The source side of the cache (each layer's cross-attention
    keys/values, computed once per sentence, and the source mask) is repeated
    ``beam_size`` times here and captured by the function, so the search never gathers
    it; ``initial_cache`` holds only the self-attention keys/values (batch-major: beam
    search tiles and reorders them). With the default ``beam_size=1`` it suits greedy
    search; for beam search pass the beam size (hypotheses are beam-major within each
    sentence, as in :func:`tf_transformer.decoding.beam_search.beam_search`).
    (:func:`translate_batch` passes the source side to the search instead, through
    :func:`cached_decoder_parts`, so that finished sentences can leave the batch.)

    ``static_cache``: ``True`` preallocates the self-attention buffers for
    ``max_decode_length`` positions (fixed shapes, which XLA needs); ``False`` starts them
    empty and grows them by one position per step, so every step writes, attends over and
    reorders only the positions decoded so far. The default picks ``True`` inside an
    XLA-compiled function and ``False`` elsewhere. Both give the same outputs.
    """
    fn, cache, sentence = cached_decoder_parts(model, source_ids, max_decode_length, static_cache)
    if beam_size > 1:
        sentence = tf.nest.map_structure(lambda t: tf.repeat(t, beam_size, axis=0), sentence)

    def symbols_to_logits_fn(ids, step, cache):
        return fn(ids, step, cache, sentence)

    return symbols_to_logits_fn, cache


def uncached_decoder(model, source_ids, max_decode_length=None, beam_size: int = 1):
    """``(symbols_to_logits_fn, initial_cache)`` without a key/value cache: every step
    re-runs the whole decoder over the prefix ``ids[:, :step+1]``. The encoder output is
    still computed once (and, like the cached decoder's source side, repeated
    ``beam_size`` times and kept out of the search state), so the two differ only in the
    decoder's key/value cache. Slow by design; the reference for tests and the benchmark.
    ``initial_cache`` is empty."""
    memory, source_mask = model.encode(source_ids, training=False)
    if beam_size > 1:
        # (an ensemble's memory is one tensor per member)
        memory, source_mask = tf.nest.map_structure(lambda t: tf.repeat(t, beam_size, axis=0), (memory, source_mask))

    def symbols_to_logits_fn(ids, step, cache):
        prefix = ids[:, : step + 1]
        logits = model.decode(prefix, memory, source_mask, training=False)
        return logits[:, -1], cache

    return symbols_to_logits_fn, {}


def strip_after_eos(ids: tf.Tensor, eos_id: int, pad_id: int = 0) -> tf.Tensor:
    """Replace EOS and everything after it by ``pad_id`` (``[batch, length]``)."""
    seen = tf.cumsum(tf.cast(tf.equal(ids, eos_id), tf.int32), axis=1) > 0
    return tf.where(seen, tf.constant(pad_id, ids.dtype), ids)


def translate_batch(
    model,
    source_ids,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_extra_length: int = 50,
    max_decode_length: int | tf.Tensor | None = None,
    bos_id: int = 2,
    eos_id: int = 3,
    cached: bool = True,
    stop_early: bool = True,
    static_cache: bool | None = None,
    stop_rule: str = "bound",
    n_best: int = 1,
    sampling: Sampling | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Translate a padded batch of source ids.

    Args:
      model: a Transformer (``encode``, ``init_cache``, ``decode_step``, ``decode``).
      source_ids: int32 ``[batch, source_length]``, 0-padded, no BOS/EOS, at most
        ``model.max_length`` long (see :func:`truncate_source`).
      beam_size: beams; 1 means greedy decoding (equal to beam search with one beam and
        ``alpha=0``; greedy ignores ``alpha``).
      alpha: GNMT length-penalty exponent.
      max_extra_length: each sentence may produce ``source tokens + this`` tokens (EOS
        included), never more than ``model.max_length``.
      max_decode_length: size of the output buffer; default
        ``min(source_length + max_extra_length, model.max_length)``: a Python int when the
        source length is static (XLA-friendly), a tensor otherwise.
      cached: use the key/value cache (``False``: re-run the decoder over the prefix).
      stop_rule: when a beam-search sentence stops: ``"bound"`` (exact under the length
        penalty) or ``"beam_finished"`` (also once ``beam_size`` hypotheses have ended, as
        fairseq, OpenNMT and CTranslate2 do); see :mod:`tf_transformer.decoding.beam_search`.
      static_cache: preallocated key/value buffers (``True``) or ones that grow per step
        (``False``); default: preallocated only inside an XLA-compiled function (see
        :func:`cached_decoder`). The outputs are the same.
      n_best: hypotheses returned per sentence, best first (beam search only; at most
        ``beam_size``). The search runs until that many have finished and none can be
        displaced (see :mod:`tf_transformer.decoding.beam_search`), so slot 0 is the 1-best
        translation; a slot the search could not fill (every hypothesis reached the length
        limit) has score ``-inf``.
      n_best (with ``sampling``): samples per sentence, each drawn with random numbers of its
        own (the first as with ``n_best=1``); returned as an n-best list, in the order drawn.
      sampling: a :class:`tf_transformer.decoding.batches.Sampling` (``top_k``, ``top_p``,
        ``temperature``, ``seed``, ``epsilon``): draw each token instead of searching
        (``beam_size`` must be 1; see :mod:`tf_transformer.decoding.greedy`). Each
        sentence's random numbers are seeded by ``seed`` and its own source ids
        (:func:`tf_transformer.decoding.greedy.sentence_seeds`), so a sentence samples the same
        translation in any batch, and other sentences or seeds other random numbers.

    The padding and BOS ids are never written (a model trained with label smoothing gives
    them a small probability; their log-probability is set to ``-inf`` after the softmax, so
    every other token's score is unchanged).

    Returns:
      ``(target_ids, scores)``: int32 ``[batch, max_decode_length]`` with the generated
      tokens, no BOS, EOS and everything after it replaced by pad (0); float32 ``[batch]``
      scores: length-normalised log-probability for beam search, total log-probability for
      greedy decoding. With ``n_best > 1``: ``[batch, n_best, max_decode_length]`` and
      ``[batch, n_best]``.
    """
    n_best = int(n_best)
    if sampling is None and not 1 <= n_best <= max(int(beam_size), 1):
        raise UserError(f"n_best={n_best}: must be between 1 and the beam size ({beam_size}); an n-best list "
                        "needs beam search with at least that many beams")
    if n_best < 1:
        raise UserError(f"n_best={n_best}: must be >= 1")
    source_ids = tf.cast(tf.convert_to_tensor(source_ids), tf.int32)
    samples = n_best if sampling is not None else 1
    if samples > 1:  # each sentence `samples` times in a row, each copy with a seed of its own
        source_ids = tf.repeat(source_ids, samples, axis=0)
    limit = model_limit(model)
    pad_id = int(getattr(model, "pad_id", 0))
    if max_decode_length is None:
        static_len = source_ids.shape[1]
        if static_len is not None:
            max_decode_length = min(int(static_len) + int(max_extra_length), limit)
        else:
            max_decode_length = tf.minimum(tf.shape(source_ids)[1] + int(max_extra_length), limit)
    source_lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, pad_id), tf.int32), axis=1)
    max_lengths = tf.minimum(source_lengths + int(max_extra_length), limit)

    if static_cache is None:
        static_cache = in_xla_context()
    sentence, drop = None, False
    if cached:
        # the source side goes to the search, which drops finished sentences from the batch
        # (dynamic shapes: not under XLA, whose static cache keeps the batch whole)
        fn, cache, sentence = cached_decoder_parts(model, source_ids, max_decode_length, static_cache)
        drop = not static_cache
    else:
        fn, cache = uncached_decoder(model, source_ids, max_decode_length, beam_size=max(int(beam_size), 1))
    batch = tf.shape(source_ids)[0]
    initial_ids = tf.fill([batch], tf.constant(bos_id, tf.int32))
    never = tuple(i for i in (pad_id, bos_id) if i != eos_id)  # ids that are no output's tokens
    normalized = outputs_log_probabilities(model)
    if sampling is not None and beam_size > 1:
        raise UserError(f"sampling draws one token at a time: it needs beam_size=1, not {beam_size}")
    if beam_size <= 1:
        draw = {}
        if sampling is not None:
            draw = dict(sample=True, top_k=int(sampling.top_k), top_p=float(sampling.top_p),
                        temperature=float(sampling.temperature), epsilon=float(sampling.epsilon),
                        seed=sentence_seeds(source_ids, int(sampling.seed), pad_id, copies=samples))
        ids, scores = greedy_search(fn, initial_ids, cache, max_decode_length, eos_id,
                                    max_lengths=max_lengths, pad_id=pad_id, sentence_cache=sentence,
                                    drop_finished=drop, never_ids=never, normalized=normalized, **draw)
        if samples > 1:
            out = strip_after_eos(ids[:, 1:], eos_id, pad_id)
            return tf.reshape(out, [-1, samples, tf.shape(out)[1]]), tf.reshape(scores, [-1, samples])
    else:
        ids, scores = beam_search(fn, initial_ids, cache, int(model.vocab_size), int(beam_size), alpha,
                                  max_decode_length, eos_id, max_lengths=max_lengths,
                                  stop_early=stop_early, pad_id=pad_id, n_best=n_best, sentence_cache=sentence,
                                  drop_finished=drop, stop_rule=stop_rule, never_ids=never, normalized=normalized)
        if n_best > 1:
            ids, scores = ids[:, :n_best, 1:], scores[:, :n_best]
            width = tf.shape(ids)[2]
            flat = strip_after_eos(tf.reshape(ids, [-1, width]), eos_id, pad_id)
            return tf.reshape(flat, [-1, n_best, width]), scores
        ids, scores = ids[:, 0], scores[:, 0]
    return strip_after_eos(ids[:, 1:], eos_id, pad_id), scores


def score_batch(model, source_ids, target_input_ids, target_output_ids) -> tuple[tf.Tensor, tf.Tensor]:
    """The model's log-probability of given translations (teacher forcing), as decoding scores
    them: ``source_ids`` ``[batch, s]``, ``target_input_ids`` ``BOS y`` and
    ``target_output_ids`` ``y EOS``, ``[batch, t]``, all 0-padded. Returns float32 ``[batch]``
    sums of ``log p(y_i | y_<i, x)`` over the tokens and EOS (greedy decoding's score of its
    own output), and int32 ``[batch]`` counts of those tokens. Computed in float32 whatever
    the model's compute dtype."""
    pad_id = int(getattr(model, "pad_id", 0))
    labels = tf.cast(target_output_ids, tf.int32)
    outputs = model((tf.cast(source_ids, tf.int32), tf.cast(target_input_ids, tf.int32)), training=False)
    log_probs = step_log_probs(outputs, (), outputs_log_probabilities(model))
    token_log_probs = tf.gather(log_probs, labels, batch_dims=2)
    real = tf.not_equal(labels, pad_id)
    return (tf.reduce_sum(tf.where(real, token_log_probs, 0.0), axis=1),
            tf.reduce_sum(tf.cast(real, tf.int32), axis=1))
