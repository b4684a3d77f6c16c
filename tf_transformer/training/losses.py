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
(:func:`_fused_statistics`, ``tf.custom_gradient``): the forward pass keeps ``p`` (one
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

import math

import keras
from keras import ops


def smoothing_entropy(epsilon: float, vocab_size: int) -> float:
    """Entropy (nats) of the smoothed target distribution: the floor of its cross-entropy."""
    if epsilon <= 0.0:
        return 0.0
    low = epsilon / (vocab_size - 1)
    return -((1.0 - epsilon) * math.log(1.0 - epsilon) + epsilon * math.log(low))


def _smoothing_weights(epsilon: float, vocab_size: int) -> tuple:
    """``(confidence, low)``: the smoothed target's probability of the gold token and of each
    other token (``(1, 0)`` without smoothing)."""
    if epsilon > 0.0:
        return 1.0 - epsilon, epsilon / (vocab_size - 1.0)
    return 1.0, 0.0


def _pick(matrix, index, batch_dims: int):
    """``matrix[..., index]`` per position: one value per row of ``[..., vocab]``."""
    import tensorflow as tf

    return tf.gather(matrix, index[..., None], batch_dims=batch_dims)[..., 0]


def token_statistics(targets, logits, epsilon: float = 0.0, pad_id: int = 0):
    """Per-batch sums for the loss and the metrics.

    Same values and gradients on every backend; with TensorFlow the gradient is the closed
    form of :func:`_fused_statistics`.

    Args:
        targets: int ``[batch, length]``, gold ids, ``pad_id`` where there is no token.
        logits: float ``[batch, length, vocab]`` (cast to float32).
        epsilon: label smoothing ``eps_ls``.
        pad_id: padding id; those positions count nowhere.

    Returns:
        dict of float32 scalars: ``loss_sum`` (smoothed loss summed over real tokens),
        ``nll_sum`` (unsmoothed negative log-likelihood), ``correct`` (argmax hits) and
        ``tokens`` (number of real tokens).
    """
    if keras.backend.backend() == "tensorflow" and logits.shape[-1] is not None:
        return _fused_statistics(targets, logits, epsilon, pad_id)
    return reference_statistics(targets, logits, epsilon, pad_id)


def reference_statistics(targets, logits, epsilon: float = 0.0, pad_id: int = 0):
    """:func:`token_statistics` in plain ``keras.ops`` (autodiff gradient, any backend)."""
    logits = ops.cast(logits, "float32")
    targets = ops.cast(targets, "int32")
    vocab_size = logits.shape[-1]
    mask = ops.cast(ops.not_equal(targets, pad_id), "float32")
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


def _fused_statistics(targets, logits, epsilon: float, pad_id: int):
    """TensorFlow version of :func:`token_statistics` with a closed-form gradient."""
    import tensorflow as tf

    logits = tf.cast(logits, tf.float32)
    targets = tf.cast(targets, tf.int32)
    vocab_size = int(logits.shape[-1])
    mask = tf.cast(tf.not_equal(targets, pad_id), tf.float32)
    confidence, low = _smoothing_weights(epsilon, vocab_size)
    entropy = smoothing_entropy(epsilon, vocab_size)
    safe_targets = tf.clip_by_value(targets, 0, vocab_size - 1)

    def pick(matrix, index):
        return _pick(matrix, index, len(targets.shape))

    @tf.custom_gradient
    def sums(logits):
        # lse at the argmax k (P[k] >= 1/V never underflows): a softmax and an argmax pass
        # instead of reduce_logsumexp's max/sub/exp/sum/log; P is kept for the gradient
        probs = tf.nn.softmax(logits)
        predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
        lse = pick(logits, predicted) - tf.math.log(pick(probs, predicted))
        gold_logp = pick(logits, safe_targets) - lse
        nll = -gold_logp
        if epsilon > 0.0:
            sum_logp = tf.reduce_sum(logits, axis=-1) - vocab_size * lse
            loss = -(confidence - low) * gold_logp - low * sum_logp - entropy
        else:
            loss = nll
        correct = tf.cast(tf.equal(predicted, targets), tf.float32) * mask

        def grad(d_loss, d_nll, d_correct):
            # d/dlogits = mask * [(d_loss + d_nll) p - d_loss * low - (d_loss (conf - low) + d_nll) onehot(y)]
            del d_correct  # a count: no gradient
            g = probs * ((d_loss + d_nll) * mask)[..., None]
            if low:
                g = g - (d_loss * low * mask)[..., None]
            gold = -(d_loss * (confidence - low) + d_nll) * mask
            flat = tf.reshape(g, [-1, vocab_size])
            rows = tf.range(tf.shape(flat)[0])
            index = tf.stack([rows, tf.reshape(safe_targets, [-1])], axis=1)
            flat = tf.tensor_scatter_nd_add(flat, index, tf.reshape(gold, [-1]))
            return tf.reshape(flat, tf.shape(logits))

        return (tf.reduce_sum(loss * mask), tf.reduce_sum(nll * mask), tf.reduce_sum(correct)), grad

    loss_sum, nll_sum, correct = sums(logits)
    return {"loss_sum": loss_sum, "nll_sum": nll_sum, "correct": correct, "tokens": tf.reduce_sum(mask)}


def tied_head_statistics(targets, hidden, table, epsilon: float = 0.0, pad_id: int = 0):
    """:func:`token_statistics` of ``logits = hidden @ table^T`` (the tied pre-softmax
    projection), computed together with that projection.

    Same values and gradients (to ``hidden`` and ``table``) as
    ``token_statistics(targets, matmul(hidden, transpose(table)), ...)``. Under TensorFlow
    (:func:`_tied_head_fused`) the gradient never builds ``p - q`` over ``[tokens, vocab]``:
    the constant ``-eps/(V-1)`` on every logit, the gold-token terms and the padding mask are
    folded into the two gradient matmuls through ``[tokens, d_model]`` and
    ``[vocab, d_model]`` terms, so besides the three matmuls only a softmax and an argmax
    pass over the logits (the head then costs about what its matmuls cost; see
    bench/RESULTS.md).

    Args:
        targets: int ``[batch, length]`` gold ids (``pad_id``: no token).
        hidden: ``[batch, length, d_model]`` decoder output (any float dtype).
        table: ``[vocab, d_model]`` shared embedding table (cast to ``hidden``'s dtype).
    """
    if keras.backend.backend() == "tensorflow" and table.shape[0] is not None:
        return _tied_head_fused(targets, hidden, table, epsilon, pad_id)
    logits = ops.matmul(hidden, ops.transpose(ops.cast(table, hidden.dtype)))
    return reference_statistics(targets, logits, epsilon, pad_id)


def _tied_head_fused(targets, hidden, table, epsilon: float, pad_id: int):
    """TensorFlow version of :func:`tied_head_statistics`.

    Only two passes go over the ``[tokens, vocab]`` logits: ``P = softmax(logits)`` and the
    argmax (for the accuracy; TensorFlow's softmax kernel is ~7x faster on CPU than its
    fused sparse cross-entropy kernel). ``lse`` comes from the argmax ``k``:
    ``lse = logits[k] - log P[k]``, safe because ``P[k] >= 1/V`` never underflows.

    Per position ``i`` with mask ``m_i`` and upstream gradients ``a`` (loss sum) and ``b``
    (NLL sum), the gradient to the logits is ``m_i [(a + b) P_i - a low 1 - (a (conf - low) + b)
    onehot(y_i)]``, so with ``hm = m * hidden`` and ``T`` the table::

        d hidden_i = m_i [ (a + b) (P T)_i - (a (conf - low) + b) T[y_i] - a low sum_v T_v ]
        d T        = (a + b) P^T hm - (a (conf - low) + b) scatter_y(hm) - a low 1 (sum_i hm_i)

    and ``sum_v logits_iv = hidden_i . sum_v T_v``: nothing but ``P`` is ``[tokens, vocab]``.
    """
    import tensorflow as tf

    compute_dtype = hidden.dtype
    table = tf.convert_to_tensor(table)
    vocab_size, d_model = int(table.shape[0]), int(table.shape[1])
    flat_targets = tf.reshape(tf.cast(targets, tf.int32), [-1])
    mask = tf.cast(tf.not_equal(flat_targets, pad_id), tf.float32)
    safe_targets = tf.clip_by_value(flat_targets, 0, vocab_size - 1)
    confidence, low = _smoothing_weights(epsilon, vocab_size)
    entropy = smoothing_entropy(epsilon, vocab_size)

    def pick(matrix, index):
        return _pick(matrix, index, 1)

    @tf.custom_gradient
    def head(hidden, table):
        h = tf.reshape(hidden, [-1, d_model])
        t = tf.cast(table, compute_dtype)
        logits = tf.cast(tf.matmul(h, t, transpose_b=True), tf.float32)
        probs = tf.nn.softmax(logits)
        predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
        lse = pick(logits, predicted) - tf.math.log(pick(probs, predicted))
        nll = lse - pick(logits, safe_targets)
        table_sum = tf.reduce_sum(tf.cast(table, tf.float32), axis=0) if low else None
        if low:
            logit_sum = tf.linalg.matvec(tf.cast(h, tf.float32), table_sum)
            sum_logp = logit_sum - vocab_size * lse
            loss = (confidence - low) * nll - low * sum_logp - entropy
        else:
            loss = nll
        correct = tf.cast(tf.equal(predicted, flat_targets), tf.float32) * mask

        def grad(d_loss, d_nll, d_correct):
            del d_correct  # a count: no gradient
            hm = tf.cast(h, tf.float32) * mask[:, None]
            p = tf.cast(probs, compute_dtype)
            scale, gold = d_loss + d_nll, d_loss * (confidence - low) + d_nll
            d_hidden = tf.cast(tf.matmul(p, t), tf.float32) * (scale * mask)[:, None]
            d_hidden -= (gold * mask)[:, None] * tf.gather(tf.cast(table, tf.float32), safe_targets)
            d_table = tf.cast(tf.matmul(p, tf.cast(hm, compute_dtype), transpose_a=True), tf.float32) * scale
            d_table -= gold * tf.math.unsorted_segment_sum(hm, safe_targets, vocab_size)
            if low:
                d_hidden -= (d_loss * low) * mask[:, None] * table_sum[None, :]
                d_table -= (d_loss * low) * tf.reduce_sum(hm, axis=0)[None, :]
            return (tf.cast(tf.reshape(d_hidden, tf.shape(hidden)), hidden.dtype),
                    tf.cast(d_table, table.dtype))

        return (tf.reduce_sum(loss * mask), tf.reduce_sum(nll * mask), tf.reduce_sum(correct)), grad

    loss_sum, nll_sum, correct = head(hidden, table)
    return {"loss_sum": loss_sum, "nll_sum": nll_sum, "correct": correct, "tokens": tf.reduce_sum(mask)}


def label_smoothed_loss(targets, logits, epsilon: float = 0.1, pad_id: int = 0):
    """Mean label-smoothed loss per real target token of one batch (a float32 scalar)."""
    stats = token_statistics(targets, logits, epsilon, pad_id)
    return stats["loss_sum"] / ops.maximum(stats["tokens"], 1.0)


@keras.saving.register_keras_serializable(package="tf_transformer")
class LabelSmoothedCrossEntropy(keras.losses.Loss):
    """Keras ``Loss`` form of :func:`label_smoothed_loss`, for ``model.compile(loss=...)``.

    Returns the per-token mean of each batch. Under a distribution strategy Keras averages
    the replicas' means, which weighs tokens slightly unevenly when replicas hold different
    token counts; :class:`~tf_transformer.training.trainer.TrainingModel` normalizes by the
    global token count instead.
    """

    def __init__(self, epsilon: float = 0.1, pad_id: int = 0, name: str = "label_smoothed_ce", **kwargs):
        kwargs.setdefault("reduction", "sum")
        super().__init__(name=name, **kwargs)
        self.epsilon = float(epsilon)
        self.pad_id = int(pad_id)

    def call(self, y_true, y_pred):
        return label_smoothed_loss(y_true, y_pred, self.epsilon, self.pad_id)

    def get_config(self):
        config = super().get_config()
        config.update(epsilon=self.epsilon, pad_id=self.pad_id)
        return config


class _TokenRatio(keras.metrics.Metric):
    """``numerator / tokens`` accumulated over batches; padding excluded.

    ``update_state(y_true, y_pred)`` works as any Keras metric; :meth:`update_totals` adds
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
        stats = token_statistics(y_true, y_pred, 0.0, self.pad_id)
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
