"""Position-wise feed-forward network (paper section 3.3)."""

from __future__ import annotations

import keras
from keras import ops

from tf_transformer.config.schema import FFN_INITS
from tf_transformer.layers.linear import leading_shape, linear


@keras.saving.register_keras_serializable(package="tf_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """``FFN(x) = max(0, x W1 + b1) W2 + b2``, the same weights at every position.

    Args:
        d_ff: inner size (2048 in the base model).
        output_dim: output size; defaults to the input's last dimension (``d_model``).
        relu_dropout: dropout on the ReLU output (0 in the paper; tensor2tensor's
            ``relu_dropout``).
        init: ``"glorot_uniform"`` (both kernels Glorot uniform, biases zero) or
            ``"fan_in_uniform"`` (kernels and biases uniform in ``+-1/sqrt(fan_in)``: PyTorch's
            ``nn.Linear`` default, which fairseq's Transformer keeps for its FFN; at
            ``d_ff = 2 d_model`` the FFN's output starts about 3x smaller than under Glorot).

    Input shape: ``[batch, length, d_model]``. Output shape: ``[batch, length, d_model]``.

    Example:
        >>> ffn = PositionwiseFeedForward(d_ff=2048)
        >>> tuple(ffn(keras.random.normal((2, 7, 512))).shape)
        (2, 7, 512)
    """

    def __init__(self, d_ff, output_dim=None, relu_dropout=0.0, init="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if init not in FFN_INITS:
            raise ValueError(f"init={init!r} is not one of {FFN_INITS}")
        self.init = init
        self.d_ff = int(d_ff)
        self.output_dim = output_dim
        self.relu_dropout = float(relu_dropout)
        self.dropout = keras.layers.Dropout(self.relu_dropout, dtype=self.dtype_policy) if self.relu_dropout else None

    def build(self, input_shape):
        d_in = input_shape[-1]
        d_out = self.output_dim or d_in
        self.inner_kernel = self.add_weight(name="inner_kernel", shape=(d_in, self.d_ff),
                                            initializer=self._initializer(d_in))
        self.inner_bias = self.add_weight(name="inner_bias", shape=(self.d_ff,),
                                          initializer=self._initializer(d_in, bias=True))
        self.outer_kernel = self.add_weight(name="outer_kernel", shape=(self.d_ff, d_out),
                                            initializer=self._initializer(self.d_ff))
        self.outer_bias = self.add_weight(name="outer_bias", shape=(d_out,),
                                          initializer=self._initializer(self.d_ff, bias=True))
        self.built = True

    def _initializer(self, fan_in, bias=False):
        """A fresh initializer for one weight (an unseeded Keras initializer fixes its seed when
        made, so each weight gets its own instance)."""
        if self.init == "fan_in_uniform":
            limit = float(fan_in) ** -0.5
            return keras.initializers.RandomUniform(-limit, limit)
        return "zeros" if bias else "glorot_uniform"

    def call(self, x, training=None):
        lead = leading_shape(x) if len(x.shape) > 2 else None
        h = ops.relu(linear(x, self.inner_kernel, self.inner_bias, lead="rows"))  # [rows, d_ff]
        if self.dropout is not None:
            h = self.dropout(h, training=training)
        return linear(h, self.outer_kernel, self.outer_bias, lead=lead)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.output_dim or input_shape[-1],)

    def get_config(self):
        config = super().get_config()
        config.update(d_ff=self.d_ff, output_dim=self.output_dim, relu_dropout=self.relu_dropout, init=self.init)
        return config
