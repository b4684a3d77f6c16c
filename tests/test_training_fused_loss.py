"""The TensorFlow fast path of the loss equals the keras.ops reference, values and gradients."""

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.training.losses import _fused_statistics, reference_statistics


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
