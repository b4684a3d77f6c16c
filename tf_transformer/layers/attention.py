"""Scaled dot-product attention and multi-head attention (paper section 3.2).

Written with ``keras.ops`` only. Masks are boolean with ``True`` = "may attend". Attention
logits are computed in the layer's compute dtype, then the softmax runs in float32 with
masked positions set to a large negative number (-1e9 in float32), so masking is safe under
``mixed_float16`` and ``mixed_bfloat16`` (a float16 logit can never hold -1e9, float32 can).
"""

from __future__ import annotations

import math
import warnings

import keras
from keras import ops

from tf_transformer.layers.linear import leading_shape, linear

MASK_VALUE = -1e9


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None, training=None):
    """``softmax(Q K^T / sqrt(d_k)) V`` over the last two axes.

    Args:
        query: ``[batch, heads, q_length, d_k]``.
        key: ``[batch, heads, k_length, d_k]``.
        value: ``[batch, heads, k_length, d_v]``.
        mask: optional boolean tensor broadcastable to ``[batch, heads, q_length, k_length]``;
            ``True`` where a query may attend to a key.
        dropout: optional ``keras.layers.Dropout`` applied to the attention weights.
        training: passed to ``dropout``.

    Returns:
        ``(output [batch, heads, q_length, d_v], weights [batch, heads, q_length, k_length])``;
        ``weights`` are float32 and every row sums to 1 (a row whose keys are all masked is
        uniform over them rather than NaN).

    Example:
        >>> q = k = v = keras.random.normal((2, 4, 5, 8))
        >>> out, w = scaled_dot_product_attention(q, k, v)
        >>> tuple(out.shape), tuple(w.shape)
        ((2, 4, 5, 8), (2, 4, 5, 5))
    """
    d_k = ops.shape(query)[-1]
    scale = 1.0 / math.sqrt(d_k)
    scores = ops.matmul(query, ops.swapaxes(key, -1, -2))
    scores = ops.cast(scores, "float32") * scale
    if mask is not None:
        scores = ops.where(mask, scores, ops.cast(MASK_VALUE, "float32"))
    if scores.shape[-1] == 1:
        # one key (a length-1 source, the first decoding step): Keras warns that a softmax over
        # one element is constant, which is right here (the weight is 1)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="You are using a softmax over axis")
            weights = ops.softmax(scores, axis=-1)
    else:
        weights = ops.softmax(scores, axis=-1)
    probs = ops.cast(weights, value.dtype)
    if dropout is not None:
        probs = dropout(probs, training=training)
    return ops.matmul(probs, value), weights


def distinct_initializer(initializer, offset):
    """A copy of ``initializer`` for one weight, so that weights of one shape differ.

    Keras' random initializers draw the same values on every call for the same shape, seeded
    or not (an unseeded one fixes a seed when it is made). One instance shared by the query,
    key and value kernels therefore made ``W^Q = W^K = W^V`` at initialisation: every head
    began by attending from each position to the positions most like it. An unseeded
    initializer is copied with a fresh seed (drawn from Python's ``random``, which
    ``keras.utils.set_random_seed`` seeds, so runs stay reproducible); an integer seed is
    shifted by ``offset``. Other initializers (constants, a ``SeedGenerator`` seed, which
    advances on its own) are returned as they are.
    """
    config = initializer.get_config()
    if "seed" not in config:
        return initializer
    seed = config["seed"]
    if seed is None:
        return initializer.__class__.from_config(config)
    if isinstance(seed, int):
        return initializer.__class__.from_config({**config, "seed": seed + offset})
    return initializer


class AttentionScoresSpec:
    """Mixin: symbolic calls with ``return_attention_scores=True`` (a functional model's
    ``keras.Input``) get their output structure by tracing ``call``.

    ``compute_output_shape`` describes the plain output only; with scores requested the output
    is a nested structure (a tensor and its weights, or lists of them per layer), which Keras
    would otherwise try to build from that single shape.
    """

    def compute_output_spec(self, *args, **kwargs):
        if kwargs.get("return_attention_scores"):
            return keras.Operation.compute_output_spec(self, *args, **kwargs)
        return super().compute_output_spec(*args, **kwargs)


@keras.saving.register_keras_serializable(package="tf_transformer")
class MultiHeadAttention(AttentionScoresSpec, keras.layers.Layer):
    """Multi-head attention with independent ``key_dim`` (d_k) and ``value_dim`` (d_v).

    **Not a drop-in for** ``keras.layers.MultiHeadAttention`` (same name, other semantics):

    * call: ``(query, value=None, attention_mask=None, return_attention_scores=False)``; keys
      and values both come from ``value`` (``query`` when omitted: self-attention). Keras'
      layer is called ``(query, value, key=None, ...)`` with ``value`` required.
    * no projection biases by default (``use_bias=False``); Keras' layer has them by default.
    * ``attention_mask`` may carry a heads axis (``[batch, heads, q, k]``) besides
      ``[batch, q, k]``; the softmax runs in float32 with masked logits at -1e9 and the
      returned weights are float32 whatever the compute dtype.
    * the output size is ``output_dim`` (default: the query's last dimension), not
      ``output_shape``.

    It also exposes the pieces the incremental decoder uses (``project_query``,
    ``project_key_value``, ``attend``, ``combine_heads``).

    ``MultiHead(Q, K, V) = Concat(head_1..head_h) W^O`` with
    ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``. Every head sees the whole
    ``d_model`` input. As in the paper's equations (and tensor2tensor), the four
    projections have no bias by default.

    Args:
        num_heads: ``h``.
        key_dim: ``d_k``, size of each head's queries and keys.
        value_dim: ``d_v``, size of each head's values; defaults to ``key_dim``.
        output_dim: size of the output; defaults to the query's last dimension.
        dropout: dropout rate on the attention weights (0 in the paper).
        use_bias: add biases (initialised to zero) to the four projections.
        kernel_initializer: initializer of the query, key and value kernels.
        output_kernel_initializer: initializer of ``W^O``; defaults to ``kernel_initializer``.
        tie_query_key_init: start ``W^K`` as a copy of ``W^Q`` (they train apart). Then
            ``W^Q W^K^T = W W^T``, close to a multiple of the identity for a Glorot-uniform
            square ``W``, so each head starts out attending to the keys most like its query.

    Call arguments:
        query: ``[batch, q_length, d_model]``.
        value: ``[batch, k_length, d_model]`` (keys and values come from it); defaults to
            ``query`` (self-attention).
        attention_mask: boolean, ``True`` = may attend: rank 3, ``[batch, q_length, k_length]``,
            or rank 4, ``[batch, heads, q_length, k_length]``, where axes of size 1 broadcast
            (``causal_mask(T)[None]``, ``padding[:, None, :]``). A rank-2 mask is refused: a
            ``[q_length, k_length]`` and a ``[batch, k_length]`` mask cannot be told apart.
        return_attention_scores: also return the ``[batch, heads, q_length, k_length]``
            weights.

    Output shape: ``[batch, q_length, output_dim]``.

    Example:
        >>> mha = MultiHeadAttention(num_heads=8, key_dim=64)
        >>> x = keras.random.normal((2, 10, 512))
        >>> tuple(mha(x).shape)
        (2, 10, 512)
    """

    def __init__(self, num_heads, key_dim, value_dim=None, output_dim=None, dropout=0.0,
                 use_bias=False, kernel_initializer="glorot_uniform", output_kernel_initializer=None,
                 tie_query_key_init=False, **kwargs):
        super().__init__(**kwargs)
        for name, value in (("num_heads", num_heads), ("key_dim", key_dim), ("value_dim", value_dim),
                            ("output_dim", output_dim)):
            if value is not None and int(value) < 1:
                raise ValueError(f"{self.name}: {name}={value} must be >= 1")
        if not 0.0 <= float(dropout) < 1.0:
            raise ValueError(f"{self.name}: dropout={dropout} must be in [0, 1)")
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim)
        self.value_dim = int(value_dim) if value_dim is not None else self.key_dim
        self.output_dim = output_dim
        self.dropout_rate = float(dropout)
        self.use_bias = bool(use_bias)
        self.tie_query_key_init = bool(tie_query_key_init)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_kernel_initializer = keras.initializers.get(
            output_kernel_initializer if output_kernel_initializer is not None else kernel_initializer)
        self.attention_dropout = (keras.layers.Dropout(self.dropout_rate, dtype=self.dtype_policy)
                                  if self.dropout_rate else None)

    def build(self, query_shape, value_shape=None):
        for what, shape in (("query", query_shape), ("value", value_shape)):
            if shape is not None and (len(shape) != 3 or shape[-1] is None):
                raise ValueError(f"{self.name}: {what} must be [batch, length, features] with a known feature "
                                 f"size, got shape {tuple(shape)}")
        d_query = query_shape[-1]
        d_value = (value_shape or query_shape)[-1]
        out = self.output_dim or d_query
        h, dk, dv = self.num_heads, self.key_dim, self.value_dim

        def dense(name, d_in, d_out, initializer=self.kernel_initializer):
            kernel = self.add_weight(name=f"{name}_kernel", shape=(d_in, d_out),
                                     initializer=distinct_initializer(initializer, len(self.weights)))
            bias = (self.add_weight(name=f"{name}_bias", shape=(d_out,), initializer="zeros")
                    if self.use_bias else None)
            return kernel, bias

        self.query_kernel, self.query_bias = dense("query", d_query, h * dk)
        self.key_kernel, self.key_bias = dense("key", d_value, h * dk)
        if self.tie_query_key_init:
            if d_query != d_value:
                raise ValueError(f"tie_query_key_init needs queries and keys of one width, got {d_query} and {d_value}")
            self.key_kernel.assign(self.query_kernel)
        self.value_kernel, self.value_bias = dense("value", d_value, h * dv)
        self.output_kernel, self.output_bias = dense("output", h * dv, out, self.output_kernel_initializer)
        self.built = True

    # -- pieces, also used by the incremental decoder ----------------------------------
    def _project(self, x, kernel, bias, depth):
        y = ops.reshape(linear(x, kernel, bias, lead="rows"), (*leading_shape(x, 2), self.num_heads, depth))
        return ops.transpose(y, (0, 2, 1, 3))  # [batch, heads, length, depth]

    def project_query(self, query):
        """``[batch, q, d_model]`` -> ``[batch, heads, q, d_k]``."""
        return self._project(query, self.query_kernel, self.query_bias, self.key_dim)

    def project_key_value(self, value):
        """``[batch, k, d_model]`` -> keys ``[batch, heads, k, d_k]``, values ``[batch, heads, k, d_v]``."""
        return (self._project(value, self.key_kernel, self.key_bias, self.key_dim),
                self._project(value, self.value_kernel, self.value_bias, self.value_dim))

    def combine_heads(self, context):
        """``[batch, heads, q, d_v]`` -> ``[batch, q, output_dim]`` through ``W^O``."""
        lead = leading_shape(context, (0, 2))
        x = ops.reshape(ops.transpose(context, (0, 2, 1, 3)), (-1, self.num_heads * self.value_dim))
        y = linear(x, self.output_kernel, self.output_bias)
        return ops.reshape(y, (*lead, y.shape[-1]))

    def attend(self, query, key, value, mask=None, training=None):
        """Attention of projected query heads over projected ``key``/``value`` heads.

        ``mask``: boolean ``[batch, q_length, k_length]`` or ``[batch, heads, q_length, k_length]``
        (either with axes of size 1 that broadcast); ``True`` = may attend.
        """
        if mask is not None:
            if len(mask.shape) == 3:
                mask = ops.expand_dims(mask, 1)
            elif len(mask.shape) != 4:
                # a [batch, k] padding mask would broadcast against the query axis when
                # batch == q_length and silently mask the wrong keys
                raise ValueError(
                    f"{self.name}: attention_mask must be [batch, q_length, k_length] or [batch, heads, "
                    f"q_length, k_length] (True = may attend), got shape {tuple(mask.shape)}; a padding mask "
                    "[batch, k_length] of real tokens becomes mask[:, None, :], a [q_length, k_length] mask "
                    "(e.g. causal_mask(length)) mask[None]")
        context, weights = scaled_dot_product_attention(
            query, key, value, mask=mask, dropout=self.attention_dropout, training=training)
        return self.combine_heads(context), weights

    def self_projection(self):
        """``(kernel [d_model, 2*h*d_k + h*d_v], bias or None)``: the query, key and value
        projections side by side, as :meth:`project_self` multiplies by them."""
        kernel = ops.concatenate([self.query_kernel, self.key_kernel, self.value_kernel], axis=1)
        bias = ops.concatenate([self.query_bias, self.key_bias, self.value_bias]) if self.use_bias else None
        return kernel, bias

    def project_self(self, x, projection=None):
        """Self-attention projections in one matmul: ``x`` -> ``(q, k, v)`` heads.

        The three kernels are concatenated on the fly (one ``[d_model, 2*h*d_k + h*d_v]``
        matmul is faster than three narrow ones on CPU and GPU alike); the weights stay
        separate so checkpoints and Table 3's independent ``d_k``/``d_v`` are unaffected.
        ``projection``: :meth:`self_projection`'s result, computed once by a caller that
        projects many times with the same weights (the incremental decoder: once per
        sentence batch instead of once per step); the values are the same.
        """
        kernel, bias = projection if projection is not None else self.self_projection()
        lead = leading_shape(x, 2)
        y = linear(x, kernel, bias, lead="rows")  # [batch * length, 2 h d_k + h d_v]
        hk = self.num_heads * self.key_dim

        def heads(part, depth):
            return ops.transpose(ops.reshape(part, (*lead, self.num_heads, depth)), (0, 2, 1, 3))

        # split, not slicing: the gradient of a split is one concatenation, while each strided
        # slice's gradient writes a zero-filled [batch, length, 3 h d] buffer
        q, k, v = ops.split(y, [hk, 2 * hk], axis=-1)
        return heads(q, self.key_dim), heads(k, self.key_dim), heads(v, self.value_dim)

    def call(self, query, value=None, attention_mask=None, return_attention_scores=False, training=None):
        for what, x, kernel in (("query", query, self.query_kernel), ("value", value, self.key_kernel)):
            if x is not None and x.shape[-1] is not None and x.shape[-1] != kernel.shape[0]:
                raise ValueError(f"{self.name}: {what} has {x.shape[-1]} features but the layer was built "
                                 f"for {kernel.shape[0]} (shape {tuple(x.shape)})")
        if value is None or value is query:
            q, k, v = self.project_self(query)
        else:
            q = self.project_query(query)
            k, v = self.project_key_value(value)
        output, weights = self.attend(q, k, v, mask=attention_mask, training=training)
        if return_attention_scores:
            return output, weights
        return output

    def compute_output_shape(self, query_shape, value_shape=None):
        return tuple(query_shape[:-1]) + (self.output_dim or query_shape[-1],)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            output_dim=self.output_dim,
            dropout=self.dropout_rate,
            use_bias=self.use_bias,
            tie_query_key_init=self.tie_query_key_init,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            output_kernel_initializer=keras.initializers.serialize(self.output_kernel_initializer),
        )
        return config
