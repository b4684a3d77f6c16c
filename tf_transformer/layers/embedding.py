"""The shared embedding / pre-softmax table and positional encodings (paper 3.4, 3.5)."""

from __future__ import annotations

import math

import keras
from keras import ops


def sinusoidal_encoding(positions, d_model, max_wavelength=10000.0, dtype="float32"):
    """The paper's positional encoding for the given positions.

    ``PE[pos, 2i] = sin(pos / max_wavelength^(2i/d_model))`` and
    ``PE[pos, 2i+1] = cos(pos / max_wavelength^(2i/d_model))`` (interleaved, as written in
    the paper; tensor2tensor concatenates the sines and cosines instead).

    Args:
        positions: integer or float tensor of any shape ``[...]``.
        d_model: encoding size (odd sizes are allowed; the last column is then a sine).
        max_wavelength: the base of the geometric progression of wavelengths (10000 in the
            paper): they run from ``2 pi`` to ``max_wavelength * 2 pi``.
        dtype: dtype of the result (computed in float32).

    Returns: ``[..., d_model]`` in ``dtype``.
    """
    positions = ops.cast(positions, "float32")
    i = ops.arange(d_model) // 2  # pair index i for columns 2i and 2i+1
    inv_freq = ops.exp(ops.cast(2 * i, "float32") * (-math.log(max_wavelength) / d_model))
    angles = ops.expand_dims(positions, -1) * inv_freq
    is_even = ops.equal(ops.arange(d_model) % 2, 0)
    return ops.cast(ops.where(is_even, ops.sin(angles), ops.cos(angles)), dtype)


@keras.saving.register_keras_serializable(package="tf_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal encoding to ``[batch, length, d_model]`` inputs.

    Works for any length (there is no table). ``start_index`` shifts the positions, which
    the incremental decoder uses to encode position ``step``.

    Args:
        max_wavelength: the 10,000 of the paper's formula.

    Example:
        >>> pe = SinusoidalPositionalEncoding()
        >>> tuple(pe(keras.ops.zeros((2, 5, 16))).shape)
        (2, 5, 16)
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = float(max_wavelength)

    def encoding(self, positions, d_model, dtype="float32"):
        return sinusoidal_encoding(positions, d_model, self.max_wavelength, dtype)

    def call(self, inputs, start_index=0):
        length, d_model = ops.shape(inputs)[1], inputs.shape[-1]
        positions = ops.arange(length) + start_index
        return inputs + self.encoding(positions, d_model, inputs.dtype)[None]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(max_wavelength=self.max_wavelength)
        return config


@keras.saving.register_keras_serializable(package="tf_transformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """Adds a learned ``[max_length, d_model]`` position table (Table 3 row E).

    Positions beyond ``max_length - 1`` reuse the last row (the table cannot extrapolate;
    the decoders cap their output length at ``max_length``).

    Args:
        max_length: number of positions in the table.
        initializer: initializer of the table.

    Example:
        >>> pe = LearnedPositionalEmbedding(max_length=64)
        >>> tuple(pe(keras.ops.zeros((2, 5, 16))).shape)
        (2, 5, 16)
    """

    def __init__(self, max_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.max_length = int(max_length)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        self.table = self.add_weight(name="position_table", shape=(self.max_length, input_shape[-1]),
                                     initializer=self.initializer)
        self.built = True

    def encoding(self, positions, d_model=None, dtype="float32"):
        positions = ops.minimum(ops.cast(positions, "int32"), self.max_length - 1)
        return ops.cast(ops.take(self.table, positions, axis=0), dtype)

    def call(self, inputs, start_index=0):
        positions = ops.arange(ops.shape(inputs)[1]) + start_index
        return inputs + self.encoding(positions, dtype=inputs.dtype)[None]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(max_length=self.max_length,
                      initializer=keras.initializers.serialize(self.initializer))
        return config


@keras.saving.register_keras_serializable(package="tf_transformer")
class SharedEmbedding(keras.layers.Layer):
    """One ``[vocab_size, d_model]`` table for the source embedding, the target embedding
    and the tied pre-softmax projection.

    ``call(ids)`` looks rows up and multiplies them by ``sqrt(d_model)``; ``logits(h)``
    returns ``h @ E^T``. The table is initialised ``N(0, d_model^-0.5)`` (tensor2tensor's
    choice) so that the scaled embeddings have unit variance, like the positional encoding.

    Args:
        vocab_size: rows of the table.
        d_model: columns of the table.

    Input shape: ``[batch, length]`` int ids. Output shape: ``[batch, length, d_model]``.

    Example:
        >>> emb = SharedEmbedding(vocab_size=100, d_model=16)
        >>> x = emb(keras.ops.array([[5, 7, 0]]))
        >>> tuple(emb.logits(x).shape)
        (1, 3, 100)
    """

    def __init__(self, vocab_size, d_model, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.d_model = int(d_model)

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings", shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))
        self.built = True

    def call(self, ids):
        x = ops.take(self.embeddings, ops.cast(ids, "int32"), axis=0)
        return ops.cast(x, self.compute_dtype) * ops.cast(math.sqrt(self.d_model), self.compute_dtype)

    def output_kernel(self):
        """The transposed table, ``[d_model, vocab_size]``: what :meth:`logits` multiplies by."""
        return ops.transpose(self.embeddings)

    def logits(self, hidden, kernel=None):
        """``[..., d_model]`` -> ``[..., vocab_size]`` with the transposed table.

        ``kernel``: :meth:`output_kernel`, transposed once by a caller that projects many
        times (the incremental decoder). The product is the same; TensorFlow's CPU matmul
        with a contiguous ``[d_model, vocab]`` operand is up to twice as fast as with a
        transposed one (``transpose_b``, which the table gives otherwise).
        """
        if kernel is None:
            return ops.matmul(hidden, ops.transpose(ops.cast(self.embeddings, hidden.dtype)))
        return ops.matmul(hidden, ops.cast(kernel, hidden.dtype))

    def compute_output_shape(self, input_shape=None):
        # ``input_shape`` None: built without one (``Transformer.build``), any [batch, length]
        return (None, None, self.d_model) if input_shape is None else tuple(input_shape) + (self.d_model,)

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, d_model=self.d_model)
        return config
