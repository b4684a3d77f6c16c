"""Keras layers of the Transformer (``keras.ops`` only; nothing here imports TensorFlow or
anything above this package but :mod:`tf_transformer.ops`, lazily, under that backend).

Note: :class:`MultiHeadAttention` is *not* ``keras.layers.MultiHeadAttention``: it takes
``(query, value=None)`` (keys and values come from one tensor; no ``key`` argument), has
separate ``key_dim``/``value_dim``, no projection biases by default, and masks that may carry
a heads axis. Its docstring lists the differences.
"""

from tf_transformer.layers.attention import MultiHeadAttention, scaled_dot_product_attention
from tf_transformer.layers.decoder import Decoder, DecoderLayer, causal_mask
from tf_transformer.layers.embedding import (
    LearnedPositionalEmbedding,
    SharedEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_encoding,
)
from tf_transformer.layers.encoder import (
    Encoder,
    EncoderLayer,
    LayerStack,
    SublayerSettings,
    padding_attention_mask,
)
from tf_transformer.layers.feed_forward import PositionwiseFeedForward
from tf_transformer.layers.normalization import LayerNorm

__all__ = [
    "MultiHeadAttention", "scaled_dot_product_attention", "PositionwiseFeedForward", "LayerNorm",
    "SharedEmbedding", "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding", "sinusoidal_encoding",
    "SublayerSettings", "LayerStack", "EncoderLayer", "Encoder", "DecoderLayer", "Decoder", "causal_mask",
    "padding_attention_mask",
]
