"""TensorFlow kernels with written-out gradients for the training hot path.

The layers stay ``keras.ops`` only (DESIGN.md); where the TensorFlow backend runs them, a
layer may call one of these instead of letting TensorFlow differentiate its ops one by one.
Each computes the same values as the layer's generic path and is tested against it
(tests/test_layers.py, tests/test_training_fused_loss.py). The fused projection + loss is
:func:`tf_transformer.training.losses.tied_head_statistics`.
"""

from __future__ import annotations

import tensorflow as tf


def layer_norm_last_axis(x, gamma, beta, epsilon: float):
    """Layer norm over the last axis in float32 with a closed-form gradient (see
    :mod:`tf_transformer.layers.normalization`); returns float32."""
    in_dtype = x.dtype
    gamma = tf.cast(tf.convert_to_tensor(gamma), tf.float32)
    beta = tf.cast(tf.convert_to_tensor(beta), tf.float32)

    @tf.custom_gradient
    def norm(x, gamma, beta):
        x32 = tf.cast(x, tf.float32)
        centered = x32 - tf.reduce_mean(x32, axis=-1, keepdims=True)
        inv = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
        x_hat = centered * inv
        y = x_hat * gamma + beta

        def grad(dy):
            dy = tf.cast(dy, tf.float32)
            g = dy * gamma
            dx = inv * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                        - x_hat * tf.reduce_mean(g * x_hat, axis=-1, keepdims=True))
            rows = list(range(len(dy.shape) - 1))
            return (tf.cast(dx, in_dtype), tf.reduce_sum(dy * x_hat, axis=rows), tf.reduce_sum(dy, axis=rows))

        return y, grad

    return norm(x, gamma, beta)
