"""Several trained Transformers decoded as one model (an ensemble).

At every step each member predicts the next token from its own encoding of the source and
its own key/value cache, and the ensemble's distribution is the mean of the members'
probabilities, ``p(y | ...) = (1/M) sum_m p_m(y | ...)`` (the rule of fairseq's
``EnsembleModel``; averaging log-probabilities instead would make one member's near-zero
probability veto a token). :class:`Ensemble` has the decoding interface of
:class:`tf_transformer.model.Transformer` (``encode``, ``init_cache``, ``decode_step``,
``step_weights``, ``decode`` and the teacher-forced call), returning log-probabilities where the
model returns logits (a softmax leaves them as they are), so beam search, greedy search,
sampling, n-best lists, MBR, scoring and :class:`tf_transformer.decoding.Translator` take it
in place of one model.

Members must share the vocabulary (the same SentencePiece pieces: the same ids), hence the
vocabulary size and the padding id; their architectures may differ. Sources are cut to the
shortest member's ``max_length``. Checkpoint averaging (``tft average``) is the cheap
alternative: one model's cost, for checkpoints of one run; an ensemble costs the sum of its
members' decoding and combines independent runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import tensorflow as tf

from tf_transformer.errors import UserError

__all__ = ["Ensemble", "mean_probabilities"]


def mean_probabilities(logits: Sequence[tf.Tensor]) -> tf.Tensor:
    """``log((1/M) sum_m softmax(logits_m))`` over the last axis, in float32: the ensemble's
    log-probabilities from its members' logits (each ``[..., vocab]``).

    Each member's log-softmax ``l_m``, then ``c + log(sum_m exp(l_m - c))`` with ``c`` the
    elementwise maximum over the members: exact for every token, however improbable (no
    ``exp`` underflows to a ``log(0)``), and without stacking the members into one
    ``[M, ..., vocab]`` tensor first (a copy, then ``tf.reduce_logsumexp``'s passes over it: the
    same values for two members, in more time; ``tools/bench/ensemble_overhead.py``)."""
    log_probs = [tf.nn.log_softmax(tf.cast(x, tf.float32), axis=-1) for x in logits]
    top = log_probs[0]
    for other in log_probs[1:]:
        top = tf.maximum(top, other)
    return top + tf.math.log(tf.add_n([tf.exp(x - top) for x in log_probs])) - math.log(len(log_probs))


class Ensemble(tf.Module):
    """Decode with the mean of several models' next-token probabilities.

    Args:
        models: two or more Transformers (or models wrapping one, as ``TrainingModel``), trained
            on one vocabulary.
        names: optional, one name per member for error messages (e.g. the files they came
            from); default ``member 1``, ``member 2``, ...

    Example::

        ensemble = Ensemble([keras.saving.load_model("a.keras"), keras.saving.load_model("b.keras")])
        Translator(ensemble, tokenizer, beam_size=5).translate(["A dog runs."])
    """

    #: ``decode_step``, ``decode`` and the call return log-probabilities, not logits: the
    #: searches and scoring use them as they are (a log-softmax would only cost a pass over
    #: ``[rows, vocab]`` per step and change nothing but float rounding)
    outputs_log_probabilities = True

    def __init__(self, models: Sequence, names: Sequence[str] | None = None):
        super().__init__(name="ensemble")
        from tf_transformer.model import as_transformer

        models = list(models)
        names = list(names) if names is not None else [f"member {i + 1}" for i in range(len(models))]
        if len(models) < 2:
            raise UserError(f"an ensemble needs at least two models, got {len(models)}")
        if len(names) != len(models):
            raise ValueError(f"{len(names)} names for {len(models)} models")
        members = [as_transformer(m) for m in models]
        for what in ("vocab_size", "pad_id"):
            values = [int(getattr(m, what, 0)) for m in members]
            if len(set(values)) > 1:
                listed = ", ".join(f"{n}: {v:,}" for n, v in zip(names, values))
                raise UserError(f"the ensemble's models differ in {what} ({listed}): members must be trained on "
                                "one vocabulary")
        self.members = members
        self.names = tuple(names)
        self.vocab_size = int(members[0].vocab_size)
        self.pad_id = int(getattr(members[0], "pad_id", 0))
        self.max_length = min(int(m.max_length) for m in members)

    @property
    def weights(self) -> list:
        """All members' weights, member by member."""
        return [w for m in self.members for w in m.weights]

    def __len__(self) -> int:
        return len(self.members)

    @staticmethod
    def _key(i: int) -> str:
        return f"member{i}"

    # -- the Transformer's decoding interface ------------------------------------------------
    def encode(self, source_ids, training=None):
        """Each member's encoding: ``(tuple of memories, source_mask)``."""
        encoded = [m.encode(source_ids, training=False) for m in self.members]
        return tuple(memory for memory, _ in encoded), encoded[0][1]

    def init_cache(self, memory, source_mask, max_length=None):
        """One cache per member, under ``member0``, ``member1``, ... (the searches split and
        reorder nested caches as they do one model's)."""
        return {self._key(i): m.init_cache(mem, source_mask, max_length)
                for i, (m, mem) in enumerate(zip(self.members, memory))}

    def step_weights(self):
        return tuple(m.step_weights() if hasattr(m, "step_weights") else None for m in self.members)

    def decode_step(self, token_ids, step, cache, weights=None):
        """``(log-probabilities [batch, vocab] float32, new_cache)``: the members' mean
        probability of each next token."""
        logits, new_cache = [], {}
        for i, m in enumerate(self.members):
            key = self._key(i)
            kwargs = {} if weights is None or weights[i] is None else {"weights": weights[i]}
            out, new_cache[key] = m.decode_step(token_ids, step, cache[key], **kwargs)
            logits.append(out)
        return mean_probabilities(logits), new_cache

    def decode(self, target_input_ids, memory, source_mask, training=None):
        """Teacher-forced: ``[batch, target_length, vocab]`` float32 log-probabilities."""
        return mean_probabilities([m.decode(target_input_ids, mem, source_mask, training=False)
                                   for m, mem in zip(self.members, memory)])

    def __call__(self, inputs, training=None):
        """``(source_ids, target_input_ids)`` -> the ensemble's log-probabilities ``[batch,
        target_length, vocab]`` (float32), as a model's call gives logits."""
        return mean_probabilities([m(inputs, training=False) for m in self.members])
