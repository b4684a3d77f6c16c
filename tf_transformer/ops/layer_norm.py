"""Layer normalization over the last axis with a closed-form gradient (TensorFlow).

:class:`tf_transformer.layers.LayerNorm` calls :func:`layer_norm_last_axis` under the
TensorFlow backend instead of letting TensorFlow differentiate ``moments``/``rsqrt`` op by op;
it computes the same values as ``keras.layers.LayerNormalization`` (tests/test_layers.py
compares values and gradients)::

    x_hat = (x - mean) / sqrt(var + eps),   y = gamma * x_hat + beta
    dx    = (g - mean(g) - x_hat * mean(g * x_hat)) / sqrt(var + eps),   g = dy * gamma
    dgamma = sum(dy * x_hat),   dbeta = sum(dy)
"""

from __future__ import annotations

import tensorflow as tf


def layer_norm_last_axis(x, gamma, beta, epsilon: float):
    """Layer norm of ``x`` over its last axis, computed in float32 with the closed-form
    gradient above; returns float32."""
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
