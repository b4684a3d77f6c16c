"""Tiny synthetic tasks and configs for tests and quick experiments (no vocabulary needed).

``copy``/``reverse`` tasks over ids ``4..vocab_size-1`` with the project's conventions
(pad 0, BOS 2, EOS 3): ``target_input = BOS + y``, ``target_output = y + EOS``.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from tf_transformer.config import Config

PAD, BOS, EOS = 0, 2, 3

ELEMENT_SPEC = (
    (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32)),
    tf.TensorSpec([None, None], tf.int32),
)


def make_batch(sentences, task: str = "reverse"):
    """Pad ``sentences`` (lists of ids >= 4) into one ``((src, tgt_in), tgt_out)`` batch."""
    n = len(sentences)
    s_len = max(len(s) for s in sentences)
    src = np.zeros((n, s_len), np.int32)
    tin = np.zeros((n, s_len + 1), np.int32)
    tout = np.zeros((n, s_len + 1), np.int32)
    for i, s in enumerate(sentences):
        y = list(s[::-1]) if task == "reverse" else list(s)
        src[i, : len(s)] = s
        tin[i, : len(y) + 1] = [BOS] + y
        tout[i, : len(y) + 1] = y + [EOS]
    return (src, tin), tout


def random_sentences(count: int, vocab_size: int, min_len: int = 2, max_len: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [list(rng.integers(4, vocab_size, size=int(rng.integers(min_len, max_len + 1))))
            for _ in range(count)]


def task_batches(num_batches: int, sentences_per_batch: int, vocab_size: int, task: str = "reverse",
                 seed: int = 0, min_len: int = 2, max_len: int = 8):
    """A fixed list of padded batches of a copy/reverse task."""
    sentences = random_sentences(num_batches * sentences_per_batch, vocab_size, min_len, max_len, seed)
    return [make_batch(sentences[i * sentences_per_batch:(i + 1) * sentences_per_batch], task)
            for i in range(num_batches)]


def dataset_fn(batches, repeat: bool = True, per_replica: Optional[list] = None):
    """A ``function(InputContext) -> tf.data.Dataset`` serving ``batches`` in order (forever
    when ``repeat``). With ``per_replica`` (a list per replica of batch lists), replica ``r``
    of a one-worker strategy dequeues ``per_replica[r]`` (the pipeline interleaves them)."""

    def fn(context: tf.distribute.InputContext):
        if per_replica is not None:
            order = [b for step in zip(*per_replica) for b in step]
        else:
            order = list(batches)

        def gen():
            while True:
                yield from order
                if not repeat:
                    return

        return tf.data.Dataset.from_generator(gen, output_signature=ELEMENT_SPEC)

    return fn


def tiny_config(vocab_size: int = 16, model_dir: str = "runs/tiny", **train) -> Config:
    """A 2+2-layer, d_model 32 model without dropout; ``train`` overrides TrainConfig fields."""
    cfg = Config()
    cfg.name = "tiny"
    m = cfg.model
    m.vocab_size, m.d_model, m.num_layers, m.num_heads, m.d_ff, m.dropout = vocab_size, 32, 2, 4, 64, 0.0
    m.max_length = 64
    cfg.data.tokens_per_batch = 256
    cfg.data.max_length = 32
    t = cfg.train
    t.train_steps, t.steps_per_epoch, t.warmup_steps, t.learning_rate_scale = 100, 50, 30, 1.0
    t.label_smoothing, t.model_dir, t.strategy = 0.0, model_dir, "default"
    t.checkpoint_every_minutes, t.keep_checkpoints = 60.0, 5
    for key, value in train.items():
        setattr(t, key, value)
    return cfg


def max_abs_difference(a, b) -> float:
    """The largest absolute difference between two lists of weight arrays, pair by pair."""
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b))
