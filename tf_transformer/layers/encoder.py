"""Encoder layer and stack (paper section 3.1), post-LN: ``LayerNorm(x + Dropout(sublayer(x)))``."""

from __future__ import annotations

import keras

from tf_transformer.config.schema import ATTENTION_INITS, FFN_INITS
from tf_transformer.layers.attention import AttentionScoresSpec, MultiHeadAttention
from tf_transformer.layers.feed_forward import PositionwiseFeedForward
from tf_transformer.layers.normalization import LayerNorm


class SublayerSettings(AttentionScoresSpec, keras.layers.Layer):
    """Base of the encoder and decoder layers and stacks: the hyper-parameters they share
    (stored, in ``get_config`` and handed on by :meth:`settings`) and the sublayers they make.
    Not registered for serialization: only its subclasses are saved."""

    def __init__(self, num_heads, key_dim, value_dim=None, d_ff=2048, dropout=0.1,
                 attention_dropout=0.0, relu_dropout=0.0, layer_norm_epsilon=1e-6,
                 attention_bias=False, qkv_init_gain=1.0, attention_init="independent",
                 ffn_init="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        if attention_init not in ATTENTION_INITS:
            raise ValueError(f"attention_init={attention_init!r} is not one of {ATTENTION_INITS}")
        if ffn_init not in FFN_INITS:
            raise ValueError(f"ffn_init={ffn_init!r} is not one of {FFN_INITS}")
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim)
        self.value_dim = int(value_dim) if value_dim is not None else self.key_dim
        self.d_ff = int(d_ff)
        self.dropout_rate = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.relu_dropout = float(relu_dropout)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.attention_bias = bool(attention_bias)
        self.qkv_init_gain = float(qkv_init_gain)
        self.attention_init = attention_init
        self.ffn_init = ffn_init
        self.make_sublayers()

    def make_sublayers(self):
        """Create the sublayers from the settings (called once, at the end of ``__init__``)."""

    def settings(self):
        return dict(num_heads=self.num_heads, key_dim=self.key_dim, value_dim=self.value_dim,
                    d_ff=self.d_ff, dropout=self.dropout_rate, attention_dropout=self.attention_dropout,
                    relu_dropout=self.relu_dropout, layer_norm_epsilon=self.layer_norm_epsilon,
                    attention_bias=self.attention_bias, qkv_init_gain=self.qkv_init_gain,
                    attention_init=self.attention_init, ffn_init=self.ffn_init)

    def _attention(self, name):
        # Glorot uniform is VarianceScaling(1, fan_avg, uniform); a gain g scales the variance by g^2
        qkv_init = keras.initializers.VarianceScaling(self.qkv_init_gain ** 2, "fan_avg", "uniform")
        return MultiHeadAttention(self.num_heads, self.key_dim, self.value_dim,
                                  dropout=self.attention_dropout, use_bias=self.attention_bias,
                                  kernel_initializer=qkv_init, output_kernel_initializer="glorot_uniform",
                                  tie_query_key_init=self.attention_init == "tied_qk",
                                  name=name, dtype=self.dtype_policy)

    def _norm(self, name):
        return LayerNorm(epsilon=self.layer_norm_epsilon, name=name, dtype=self.dtype_policy)

    def _ffn(self):
        return PositionwiseFeedForward(self.d_ff, relu_dropout=self.relu_dropout, init=self.ffn_init, name="ffn",
                                       dtype=self.dtype_policy)

    def get_config(self):
        config = super().get_config()
        config.update(self.settings())
        return config


def padding_attention_mask(padding_mask):
    """``[batch, k]`` bool (True = real token) -> ``[batch, 1, 1, k]`` for every head and query."""
    return padding_mask[:, None, None, :]


@keras.saving.register_keras_serializable(package="tf_transformer")
class EncoderLayer(SublayerSettings):
    """Self-attention then FFN, each wrapped as ``LayerNorm(x + Dropout(sublayer(x)))``.

    Args:
        num_heads, key_dim, value_dim: attention shape (``h``, ``d_k``, ``d_v``).
        d_ff: FFN inner size.
        dropout: residual dropout ``P_drop``.
        attention_dropout: dropout on the attention weights (0 in the paper).
        relu_dropout: dropout after the FFN's ReLU (0 in the paper).
        layer_norm_epsilon: LayerNorm epsilon.
        attention_bias: biases on the attention projections (none in the paper).
        qkv_init_gain: Glorot-uniform gain of the query, key and value kernels (1; fairseq
            uses 1/sqrt(2)); ``W^O`` is Glorot uniform.
        attention_init: ``"independent"`` (every projection its own draw) or ``"tied_qk"``
            (``W^K`` starts as a copy of ``W^Q``, in self- and cross-attention alike).
        ffn_init: how the FFN's weights start (see :class:`PositionwiseFeedForward`).
        **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``...).

    Call arguments:
        x: ``[batch, length, d_model]``.
        padding_mask: ``[batch, length]`` bool, True for real tokens.
        return_attention_scores: also return ``[batch, heads, length, length]``.

    Output shape: ``[batch, length, d_model]``.

    Example:
        >>> layer = EncoderLayer(num_heads=4, key_dim=8, d_ff=64)
        >>> tuple(layer(keras.random.normal((2, 5, 32))).shape)
        (2, 5, 32)
    """

    def make_sublayers(self):
        self.self_attention = self._attention("self_attention")
        self.self_attention_norm = self._norm("self_attention_norm")
        self.ffn = self._ffn()
        self.ffn_norm = self._norm("ffn_norm")
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def build(self, x_shape):
        self.self_attention.build(x_shape, x_shape)
        self.self_attention_norm.build(x_shape)
        self.ffn.build(x_shape)
        self.ffn_norm.build(x_shape)
        self.built = True

    def call(self, x, padding_mask=None, return_attention_scores=False, training=None):
        mask = None if padding_mask is None else padding_attention_mask(padding_mask)
        y, weights = self.self_attention(x, x, attention_mask=mask, return_attention_scores=True,
                                         training=training)
        x = self.self_attention_norm(x + self.dropout(y, training=training))
        y = self.ffn(x, training=training)
        x = self.ffn_norm(x + self.dropout(y, training=training))
        return (x, weights) if return_attention_scores else x

    def compute_output_shape(self, x_shape):
        return x_shape


class LayerStack(SublayerSettings):
    """Base of :class:`Encoder` and :class:`~tf_transformer.layers.decoder.Decoder`:
    ``num_layers`` layers of ``layer_class``, named ``layer_0``... and made with the stack's
    settings and dtype policy."""

    layer_class: type = None  # set by the subclass

    def __init__(self, num_layers, num_heads, key_dim, value_dim=None, d_ff=2048, dropout=0.1,
                 attention_dropout=0.0, relu_dropout=0.0, layer_norm_epsilon=1e-6,
                 attention_bias=False, qkv_init_gain=1.0, attention_init="independent",
                 ffn_init="glorot_uniform", **kwargs):
        super().__init__(num_heads, key_dim, value_dim, d_ff, dropout, attention_dropout, relu_dropout,
                         layer_norm_epsilon, attention_bias, qkv_init_gain, attention_init, ffn_init, **kwargs)
        self.num_layers = int(num_layers)
        self.layers = [self.layer_class(name=f"layer_{i}", dtype=self.dtype_policy, **self.settings())
                       for i in range(self.num_layers)]

    def get_config(self):
        config = super().get_config()
        config["num_layers"] = self.num_layers
        return config


@keras.saving.register_keras_serializable(package="tf_transformer")
class Encoder(LayerStack):
    """A stack of ``num_layers`` :class:`EncoderLayer` (the paper's N=6).

    Takes the embedded, position-encoded source (the embedding dropout is applied by the
    caller) and returns the memory the decoder attends to.

    Args:
        num_layers: ``N``, the number of layers (the paper: 6).
        num_heads, key_dim, value_dim, d_ff, dropout, attention_dropout, relu_dropout,
            layer_norm_epsilon, attention_bias, qkv_init_gain, attention_init, ffn_init: the settings of
            every :class:`EncoderLayer` (see there).
        **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``...).

    Call arguments:
        x: ``[batch, length, d_model]``.
        padding_mask: ``[batch, length]`` bool, True for real tokens. Masks are explicit
            arguments: a Keras mask carried by the input (``Embedding(mask_zero=True)``) is not
            read, so pass ``ids != pad_id`` here.
        return_attention_scores: also return a list (one per layer) of
            ``[batch, heads, length, length]`` weights.

    Example:
        >>> enc = Encoder(num_layers=2, num_heads=4, key_dim=8, d_ff=64)
        >>> tuple(enc(keras.random.normal((2, 5, 32))).shape)
        (2, 5, 32)
    """

    layer_class = EncoderLayer

    def build(self, x_shape):
        for layer in self.layers:
            layer.build(x_shape)
        self.built = True

    def call(self, x, padding_mask=None, return_attention_scores=False, training=None):
        all_weights = []
        for layer in self.layers:
            x, weights = layer(x, padding_mask=padding_mask, return_attention_scores=True, training=training)
            all_weights.append(weights)
        return (x, all_weights) if return_attention_scores else x

    def compute_output_shape(self, x_shape):
        return x_shape
