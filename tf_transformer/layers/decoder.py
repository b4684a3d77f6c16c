"""Decoder layer and stack (paper section 3.1) with an incremental key/value cache."""

from __future__ import annotations

import keras
from keras import ops

from tf_transformer.layers.encoder import LayerStack, SublayerSettings, padding_attention_mask


def causal_mask(length):
    """``[length, length]`` bool, ``True`` on and below the diagonal: position i sees j <= i."""
    i = ops.arange(length)
    return ops.greater_equal(i[:, None], i[None, :])


@keras.saving.register_keras_serializable(package="tf_transformer")
class DecoderLayer(SublayerSettings):
    """Masked self-attention, encoder-decoder attention, FFN; each post-LN with residual dropout.

    Args: those of :class:`~tf_transformer.layers.encoder.EncoderLayer`; the attention shape
    (``num_heads``, ``key_dim``, ``value_dim``) is the same for the self- and the
    encoder-decoder attention.

    Call arguments:
        x: ``[batch, target_length, d_model]``.
        memory: encoder output ``[batch, source_length, d_model]``.
        self_mask: bool, broadcastable to ``[batch, 1, target_length, target_length]``
            (causal and target padding; ``True`` = may attend). ``None`` (the default): the
            causal mask alone, position ``i`` attending to positions ``j <= i``, as the paper's
            masked self-attention does; a given mask replaces it (pass one that is causal).
        memory_mask: ``[batch, source_length]`` bool, True for real source tokens.
        return_attention_scores: also return ``(self_weights, cross_weights)``.

    Output shape: ``[batch, target_length, d_model]``.

    Example:
        >>> layer = DecoderLayer(num_heads=4, key_dim=8, d_ff=64)
        >>> x, m = keras.random.normal((2, 6, 32)), keras.random.normal((2, 5, 32))
        >>> tuple(layer(x, m).shape)
        (2, 6, 32)
    """

    def make_sublayers(self):
        self.self_attention = self._attention("self_attention")
        self.self_attention_norm = self._norm("self_attention_norm")
        self.cross_attention = self._attention("cross_attention")
        self.cross_attention_norm = self._norm("cross_attention_norm")
        self.ffn = self._ffn()
        self.ffn_norm = self._norm("ffn_norm")
        self.dropout = keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)

    def build(self, x_shape, memory_shape=None):
        memory_shape = memory_shape or x_shape
        self.self_attention.build(x_shape, x_shape)
        self.self_attention_norm.build(x_shape)
        self.cross_attention.build(x_shape, memory_shape)
        self.cross_attention_norm.build(x_shape)
        self.ffn.build(x_shape)
        self.ffn_norm.build(x_shape)
        self.built = True

    def _residual(self, x, y, norm, training):
        return norm(x + self.dropout(y, training=training))

    def _cross_and_ffn(self, x, cross_k, cross_v, memory_mask, training):
        q = self.cross_attention.project_query(x)
        mask = None if memory_mask is None else padding_attention_mask(memory_mask)
        y, weights = self.cross_attention.attend(q, cross_k, cross_v, mask=mask, training=training)
        x = self._residual(x, y, self.cross_attention_norm, training)
        x = self._residual(x, self.ffn(x, training=training), self.ffn_norm, training)
        return x, weights

    def call(self, x, memory, self_mask=None, memory_mask=None, return_attention_scores=False, training=None):
        if self_mask is None:
            self_mask = causal_mask(ops.shape(x)[1])[None, None]
        y, self_weights = self.self_attention(x, x, attention_mask=self_mask, return_attention_scores=True,
                                              training=training)
        x = self._residual(x, y, self.self_attention_norm, training)
        cross_k, cross_v = self.cross_attention.project_key_value(memory)
        x, cross_weights = self._cross_and_ffn(x, cross_k, cross_v, memory_mask, training)
        return (x, (self_weights, cross_weights)) if return_attention_scores else x

    # -- incremental decoding ---------------------------------------------------------
    def init_cache(self, memory, max_length=None):
        """Cache for decoding: cross-attention K/V of ``memory`` (computed once) and the
        self-attention K/V of the positions decoded so far, in one of two layouts:

        * ``max_length`` given (int or int32 scalar tensor): zero-filled buffers of
          ``max_length`` positions, ``self_key`` ``[batch, heads, max_length, d_k]`` and
          ``self_value`` ``[batch, heads, max_length, d_v]``, written in place one position
          per step. Fixed shapes, as XLA (and ``jax.jit``) need.
        * ``max_length=None``: ``prefix_key``/``prefix_value`` ``[batch, heads, 0, d]`` that
          grow by one position per step. Each step then copies, attends over and (in beam
          search) reorders only the positions decoded so far, not ``max_length`` of them:
          the faster layout where shapes may change (TensorFlow graphs, eager).

        Plus ``cross_key``/``cross_value`` ``[batch, heads, source_length, d_k|d_v]``.
        """
        cross_k, cross_v = self.cross_attention.project_key_value(memory)
        batch = ops.shape(memory)[0]
        dtype = cross_k.dtype
        if max_length is None:
            return {
                "prefix_key": ops.zeros((batch, self.num_heads, 0, self.key_dim), dtype),
                "prefix_value": ops.zeros((batch, self.num_heads, 0, self.value_dim), dtype),
                "cross_key": cross_k,
                "cross_value": cross_v,
            }
        return {
            "self_key": ops.zeros((batch, self.num_heads, max_length, self.key_dim), dtype),
            "self_value": ops.zeros((batch, self.num_heads, max_length, self.value_dim), dtype),
            "cross_key": cross_k,
            "cross_value": cross_v,
        }

    def step_weights(self):
        """Weights of :meth:`step` in the form it multiplies by, for a caller to compute once
        per decoding loop rather than once per step: the self-attention's side-by-side
        query/key/value kernel (:meth:`MultiHeadAttention.self_projection`)."""
        return {"self_projection": self.self_attention.self_projection()}

    def step(self, x, cache, step, memory_mask=None, weights=None):
        """Decode one position: ``x`` ``[batch, 1, d_model]`` is the input at ``step``.

        Adds this position's key/value to the self-attention cache (written at index ``step``
        of the fixed buffers, or appended to the growing prefix: see :meth:`init_cache`) and
        attends over positions ``0..step``. ``weights``: :meth:`step_weights` (optional; the
        same result). Returns ``(output [batch, 1, d_model], cache)``.
        """
        attn = self.self_attention
        q, k, v = attn.project_self(x, None if weights is None else weights["self_projection"])
        new_cache = dict(cache)
        if "prefix_key" in cache:
            keys = ops.concatenate([cache["prefix_key"], ops.cast(k, cache["prefix_key"].dtype)], axis=2)
            values = ops.concatenate([cache["prefix_value"], ops.cast(v, cache["prefix_value"].dtype)], axis=2)
            y, _ = attn.attend(q, keys, values)  # every cached position is visible
            new_cache["prefix_key"], new_cache["prefix_value"] = keys, values
        else:
            zero = ops.zeros((), "int32")
            step = ops.cast(step, "int32")
            keys = ops.slice_update(cache["self_key"], (zero, zero, step, zero),
                                    ops.cast(k, cache["self_key"].dtype))
            values = ops.slice_update(cache["self_value"], (zero, zero, step, zero),
                                      ops.cast(v, cache["self_value"].dtype))
            visible = ops.less_equal(ops.arange(ops.shape(keys)[2]), step)[None, None, None, :]
            y, _ = attn.attend(q, keys, values, mask=visible)
            new_cache["self_key"], new_cache["self_value"] = keys, values
        x = self._residual(x, y, self.self_attention_norm, False)
        x, _ = self._cross_and_ffn(x, cache["cross_key"], cache["cross_value"], memory_mask, False)
        return x, new_cache

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape


@keras.saving.register_keras_serializable(package="tf_transformer")
class Decoder(LayerStack):
    """A stack of ``num_layers`` :class:`DecoderLayer` (the paper's N=6) over the encoder's
    memory; the causal mask is built here. Takes the embedded, position-encoded target input
    (embedding dropout applied by the caller) and returns the states the output projection reads.

    Args:
        num_layers: ``N``, the number of layers (the paper: 6).
        num_heads, key_dim, value_dim, d_ff, dropout, attention_dropout, relu_dropout,
            layer_norm_epsilon, attention_bias, qkv_init_gain, attention_init, ffn_init: the settings of
            every :class:`DecoderLayer` (see there).
        **kwargs: ``keras.layers.Layer`` arguments (``name``, ``dtype``...).

    Call arguments:
        x: embedded, position-encoded target input ``[batch, target_length, d_model]``.
        memory: ``[batch, source_length, d_model]``.
        target_padding_mask: ``[batch, target_length]`` bool, True for real tokens; the
            causal mask is always applied on top of it.
        memory_mask: ``[batch, source_length]`` bool, True for real source tokens. As in
            :class:`~tf_transformer.layers.Encoder`, masks are explicit arguments: a Keras mask
            carried by the inputs is not read.
        return_attention_scores: also return a list (one per layer) of
            ``(self_weights, cross_weights)``.

    Output shape: ``[batch, target_length, d_model]``.

    Example:
        >>> dec = Decoder(num_layers=2, num_heads=4, key_dim=8, d_ff=64)
        >>> x, m = keras.random.normal((2, 6, 32)), keras.random.normal((2, 5, 32))
        >>> tuple(dec(x, m).shape)
        (2, 6, 32)
    """

    layer_class = DecoderLayer

    def build(self, x_shape, memory_shape=None):
        for layer in self.layers:
            layer.build(x_shape, memory_shape)
        self.built = True

    def call(self, x, memory, target_padding_mask=None, memory_mask=None, return_attention_scores=False,
             training=None):
        self_mask = causal_mask(ops.shape(x)[1])[None, None]
        if target_padding_mask is not None:
            self_mask = ops.logical_and(self_mask, padding_attention_mask(target_padding_mask))
        all_weights = []
        for layer in self.layers:
            x, weights = layer(x, memory, self_mask=self_mask, memory_mask=memory_mask,
                               return_attention_scores=True, training=training)
            all_weights.append(weights)
        return (x, all_weights) if return_attention_scores else x

    def init_cache(self, memory, max_length=None):
        """Every layer's :meth:`DecoderLayer.init_cache` (same arguments and layouts), keyed
        ``layer_0``, ``layer_1``... for :meth:`step`."""
        return {f"layer_{i}": layer.init_cache(memory, max_length) for i, layer in enumerate(self.layers)}

    def step_weights(self):
        """Each layer's :meth:`DecoderLayer.step_weights`, keyed like the cache."""
        return {f"layer_{i}": layer.step_weights() for i, layer in enumerate(self.layers)}

    def step(self, x, cache, step, memory_mask=None, weights=None):
        """Decode one position through every layer (:meth:`DecoderLayer.step`): ``x``
        ``[batch, 1, d_model]`` is the embedded input at ``step``; returns ``(output [batch, 1,
        d_model], cache)`` with each layer's cache extended by this position. ``weights``:
        :meth:`step_weights` (optional; the same result)."""
        new_cache = {}
        for i, layer in enumerate(self.layers):
            layer_weights = None if weights is None else weights[f"layer_{i}"]
            x, new_cache[f"layer_{i}"] = layer.step(x, cache[f"layer_{i}"], step, memory_mask, layer_weights)
        return x, new_cache

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape
