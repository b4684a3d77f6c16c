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


def first_token_table(V=6):
    """After BOS: fixed logits over the tokens; after any other token: EOS."""
    logits = np.array([-30.0, -30.0, -30.0, 0.5, 1.5, 1.0][:V])  # pad, unk, BOS never; EOS, 4, 5
    table = np.full((V, V), -30.0)
    table[BOS] = logits
    table[:, EOS] = np.where(np.arange(V) == BOS, logits[EOS], 0.0)
    return tf.constant(table, tf.float32), logits


def softmax(x):
    e = np.exp(x - np.max(x))
    return e / e.sum()


@pytest.mark.parametrize("top_k, temperature", [(0, 1.0), (0, 0.5), (2, 1.0), (2, 2.0)])
def test_sampling_draws_from_the_tempered_top_k_distribution(top_k, temperature):
    """20,000 first tokens drawn in one batch: their frequencies are softmax(logits / T) over
    the top_k tokens (within 4 standard errors); the score is the model's own log-probability
    of what was drawn (temperature 1, whole vocabulary); the same seed draws the same tokens,
    another seed others; BOS is never drawn."""
    table, logits = first_token_table()
    fn = lambda ids, step, cache: (tf.gather(table, ids[:, step]), cache)  # noqa: E731
    n = 20_000
    run = lambda seed: greedy_search(fn, tf.fill([n], BOS), {}, max_decode_length=3, eos_id=EOS,  # noqa: E731
                                     never_ids=(PAD, BOS), sample=True, top_k=top_k, temperature=temperature,
                                     seed=seed)
    ids, scores = run((7, 0))
    first = ids.numpy()[:, 1]
    want = np.zeros(6)
    allowed = np.argsort(-logits)[: top_k or 6]
    want[allowed] = softmax(logits[allowed] / temperature)
    got = np.bincount(first, minlength=6) / n
    np.testing.assert_allclose(got, want, atol=4 * np.sqrt(0.25 / n))
    assert set(np.unique(first)) <= set(allowed.tolist()) and BOS not in first
    model = np.log(softmax(table.numpy()[BOS]))
    then_eos = np.log(softmax(table.numpy()[4]))[EOS]  # after 4 or 5, EOS (nearly) surely
    expected = np.where(first == EOS, model[EOS], model[first] + then_eos)
    np.testing.assert_allclose(scores.numpy(), expected, atol=1e-4)
    np.testing.assert_array_equal(run((7, 0))[0].numpy(), ids.numpy())
    assert (run((8, 0))[0].numpy()[:, 1] != first).mean() > 0.2


def test_sampling_settings_are_checked():
    table, _ = first_token_table()
    fn = lambda ids, step, cache: (tf.gather(table, ids[:, step]), cache)  # noqa: E731
    with pytest.raises(ValueError, match="temperature=0: must be > 0"):
        greedy_search(fn, tf.constant([BOS]), {}, 3, EOS, sample=True, temperature=0)
    with pytest.raises(ValueError, match="top_k=-1: must be >= 0"):
        greedy_search(fn, tf.constant([BOS]), {}, 3, EOS, sample=True, top_k=-1)
