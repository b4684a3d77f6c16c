"""Keras layers of the Transformer (``keras.ops`` only)."""

from tf_transformer.layers.attention import MultiHeadAttention, scaled_dot_product_attention
from tf_transformer.layers.decoder import Decoder, DecoderLayer, causal_mask
from tf_transformer.layers.embedding import (
    LearnedPositionalEmbedding,
    SharedEmbedding,
    SinusoidalPositionalEncoding,
    sinusoidal_encoding,
)
from tf_transformer.layers.encoder import Encoder, EncoderLayer
from tf_transformer.layers.feed_forward import PositionwiseFeedForward

__all__ = [
    "MultiHeadAttention", "scaled_dot_product_attention", "PositionwiseFeedForward",
    "SharedEmbedding", "SinusoidalPositionalEncoding", "LearnedPositionalEmbedding", "sinusoidal_encoding",
    "EncoderLayer", "Encoder", "DecoderLayer", "Decoder", "causal_mask",
]
