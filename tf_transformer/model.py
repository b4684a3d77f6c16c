"""The Transformer encoder-decoder as a ``keras.Model`` (paper section 3).

Written with ``keras.ops`` only: ``import tf_transformer.model`` needs no TensorFlow and the
model runs on any Keras 3 backend (the GPU benchmark runs it under JAX).

Training::

    model = Transformer.from_config_section(load_config("multi30k_small").model)
    logits = model((source_ids, target_input_ids))        # [batch, target_length, vocab]

Decoding (what beam search calls)::

    memory, source_mask = model.encode(source_ids)
    cache = model.init_cache(memory, source_mask, max_length)
    logits, cache = model.decode_step(token_ids, step, cache)   # logits [batch, vocab]
"""

from __future__ import annotations

import dataclasses
import importlib
import numbers

import keras
from keras import ops

from tf_transformer.layers.decoder import Decoder
from tf_transformer.layers.embedding import (
    LearnedPositionalEmbedding,
    SharedEmbedding,
    SinusoidalPositionalEncoding,
)
from tf_transformer.layers.encoder import Encoder

MODEL_FIELDS = (
    "vocab_size", "d_model", "num_layers", "num_heads", "key_dim", "value_dim", "d_ff", "dropout",
    "attention_dropout", "relu_dropout", "source_word_dropout", "target_word_dropout", "position_encoding",
    "max_length", "layer_norm_epsilon", "attention_bias", "qkv_init_gain", "attention_init", "ffn_init", "pad_id",
)


@keras.saving.register_keras_serializable(package="tf_transformer")
class Transformer(keras.Model):
    """Encoder-decoder Transformer with one shared embedding / softmax table.

    Args:
        vocab_size: size of the shared vocabulary.
        d_model: model width (512 base, 1024 big).
        num_layers: ``N``, layers in each of the encoder and the decoder.
        num_heads: ``h``.
        key_dim: ``d_k``; default ``d_model // num_heads``.
        value_dim: ``d_v``; default ``d_model // num_heads``.
        d_ff: FFN inner size.
        dropout: ``P_drop``: residual dropout and dropout on embeddings + positions.
        attention_dropout, relu_dropout: optional extra dropouts (0 in the paper).
        source_word_dropout, target_word_dropout: word dropout (not in the paper; Sennrich
            et al., WMT 2016; Sennrich and Zhang, ACL 2019): in training, each source (target
            input) token's embedding is zeroed with this probability before the positions are
            added, the kept ones scaled by ``1 / (1 - rate)``; the position and the padding
            mask stay. 0 (the default) adds no layer.
        position_encoding: ``"sinusoidal"`` (the paper) or ``"learned"`` (Table 3 row E).
        max_length: positions of the learned table (unused by sinusoids).
        layer_norm_epsilon: LayerNorm epsilon.
        attention_bias: biases on the attention projections (none in the paper).
        qkv_init_gain: Glorot-uniform gain of the query, key and value kernels.
        attention_init: ``"independent"`` or ``"tied_qk"`` (``W^K`` starts equal to ``W^Q``).
        ffn_init: ``"glorot_uniform"`` or ``"fan_in_uniform"`` (fairseq's FFN start); see
            :class:`~tf_transformer.layers.PositionwiseFeedForward`.
        pad_id: the padding id; padded positions are masked everywhere.

    Call: ``model((source_ids, target_input_ids), training=False)`` with int ids
    ``[batch, source_length]`` and ``[batch, target_length]`` -> float32 logits
    ``[batch, target_length, vocab_size]`` (float32 also under mixed precision).

    Example:
        >>> model = Transformer(vocab_size=100, d_model=32, num_layers=2, num_heads=4, d_ff=64)
        >>> src = keras.ops.array([[5, 6, 7, 0]]); tgt = keras.ops.array([[2, 8, 9]])
        >>> tuple(model((src, tgt)).shape)
        (1, 3, 100)
    """

    def __init__(self, vocab_size, d_model=512, num_layers=6, num_heads=8, key_dim=None, value_dim=None,
                 d_ff=2048, dropout=0.1, attention_dropout=0.0, relu_dropout=0.0,
                 source_word_dropout=0.0, target_word_dropout=0.0,
                 position_encoding="sinusoidal", max_length=512, layer_norm_epsilon=1e-6,
                 attention_bias=False, qkv_init_gain=1.0, attention_init="independent", ffn_init="glorot_uniform",
                 pad_id=0, **kwargs):
        super().__init__(**kwargs)
        if position_encoding not in ("sinusoidal", "learned"):
            raise ValueError(f"position_encoding={position_encoding!r} is not one of 'sinusoidal', 'learned'")
        for name, value in (("vocab_size", vocab_size), ("d_model", d_model), ("num_layers", num_layers),
                            ("num_heads", num_heads), ("d_ff", d_ff)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r}: expected a positive integer")
        if key_dim is None or value_dim is None:
            if d_model % num_heads:
                raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads} "
                                 "(key_dim/value_dim are derived as d_model/num_heads)")
        self.vocab_size = int(vocab_size)
        self.d_model = int(d_model)
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim) if key_dim is not None else self.d_model // self.num_heads
        self.value_dim = int(value_dim) if value_dim is not None else self.d_model // self.num_heads
        self.d_ff = int(d_ff)
        self.dropout_rate = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.relu_dropout = float(relu_dropout)
        self.source_word_dropout = float(source_word_dropout)
        self.target_word_dropout = float(target_word_dropout)
        for name in ("source_word_dropout", "target_word_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}={getattr(self, name)!r}: expected a probability in [0, 1)")
        self.position_encoding = position_encoding
        self.max_length = int(max_length)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.attention_bias = bool(attention_bias)
        self.qkv_init_gain = float(qkv_init_gain)
        self.attention_init = attention_init
        self.ffn_init = ffn_init
        self.pad_id = int(pad_id)

        policy = self.dtype_policy
        self.embedding = SharedEmbedding(self.vocab_size, self.d_model, name="shared_embedding", dtype=policy)
        if position_encoding == "sinusoidal":
            self.positions = SinusoidalPositionalEncoding(name="positions", dtype=policy)
        else:
            self.positions = LearnedPositionalEmbedding(self.max_length, name="positions", dtype=policy)
        self.embedding_dropout = keras.layers.Dropout(self.dropout_rate, name="embedding_dropout", dtype=policy)
        # one draw per token, broadcast over the width: whole embeddings are dropped. Built
        # only when used, so a model without word dropout has the same seed generators (and
        # resumes the same backups) as before the option existed
        self.source_word_drop, self.target_word_drop = (
            keras.layers.Dropout(rate, noise_shape=(None, None, 1), name=name, dtype=policy) if rate else None
            for rate, name in ((self.source_word_dropout, "source_word_dropout"),
                               (self.target_word_dropout, "target_word_dropout")))
        stack = dict(num_layers=self.num_layers, num_heads=self.num_heads, key_dim=self.key_dim,
                     value_dim=self.value_dim, d_ff=self.d_ff, dropout=self.dropout_rate,
                     attention_dropout=self.attention_dropout, relu_dropout=self.relu_dropout,
                     layer_norm_epsilon=self.layer_norm_epsilon, attention_bias=self.attention_bias,
                     qkv_init_gain=self.qkv_init_gain, attention_init=self.attention_init,
                     ffn_init=self.ffn_init, dtype=policy)
        self.encoder = Encoder(name="encoder", **stack)
        self.decoder = Decoder(name="decoder", **stack)

    # -- construction -----------------------------------------------------------------
    @classmethod
    def from_config_section(cls, model_config, **kwargs):
        """Build from a :class:`tf_transformer.config.ModelConfig` (``vocab_size`` must be set)."""
        values = dataclasses.asdict(model_config)
        if values.get("vocab_size") is None:
            raise ValueError("model.vocab_size is not set (it comes from the vocabulary)")
        return cls(**values, **kwargs)

    def build(self, input_shape=None):
        width = (None, None, self.d_model)
        self.embedding.build()
        self.positions.build(width)
        self.embedding_dropout.build(width)
        for layer in (self.source_word_drop, self.target_word_drop):
            if layer is not None:
                layer.build(width)
        self.encoder.build(width)
        self.decoder.build(width, width)
        self.built = True

    def get_config(self):
        config = super().get_config()
        config.update({name: getattr(self, name if name != "dropout" else "dropout_rate") for name in MODEL_FIELDS})
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    @property
    def config(self):
        """The :class:`tf_transformer.config.ModelConfig` of this model."""
        from tf_transformer.config import ModelConfig

        return ModelConfig(**{n: getattr(self, n if n != "dropout" else "dropout_rate") for n in MODEL_FIELDS})

    # -- forward ----------------------------------------------------------------------
    def embed(self, ids, start_index=0, training=None, word_dropout=None):
        """Shared-table lookup scaled by sqrt(d_model), plus positions, plus dropout
        (``word_dropout``, a layer, first drops whole token embeddings)."""
        x = self.embedding(ids)
        if word_dropout is not None:
            x = word_dropout(x, training=training)
        x = self.positions(x, start_index=start_index)
        return self.embedding_dropout(x, training=training)

    def padding_mask(self, ids):
        """``[batch, length]`` bool, True where ``ids != pad_id``."""
        return ops.not_equal(ids, self.pad_id)

    def encode(self, source_ids, training=None, return_attention_scores=False):
        """``source_ids [batch, source_length]`` -> ``(memory [batch, source_length, d_model],
        source_mask [batch, source_length] bool)`` (plus per-layer weights if asked)."""
        source_mask = self.padding_mask(source_ids)
        out = self.encoder(self.embed(source_ids, training=training, word_dropout=self.source_word_drop),
                           padding_mask=source_mask,
                           return_attention_scores=return_attention_scores, training=training)
        if return_attention_scores:
            memory, weights = out
            return memory, source_mask, weights
        return out, source_mask

    def decoder_states(self, target_input_ids, memory, source_mask, training=None, return_attention_scores=False):
        """Full (teacher-forced) decoder pass -> the decoder's output ``[batch, target_length,
        d_model]`` (compute dtype) before the tied projection (plus per-layer weights if asked)."""
        embedded = self.embed(target_input_ids, training=training, word_dropout=self.target_word_drop)
        return self.decoder(embedded, memory,
                            target_padding_mask=self.padding_mask(target_input_ids), memory_mask=source_mask,
                            return_attention_scores=return_attention_scores, training=training)

    def decode(self, target_input_ids, memory, source_mask, training=None, return_attention_scores=False):
        """Full (teacher-forced) decoder pass -> float32 logits ``[batch, target_length, vocab]``."""
        out = self.decoder_states(target_input_ids, memory, source_mask, training=training,
                                  return_attention_scores=return_attention_scores)
        hidden, weights = out if return_attention_scores else (out, None)
        logits = ops.cast(self.embedding.logits(hidden), "float32")
        return (logits, weights) if return_attention_scores else logits

    @staticmethod
    def _pair(inputs):
        if not isinstance(inputs, (tuple, list)) or len(inputs) != 2:
            shape = getattr(inputs, "shape", None)
            raise ValueError("a Transformer is called on a pair (source_ids [batch, source_length], "
                             "target_input_ids [batch, target_length]), got "
                             + (f"one tensor of shape {tuple(shape)}" if shape is not None else repr(type(inputs))))
        return inputs

    def call(self, inputs, training=None):
        source_ids, target_input_ids = self._pair(inputs)
        memory, source_mask = self.encode(source_ids, training=training)
        return self.decode(target_input_ids, memory, source_mask, training=training)

    def hidden_states(self, inputs, training=None):
        """``(source_ids, target_input_ids)`` -> :meth:`decoder_states` of the encoded source:
        ``call`` is ``embedding.logits(hidden_states(...))`` cast to float32. The trainer feeds it
        with the table to :func:`tf_transformer.training.losses.tied_head_statistics`, which
        never materializes more than the softmax of the logits."""
        source_ids, target_input_ids = self._pair(inputs)
        memory, source_mask = self.encode(source_ids, training=training)
        return self.decoder_states(target_input_ids, memory, source_mask, training=training)

    @property
    def output_table(self):
        """The ``[vocab_size, d_model]`` table of the pre-softmax projection (shared with both
        embeddings, paper section 3.4): ``logits = hidden_states @ output_table^T``."""
        return self.embedding.embeddings

    def attention_weights(self, source_ids, target_input_ids):
        """All attention weights of one inference pass, for plots.

        Returns a dict with ``encoder_self``, ``decoder_self`` and ``decoder_cross``: lists (one
        per layer) of ``[batch, heads, query_length, key_length]`` float32 arrays whose rows sum to 1.
        """
        memory, source_mask, enc = self.encode(source_ids, training=False, return_attention_scores=True)
        _, dec = self.decode(target_input_ids, memory, source_mask, training=False, return_attention_scores=True)
        return {"encoder_self": enc, "decoder_self": [w[0] for w in dec], "decoder_cross": [w[1] for w in dec]}

    def translate(self, texts, tokenizer, beam_size: int = 4, alpha: float = 0.6, max_extra_length: int = 50,
                  batch_size: int = 64, stop_rule: str = "bound", n_best: int = 1):
        """Translate ``texts`` (a list of strings, or one string) with this model and its
        ``tokenizer`` (a :class:`tf_transformer.data.Tokenizer`): beam search as the paper
        (``beam_size=1``: greedy). ``stop_rule``: when beam search stops a sentence, as
        ``decode.stop_rule`` and ``tft translate --stop-rule`` (``"bound"``, the exact early
        stop, or ``"beam_finished"``). Returns the translations (``n_best > 1``: a list of
        up to ``n_best``, best first, per text). See :func:`tf_transformer.decoding.translate`."""
        # The decoding layer sits above this module (and needs TensorFlow): it is found at run
        # time, so that importing the model stays keras.ops-only.
        decoding = importlib.import_module("tf_transformer.decoding.translator")
        return decoding.translate(self, texts, tokenizer, beam_size=beam_size, alpha=alpha,
                                  max_extra_length=max_extra_length, batch_size=batch_size, stop_rule=stop_rule,
                                  n_best=n_best)

    # -- incremental decoding ---------------------------------------------------------
    def init_cache(self, memory, source_mask, max_length=None):
        """Decoding state for up to ``max_length`` output positions.

        A dict of batch-major tensors: ``source_mask`` ``[batch, source_length]`` and, per
        decoder layer, the cross-attention keys/values of ``memory`` (computed once here) and
        the self-attention keys/values that :meth:`decode_step` adds one position per step.
        With ``max_length``, those are preallocated ``[batch, heads, max_length, d]`` buffers:
        fixed shapes, as an XLA-compiled (or ``jax.jit``) decoding loop needs. With
        ``max_length=None`` they start empty and grow by one position per step, so a step
        costs what the prefix decoded so far costs (the faster choice where shapes may change;
        see :meth:`tf_transformer.layers.decoder.DecoderLayer.init_cache`).
        """
        cache = self.decoder.init_cache(memory, max_length)  # int or int32 scalar tensor
        cache["source_mask"] = source_mask
        return cache

    def step_weights(self):
        """The weights of :meth:`decode_step` in the layout it multiplies by (the decoder
        layers' side-by-side query/key/value kernels, the transposed output table). A decoding
        loop computes them once, outside the loop, and passes them to every step; without
        them each step rebuilds them from the variables. The outputs are the same."""
        if not self.built:
            self.build()
        return {"decoder": self.decoder.step_weights(), "output_kernel": self.embedding.output_kernel()}

    def decode_step(self, token_ids, step, cache, weights=None):
        """One decoder position.

        Args:
            token_ids: ``[batch]`` int, the decoder input at position ``step`` (BOS at 0).
            step: int32 scalar (tensor or int), the position being decoded.
            cache: from :meth:`init_cache` or the previous ``decode_step``.
            weights: optional, :meth:`step_weights` (computed once per decoding loop).

        Returns:
            ``(logits [batch, vocab] float32, new_cache)``; the logits equal
            ``model((source, target_input))[:, step]`` for the same prefix.
        """
        x = self.embed(ops.expand_dims(token_ids, 1), start_index=step, training=False)
        layer_cache = {k: v for k, v in cache.items() if k != "source_mask"}
        hidden, new_cache = self.decoder.step(x, layer_cache, step, cache["source_mask"],
                                              None if weights is None else weights["decoder"])
        new_cache["source_mask"] = cache["source_mask"]
        kernel = None if weights is None else weights["output_kernel"]
        logits = ops.cast(self.embedding.logits(hidden[:, 0], kernel), "float32")
        return logits, new_cache


def as_transformer(model):
    """``model`` itself if it is a :class:`Transformer` (or anything that decodes like one),
    else the Transformer it wraps (``TrainingModel.transformer``: what ``tft tune``'s and
    Keras Tuner's ``get_best_models()`` return)."""
    if hasattr(model, "decode_step"):
        return model
    inner = getattr(model, "transformer", None)
    if inner is not None and hasattr(inner, "decode_step"):
        return inner
    raise TypeError(f"{type(model).__name__} is neither a tf_transformer Transformer nor a model wrapping one "
                    "(expected .decode_step or .transformer)")


def count_parameters(model) -> int:
    """Number of scalars in the model's weights (trainable and not)."""
    import numpy as np

    return int(sum(int(np.prod(w.shape)) for w in model.weights))
