"""The loss's TensorFlow kernels with written-out gradients: label-smoothed token statistics
from logits, and the same fused with the tied pre-softmax projection (paper sections 3.4, 5.4).

With ``q`` the smoothed target distribution and ``p = softmax(logits)``, the gradient of a
position's smoothed loss is ``p - q`` and that of its NLL is ``p - onehot(y)``. The forward
pass keeps ``p`` (one softmax; ``logsumexp`` is read off it at the argmax), the backward
scales it and scatters the gold-token terms, instead of the several elementwise passes over
``[tokens, vocab]`` that autodiff of ``logsumexp``/``sum``/``take_along_axis`` makes.
:mod:`tf_transformer.training.losses` calls these under the TensorFlow backend; its
``keras.ops`` path (``reference_statistics``) gives the same values and gradients and is what
the tests compare these against.
"""

from __future__ import annotations

import tensorflow as tf

from tf_transformer.ops.smoothing import smoothing_entropy, smoothing_weights


def _pick(matrix, index, batch_dims: int):
    """``matrix[..., index]`` per position: one value per row of ``[..., vocab]``."""
    return tf.gather(matrix, index[..., None], batch_dims=batch_dims)[..., 0]


def _weighted_mask(targets, pad_id: int, weights):
    """float32 ``1`` at real tokens (``targets != pad_id``), ``0`` at padding; times ``weights``
    (float, ``targets``' shape) when given."""
    mask = tf.cast(tf.not_equal(targets, pad_id), tf.float32)
    return mask if weights is None else mask * tf.cast(weights, tf.float32)


def fused_token_statistics(targets, logits, epsilon: float, pad_id: int, weights=None):
    """``token_statistics`` (:mod:`tf_transformer.training.losses`) of ``logits`` with a
    closed-form gradient; see the module docstring. ``weights``: per-token weights
    (``targets``' shape) that scale every sum, ``tokens`` included."""
    logits = tf.cast(logits, tf.float32)
    targets = tf.cast(targets, tf.int32)
    vocab_size = int(logits.shape[-1])
    mask = _weighted_mask(targets, pad_id, weights)
    confidence, low = smoothing_weights(epsilon, vocab_size)
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


def fused_tied_head_statistics(targets, hidden, table, epsilon: float, pad_id: int, weights=None):
    """``tied_head_statistics`` (:mod:`tf_transformer.training.losses`) with the projection
    folded into the gradient. ``weights``: as in :func:`fused_token_statistics` (the mask
    ``m_i`` below is then the token's weight, 0 at padding).

    Only two passes go over the ``[tokens, vocab]`` logits: ``P = softmax(logits)`` and the
    argmax (for the accuracy). ``lse`` comes from the argmax ``k``:
    ``lse = logits[k] - log P[k]``, safe because ``P[k] >= 1/V`` never underflows.

    Per position ``i`` with mask ``m_i`` and upstream gradients ``a`` (loss sum) and ``b``
    (NLL sum), the gradient to the logits is ``m_i [(a + b) P_i - a low 1 - (a (conf - low) + b)
    onehot(y_i)]``, so with ``hm = m * hidden`` and ``T`` the table::

        d hidden_i = m_i [ (a + b) (P T)_i - (a (conf - low) + b) T[y_i] - a low sum_v T_v ]
        d T        = (a + b) P^T hm - (a (conf - low) + b) scatter_y(hm) - a low 1 (sum_i hm_i)

    and ``sum_v logits_iv = hidden_i . sum_v T_v``: nothing but ``P`` is ``[tokens, vocab]``.
    """
    compute_dtype = hidden.dtype
    table = tf.convert_to_tensor(table)
    vocab_size, d_model = int(table.shape[0]), int(table.shape[1])
    flat_targets = tf.reshape(tf.cast(targets, tf.int32), [-1])
    mask = _weighted_mask(flat_targets, pad_id, None if weights is None else tf.reshape(weights, [-1]))
    safe_targets = tf.clip_by_value(flat_targets, 0, vocab_size - 1)
    confidence, low = smoothing_weights(epsilon, vocab_size)
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
