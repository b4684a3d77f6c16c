"""The TensorFlow fast path of the loss equals the keras.ops reference, values and gradients."""

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.ops.loss import fused_token_statistics as _fused_statistics
from tf_transformer.training.losses import reference_statistics


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.2])
def test_fused_statistics_match_reference_values_and_gradients(epsilon):
    rng = np.random.default_rng(0)
    logits = tf.constant(rng.normal(size=(3, 5, 11)).astype("float32") * 3)
    targets = rng.integers(1, 11, size=(3, 5)).astype("int32")
    targets[0, 3:] = 0  # padding
    targets[2, 1] = 0
    weights = {"loss_sum": 0.7, "nll_sum": -1.3}

    def run(fn):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            stats = fn(targets, logits, epsilon, 0)
            objective = sum(w * stats[k] for k, w in weights.items())
        return stats, tape.gradient(objective, logits)

    fused, g_fused = run(_fused_statistics)
    ref, g_ref = run(reference_statistics)
    for key in ("loss_sum", "nll_sum", "correct", "tokens"):
        np.testing.assert_allclose(float(fused[key]), float(ref[key]), rtol=1e-5, atol=1e-5)
    g = tf.convert_to_tensor(g_fused).numpy()
    np.testing.assert_allclose(g, tf.convert_to_tensor(g_ref).numpy(), atol=1e-5)
    assert np.all(g[targets == 0] == 0)  # padded positions get no gradient


def test_fused_gradient_is_softmax_minus_smoothed_target():
    logits = tf.constant([[[2.0, 0.5, -1.0, 0.0]]])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        stats = _fused_statistics(np.array([[2]], "int32"), logits, 0.3, 0)
    g = tape.gradient(stats["loss_sum"], logits).numpy()[0, 0]
    p = tf.nn.softmax(logits)[0, 0].numpy()
    q = np.array([0.1, 0.1, 0.7, 0.1])  # 1-eps on gold, eps/(V-1) elsewhere
    np.testing.assert_allclose(g, p - q, atol=1e-6)


def _head_run(fn, targets, hidden, table, weights):
    with tf.GradientTape() as tape:
        tape.watch(hidden)
        stats = fn()
        objective = sum(w * stats[k] for k, w in weights.items())
    g_hidden, g_table = tape.gradient(objective, [hidden, table])
    return stats, tf.convert_to_tensor(g_hidden).numpy(), tf.convert_to_tensor(g_table).numpy()


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_tied_head_matches_projection_then_reference(epsilon):
    """Fused projection + loss == logits = h T^T then the keras.ops reference: values and the
    gradients to the hidden states and to the table (padding included)."""
    from tf_transformer.training.losses import tied_head_statistics

    rng = np.random.default_rng(1)
    hidden = tf.constant(rng.normal(size=(3, 5, 8)).astype("float32"))
    table = tf.Variable(rng.normal(size=(13, 8)).astype("float32"))
    targets = rng.integers(1, 13, size=(3, 5)).astype("int32")
    targets[0, 2:] = 0
    targets[1, 4] = 0
    weights = {"loss_sum": 0.7, "nll_sum": -1.3, "correct": 5.0}
    fused = _head_run(lambda: tied_head_statistics(targets, hidden, table, epsilon, 0),
                      targets, hidden, table, weights)
    ref = _head_run(lambda: reference_statistics(targets, tf.matmul(hidden, table, transpose_b=True), epsilon, 0),
                    targets, hidden, table, weights)
    for key in ("loss_sum", "nll_sum", "correct", "tokens"):
        np.testing.assert_allclose(float(fused[0][key]), float(ref[0][key]), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(fused[1], ref[1], atol=1e-5)
    np.testing.assert_allclose(fused[2], ref[2], atol=1e-5)
    assert np.all(fused[1][targets == 0] == 0)  # padded positions pass no gradient back


def test_tied_head_gradient_is_softmax_minus_smoothed_target_through_the_table():
    """d loss / d hidden = (p - q) T and d loss / d T = (p - q)^T h for one position."""
    from tf_transformer.training.losses import tied_head_statistics

    rng = np.random.default_rng(2)
    hidden = tf.constant(rng.normal(size=(1, 1, 3)).astype("float32"))
    table = tf.Variable(rng.normal(size=(4, 3)).astype("float32"))
    with tf.GradientTape() as tape:
        tape.watch(hidden)
        stats = tied_head_statistics(np.array([[2]], "int32"), hidden, table, 0.3, 0)
    g_h, g_t = tape.gradient(stats["loss_sum"], [hidden, table])
    h, t = hidden.numpy()[0, 0], table.numpy()
    logits = t @ h
    p = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    q = np.array([0.1, 0.1, 0.7, 0.1])
    np.testing.assert_allclose(g_h.numpy()[0, 0], (p - q) @ t, atol=1e-6)
    np.testing.assert_allclose(tf.convert_to_tensor(g_t).numpy(), np.outer(p - q, h), atol=1e-6)


def test_tied_head_is_finite_when_the_gold_probability_underflows():
    """lse is taken at the argmax (P >= 1/V there), so a gold logit 200 below the best one
    gives NLL ~200, not inf: the values still equal the reference's logsumexp."""
    from tf_transformer.training.losses import tied_head_statistics

    table = tf.Variable(np.eye(3, dtype="float32"))
    hidden = tf.constant([[[250.0, 50.0, 0.0]]])
    stats = tied_head_statistics(np.array([[2]], "int32"), hidden, table, 0.1, 0)
    ref = reference_statistics(np.array([[2]], "int32"), tf.matmul(hidden, table, transpose_b=True), 0.1, 0)
    assert np.isfinite(float(stats["nll_sum"]))
    np.testing.assert_allclose(float(stats["nll_sum"]), 250.0, rtol=1e-6)
    np.testing.assert_allclose(float(stats["loss_sum"]), float(ref["loss_sum"]), rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tied_head_under_mixed_precision_hidden_states(dtype):
    """Half-precision hidden states (mixed precision): float32 statistics close to the float32
    computation, gradients returned in the inputs' dtypes."""
    from tf_transformer.training.losses import tied_head_statistics

    rng = np.random.default_rng(3)
    h32 = rng.normal(size=(2, 4, 8)).astype("float32")
    table = tf.Variable(rng.normal(size=(11, 8)).astype("float32") * 0.5)
    targets = rng.integers(1, 11, size=(2, 4)).astype("int32")
    hidden = tf.constant(h32, dtype=dtype)
    with tf.GradientTape() as tape:
        tape.watch(hidden)
        stats = tied_head_statistics(targets, hidden, table, 0.1, 0)
    g_h, g_t = tape.gradient(stats["loss_sum"], [hidden, table])
    assert stats["loss_sum"].dtype == tf.float32
    assert g_h.dtype == tf.as_dtype(dtype) and tf.convert_to_tensor(g_t).dtype == tf.float32
    exact = reference_statistics(targets, tf.matmul(tf.constant(h32), table, transpose_b=True), 0.1, 0)
    np.testing.assert_allclose(float(stats["loss_sum"]), float(exact["loss_sum"]), rtol=2e-2)


def test_fused_statistics_finite_when_the_gold_probability_underflows():
    logits = tf.constant([[[250.0, 50.0, 0.0]]])
    fused = _fused_statistics(np.array([[2]], "int32"), logits, 0.1, 0)
    ref = reference_statistics(np.array([[2]], "int32"), logits, 0.1, 0)
    np.testing.assert_allclose(float(fused["nll_sum"]), 250.0, rtol=1e-6)
    np.testing.assert_allclose(float(fused["loss_sum"]), float(ref["loss_sum"]), rtol=1e-5)


def test_fused_paths_with_token_weights_match_the_reference():
    """Per-token weights (Keras' sample weights) scale every sum and its gradient alike in the
    fused statistics, the fused tied head and the keras.ops reference."""
    from tf_transformer.ops.loss import fused_tied_head_statistics

    rng = np.random.default_rng(5)
    hidden = tf.constant(rng.normal(size=(3, 5, 8)).astype("float32"))
    table = tf.Variable(rng.normal(size=(13, 8)).astype("float32"))
    targets = rng.integers(1, 13, size=(3, 5)).astype("int32")
    targets[0, 3:] = 0
    token_weights = tf.constant(rng.uniform(0.0, 2.0, size=(3, 5)).astype("float32"))
    objective = {"loss_sum": 0.7, "nll_sum": -1.3}
    logits_of = lambda: tf.matmul(hidden, table, transpose_b=True)  # noqa: E731
    ref = _head_run(lambda: reference_statistics(targets, logits_of(), 0.1, 0, token_weights),
                    targets, hidden, table, objective)
    head = _head_run(lambda: fused_tied_head_statistics(targets, hidden, table, 0.1, 0, token_weights),
                     targets, hidden, table, objective)
    fused = _head_run(lambda: _fused_statistics(targets, logits_of(), 0.1, 0, token_weights),
                      targets, hidden, table, objective)
    unweighted = reference_statistics(targets, logits_of(), 0.1, 0)
    assert abs(float(ref[0]["loss_sum"]) - float(unweighted["loss_sum"])) > 1e-2  # the weights matter
    np.testing.assert_allclose(float(ref[0]["tokens"]), float(tf.reduce_sum(token_weights * (targets != 0))),
                               rtol=1e-6)
    for got in (head, fused):
        for key in ("loss_sum", "nll_sum", "correct", "tokens"):
            np.testing.assert_allclose(float(got[0][key]), float(ref[0][key]), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(got[1], ref[1], atol=1e-5)
        np.testing.assert_allclose(got[2], ref[2], atol=1e-5)
