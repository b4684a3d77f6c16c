"""Greedy decoding on hand-made logits functions."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.decoding.greedy import greedy_search

PAD, BOS, EOS = 0, 2, 3


def chain_fn(V=8):
    # BOS -> 4 -> 5 -> 6 -> EOS, each with probability 0.7 (the rest spread evenly).
    nxt = {BOS: 4, 4: 5, 5: 6, 6: EOS, EOS: EOS}
    table = np.full((V, V), math.log(0.3 / (V - 1)))
    for a, b in nxt.items():
        table[a, b] = math.log(0.7)
    for a in range(V):
        if a not in nxt:
            table[a, EOS] = 0.0
    table = tf.constant(table, tf.float32)
    return lambda ids, step, cache: (tf.gather(table, ids[:, step]), cache)


def test_greedy_follows_argmax_and_pads_after_eos():
    ids, scores = greedy_search(chain_fn(), tf.constant([BOS, BOS]), {}, max_decode_length=8, eos_id=EOS)
    np.testing.assert_array_equal(ids.numpy()[0], [BOS, 4, 5, 6, EOS, PAD, PAD, PAD, PAD])
    assert scores.numpy()[0] == pytest.approx(4 * math.log(0.7), abs=1e-5)


def test_greedy_per_sentence_limit_and_dynamic_length():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int32)])
    def run(lengths, L):
        return greedy_search(chain_fn(), tf.fill(tf.shape(lengths), BOS), {}, L, EOS, max_lengths=lengths)

    ids, scores = run(tf.constant([2, 6, 1]), tf.constant(6))
    ids = ids.numpy()
    np.testing.assert_array_equal(ids[0], [BOS, 4, 5, PAD, PAD, PAD, PAD])
    np.testing.assert_array_equal(ids[1], [BOS, 4, 5, 6, EOS, PAD, PAD])
    np.testing.assert_array_equal(ids[2], [BOS, 4, PAD, PAD, PAD, PAD, PAD])
    assert scores.numpy()[0] == pytest.approx(2 * math.log(0.7), abs=1e-5)


def test_greedy_xla():
    run = tf.function(lambda b: greedy_search(chain_fn(), b, {}, 8, EOS), jit_compile=True)
    ids, _ = run(tf.constant([BOS, BOS, BOS]))
    np.testing.assert_array_equal(ids.numpy()[:, :5], [[BOS, 4, 5, 6, EOS]] * 3)
