"""Label-smoothed cross-entropy and token metrics that ignore padding (paper section 5.4).

**Smoothing.** The target distribution for a position whose gold token is ``y`` puts
``1 - eps`` on ``y`` and spreads ``eps`` uniformly over the other ``V - 1`` tokens
(``eps / (V - 1)`` each; tensor2tensor's and fairseq's choice). The reported loss is the
KL divergence from that distribution to the model's, i.e. the cross-entropy minus the
distribution's own entropy ``H = -(1-eps) log(1-eps) - eps log(eps/(V-1))``, which is a
constant (tensor2tensor subtracts it too): gradients are unchanged and a perfect fit reads 0.
With ``eps = 0`` the loss is the plain negative log-likelihood.

**No one-hot.** Per position, with ``lse = logsumexp(logits)``::

    log p_y      = logits[y] - lse                         (one gathered value)
    sum_v log p_v = sum_v logits[v] - V * lse               (one reduction)
    loss = -(1-eps) log p_y - eps/(V-1) * (sum_v log p_v - log p_y) - H

so only ``[batch, length]`` tensors are made besides the logits themselves.

**Normalization.** Losses are *summed* over real target tokens (``target != pad_id``) and
divided by the number of real tokens in the whole update, across replicas and accumulated
micro-batches; :func:`token_statistics` returns the sums that
:class:`~tf_transformer.training.trainer.TrainingModel` combines. Perplexity is
``exp(sum NLL / tokens)`` of the unsmoothed NLL.

**Gradient.** With ``q`` the smoothed target distribution and ``p = softmax(logits)``, the
gradient of a position's smoothed loss is ``p - q`` and that of its NLL is ``p - onehot(y)``.
Under the TensorFlow backend :func:`token_statistics` uses that closed form
(:func:`tf_transformer.ops.loss.fused_token_statistics`, ``tf.custom_gradient``): the forward pass keeps ``p`` (one
softmax; ``logsumexp`` is read off it at the argmax), the backward scales it and scatters the
gold-token terms, instead of the several elementwise passes over ``[tokens, vocab]`` that
autodiff of ``logsumexp``/``sum``/``take_along_axis`` makes (no one-hot either way). The
generic ``keras.ops`` path (:func:`reference_statistics`) runs on every other backend and is
what the tests compare the fast path against.

**Fused head.** :func:`tied_head_statistics` takes the decoder states and the shared table
instead of the logits and folds the smoothing, the gold-token terms and the padding mask into
the projection's gradient matmuls, so only ``p`` is ever ``[tokens, vocab]`` in the
backward pass. :class:`~tf_transformer.training.trainer.TrainingModel` uses it.
"""

from __future__ import annotations

import keras
from keras import ops

from tf_transformer.ops.smoothing import smoothing_entropy  # noqa: F401 (public here too)


def token_statistics(targets, logits, epsilon: float = 0.0, pad_id: int = 0, weights=None):
    """Per-batch sums for the loss and the metrics.

    Same values and gradients on every backend; with TensorFlow the gradient is the closed
    form of :func:`tf_transformer.ops.loss.fused_token_statistics`.

    Args:
        targets: int ``[batch, length]``, gold ids, ``pad_id`` where there is no token.
        logits: float ``[batch, length, vocab]`` (cast to float32).
        epsilon: label smoothing ``eps_ls``.
        pad_id: padding id; those positions count nowhere.
        weights: optional float per-token weights ``[batch, length]`` (see
            :func:`token_weights`): each real token's terms, and its count in ``tokens``, are
            multiplied by its weight, so ratios of the sums are weighted means.

    Returns:
        dict of float32 scalars: ``loss_sum`` (smoothed loss summed over real tokens),
        ``nll_sum`` (unsmoothed negative log-likelihood), ``correct`` (argmax hits) and
        ``tokens`` (number of real tokens; with ``weights``, the sum of their weights).
    """
    if keras.backend.backend() == "tensorflow" and logits.shape[-1] is not None:
        from tf_transformer.ops.loss import fused_token_statistics

        return fused_token_statistics(targets, logits, epsilon, pad_id, weights)
    return reference_statistics(targets, logits, epsilon, pad_id, weights)


def token_weights(sample_weight, targets):
    """Keras' ``sample_weight`` for a batch of ``targets`` ``[batch, length]`` as per-token
    weights (float32 ``[batch, length]``), or ``None`` for ``None``: one weight per sentence
    (``[batch]`` or ``[batch, 1]``, given to each of its tokens) or one per token (``[batch,
    length]``)."""
    if sample_weight is None:
        return None
    weights = ops.cast(sample_weight, "float32")
    rank, shape = len(weights.shape), tuple(weights.shape)
    if rank == 1 or (rank == 2 and shape[1] == 1):
        return ops.broadcast_to(ops.reshape(weights, (-1, 1)), ops.shape(targets))
    if rank == 2 and (shape[1] is None or targets.shape[1] is None or shape[1] == targets.shape[1]):
        return weights
    raise ValueError(f"sample_weight of shape {shape} for targets of shape {tuple(targets.shape)}: expected "
                     "one weight per sentence ([batch]) or per target token ([batch, length])")


def reference_statistics(targets, logits, epsilon: float = 0.0, pad_id: int = 0, weights=None):
    """:func:`token_statistics` in plain ``keras.ops`` (autodiff gradient, any backend)."""
    logits = ops.cast(logits, "float32")
    targets = ops.cast(targets, "int32")
    vocab_size = logits.shape[-1]
    mask = ops.cast(ops.not_equal(targets, pad_id), "float32")
    if weights is not None:
        mask = mask * ops.cast(weights, "float32")
    lse = ops.logsumexp(logits, axis=-1)
    gold_logit = ops.squeeze(ops.take_along_axis(logits, ops.expand_dims(targets, -1), axis=-1), -1)
    gold_logp = gold_logit - lse
    nll = -gold_logp
    if epsilon > 0.0:
        if vocab_size is None:
            vocab_size = ops.shape(logits)[-1]
        confidence = 1.0 - epsilon
        low = epsilon / (float(vocab_size) - 1.0)
        sum_logp = ops.sum(logits, axis=-1) - float(vocab_size) * lse
        loss = -(confidence - low) * gold_logp - low * sum_logp - smoothing_entropy(epsilon, int(vocab_size))
    else:
        loss = nll
    predicted = ops.cast(ops.argmax(logits, axis=-1), "int32")
    correct = ops.cast(ops.equal(predicted, targets), "float32") * mask
    return {
        "loss_sum": ops.sum(loss * mask),
        "nll_sum": ops.sum(nll * mask),
        "correct": ops.sum(correct),
        "tokens": ops.sum(mask),
    }


def tied_head_statistics(targets, hidden, table, epsilon: float = 0.0, pad_id: int = 0, weights=None):
    """:func:`token_statistics` of ``logits = hidden @ table^T`` (the tied pre-softmax
    projection), computed together with that projection.

    Same values and gradients (to ``hidden`` and ``table``) as
    ``token_statistics(targets, matmul(hidden, transpose(table)), ...)``. Under TensorFlow
    (:func:`tf_transformer.ops.loss.fused_tied_head_statistics`) the gradient never builds
    ``p - q`` over ``[tokens, vocab]``: the constant ``-eps/(V-1)`` on every logit, the
    gold-token terms and the padding mask are folded into the two gradient matmuls through
    ``[tokens, d_model]`` and ``[vocab, d_model]`` terms, so besides the three matmuls only a
    softmax and an argmax pass over the logits.

    Args:
        targets: int ``[batch, length]`` gold ids (``pad_id``: no token).
        hidden: ``[batch, length, d_model]`` decoder output (any float dtype).
        table: ``[vocab, d_model]`` shared embedding table (cast to ``hidden``'s dtype).
        weights: optional per-token weights, as in :func:`token_statistics`.
    """
    if keras.backend.backend() == "tensorflow" and table.shape[0] is not None:
        from tf_transformer.ops.loss import fused_tied_head_statistics

        return fused_tied_head_statistics(targets, hidden, table, epsilon, pad_id, weights)
    logits = ops.matmul(hidden, ops.transpose(ops.cast(table, hidden.dtype)))
    return reference_statistics(targets, logits, epsilon, pad_id, weights)


def label_smoothed_loss(targets, logits, epsilon: float = 0.1, pad_id: int = 0, weights=None):
    """Mean label-smoothed loss per real target token of one batch (a float32 scalar);
    with per-token ``weights`` (:func:`token_weights`), the weighted mean
    ``sum_t w_t loss_t / sum_t w_t`` over real tokens."""
    stats = token_statistics(targets, logits, epsilon, pad_id, weights)
    return ops.divide_no_nan(stats["loss_sum"], stats["tokens"])


@keras.saving.register_keras_serializable(package="tf_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Keras ``Loss`` form of :func:`label_smoothed_loss`, for ``model.compile(loss=...)``.

    Returns the per-token mean of each batch. ``sample_weight`` (``fit``'s, ``evaluate``'s, or
    given to the call) weighs each sentence (``[batch]``) or each target token (``[batch,
    length]``): the loss is then ``sum w loss / sum w`` over real tokens, so weights of 1 change
    nothing and a weight of 0 leaves a sentence out. Under a distribution strategy Keras
    averages the replicas' means, which weighs tokens slightly unevenly when replicas hold
    different token counts; :class:`~tf_transformer.training.trainer.TrainingModel` normalizes
    by the global token count instead.
    """

    def __init__(self, epsilon: float = 0.1, pad_id: int = 0, name: str = "label_smoothed_ce", **kwargs):
        kwargs.setdefault("reduction", "sum")
        super().__init__(name=name, **kwargs)
        self.epsilon = float(epsilon)
        self.pad_id = int(pad_id)

    def call(self, y_true, y_pred):
        return label_smoothed_loss(y_true, y_pred, self.epsilon, self.pad_id)

    def __call__(self, y_true, y_pred, sample_weight=None):
        # Keras' own __call__ would reduce ``call``'s scalar with the weights (a sum of
        # weight * batch mean): the weights go into the per-token mean instead
        with keras.name_scope(self.name):
            return label_smoothed_loss(y_true, y_pred, self.epsilon, self.pad_id,
                                       token_weights(sample_weight, y_true))

    def get_config(self):
        config = super().get_config()
        config.update(epsilon=self.epsilon, pad_id=self.pad_id)
        return config


class _TokenRatio(keras.metrics.Metric):
    """``numerator / tokens`` accumulated over batches; padding excluded.

    ``update_state(y_true, y_pred, sample_weight=None)`` works as any Keras metric (a weight per
    sentence or per target token: a weighted mean over real tokens); :meth:`update_totals` adds
    precomputed sums (what the trainer does with globally reduced numbers).
    """

    _key = "nll_sum"

    def __init__(self, pad_id: int = 0, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        self.pad_id = int(pad_id)
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="count")

    def update_totals(self, total, count):
        self.total.assign_add(ops.cast(total, "float32"))
        self.count.assign_add(ops.cast(count, "float32"))

    def update_state(self, y_true, y_pred, sample_weight=None):
        stats = token_statistics(y_true, y_pred, 0.0, self.pad_id, token_weights(sample_weight, y_true))
        self.update_totals(stats[self._key], stats["tokens"])

    def _ratio(self):
        return ops.divide_no_nan(self.total, self.count)

    def result(self):
        return self._ratio()

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "pad_id": self.pad_id}


@keras.saving.register_keras_serializable(package="tf_transformer")
class TokenAccuracy(_TokenRatio):
    """Fraction of real (non-pad) target tokens whose argmax prediction is the gold token."""

    _key = "correct"

    def __init__(self, pad_id: int = 0, name: str = "accuracy", **kwargs):
        super().__init__(pad_id=pad_id, name=name, **kwargs)


@keras.saving.register_keras_serializable(package="tf_transformer")
class Perplexity(_TokenRatio):
    """``exp(mean unsmoothed NLL per real target token)``."""

    _key = "nll_sum"

    def __init__(self, pad_id: int = 0, name: str = "perplexity", **kwargs):
        super().__init__(pad_id=pad_id, name=name, **kwargs)

    def result(self):
        return ops.exp(self._ratio())


@keras.saving.register_keras_serializable(package="tf_transformer")
class TokenMean(_TokenRatio):
    """Mean of a per-token quantity (the smoothed loss) over real target tokens; feed it
    with :meth:`update_totals` (``update_state`` measures the unsmoothed NLL)."""

    def __init__(self, pad_id: int = 0, name: str = "loss", **kwargs):
        super().__init__(pad_id=pad_id, name=name, **kwargs)
