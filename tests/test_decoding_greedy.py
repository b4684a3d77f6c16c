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
    # sampling's hash, nucleus and inverse-CDF draw compile too, and draw the same tokens
    table = tf.constant(np.random.default_rng(0).normal(size=(8, 8)), tf.float32)
    fn = lambda ids, step, cache: (tf.gather(table, ids[:, step]), cache)  # noqa: E731
    draw = dict(sample=True, top_k=5, top_p=0.8, seed=(1, 2), never_ids=(PAD, BOS))
    compiled = tf.function(lambda b: greedy_search(fn, b, {}, 6, EOS, **draw), jit_compile=True)
    want = greedy_search(fn, tf.fill([16], BOS), {}, 6, EOS, **draw)[0].numpy()
    np.testing.assert_array_equal(compiled(tf.fill([16], BOS))[0].numpy(), want)
    assert len({tuple(row) for row in want}) > 4  # rows draw apart


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


def nucleus(probs, top_p):
    """NumPy reference: the indices of the fewest most probable entries of ``probs`` (a
    distribution) whose sum reaches ``top_p``."""
    order = np.argsort(-probs, kind="stable")
    before = np.cumsum(probs[order]) - probs[order]
    return order[before < top_p]


@pytest.mark.parametrize("top_k, temperature, top_p, epsilon", [
    (0, 1.0, 1.0, 0), (0, 0.5, 1.0, 0), (2, 1.0, 1.0, 0), (2, 2.0, 1.0, 0),
    # nucleus: probabilities 0.51 (4), 0.31 (5), 0.19 (EOS) at T 1; 0.67, 0.25, 0.09 at T 0.5
    (0, 1.0, 0.5, 0), (0, 1.0, 0.6, 0), (0, 1.0, 0.9, 0), (0, 0.5, 0.8, 0), (2, 1.0, 0.3, 0),
    # epsilon: EOS (0.19) cut at 0.2; at T 0.5 EOS (0.09) at 0.1; of the top 2 (0.62, 0.38), 5 at
    # 0.4; above every probability, the most probable stays; then a nucleus of what is left
    (0, 1.0, 1.0, 0.2), (0, 0.5, 1.0, 0.1), (2, 1.0, 1.0, 0.4), (0, 1.0, 1.0, 0.9), (0, 1.0, 0.55, 0.2)])
def test_sampling_draws_from_the_tempered_top_k_distribution(top_k, temperature, top_p, epsilon):
    """20,000 first tokens drawn in one batch: their frequencies are softmax(logits / T) over
    the top_k tokens, of those the ones of probability at least epsilon (the most probable
    always) and, of those, the top_p nucleus (a NumPy reference; within 4 standard errors); the
    score is the model's own log-probability of what was drawn (temperature 1, whole
    vocabulary); the same seed draws the same tokens, another seed others; BOS is never drawn."""
    table, logits = first_token_table()
    fn = lambda ids, step, cache: (tf.gather(table, ids[:, step]), cache)  # noqa: E731
    n = 20_000
    run = lambda seed: greedy_search(fn, tf.fill([n], BOS), {}, max_decode_length=3, eos_id=EOS,  # noqa: E731
                                     never_ids=(PAD, BOS), sample=True, top_k=top_k, temperature=temperature,
                                     seed=seed, top_p=top_p, epsilon=epsilon)
    ids, scores = run((7, 0))
    first = ids.numpy()[:, 1]
    want = np.zeros(6)
    allowed = np.argsort(-logits)[: top_k or 6]
    probs = softmax(logits[allowed] / temperature)
    allowed = allowed[(probs >= epsilon) | (probs == probs.max())]
    allowed = allowed[nucleus(softmax(logits[allowed] / temperature), top_p)]
    want[allowed] = softmax(logits[allowed] / temperature)
    cases = {(1.0, 0): top_k or 6, (0.5, 0): 1, (0.6, 0): 2, (0.9, 0): 3, (0.8, 0): 2, (0.3, 0): 1, (1.0, 0.2): 2,
             (1.0, 0.1): 2, (1.0, 0.4): 1, (1.0, 0.9): 1, (0.55, 0.2): 1}  # 0.55: 4 is 0.62 of {4, 5}
    assert len(allowed) == cases[(top_p, epsilon)]  # the cases above
    got = np.bincount(first, minlength=6) / n
    np.testing.assert_allclose(got, want, atol=4 * np.sqrt(0.25 / n))
    assert set(np.unique(first)) <= set(allowed.tolist()) and BOS not in first
    model = np.log(softmax(table.numpy()[BOS]))
    then_eos = np.log(softmax(table.numpy()[4]))[EOS]  # after 4 or 5, EOS (nearly) surely
    expected = np.where(first == EOS, model[EOS], model[first] + then_eos)
    np.testing.assert_allclose(scores.numpy(), expected, atol=1e-4)
    np.testing.assert_array_equal(run((7, 0))[0].numpy(), ids.numpy())
    if len(allowed) > 1:
        assert (run((8, 0))[0].numpy()[:, 1] != first).mean() > 0.2


def test_nucleus_is_exact_when_it_holds_more_than_the_first_tokens_looked_at():
    """A 300-token vocabulary, one batch of two kinds of rows: peaked rows (a nucleus of 0.9 in
    a few tokens) and flat rows (a nucleus of over a hundred tokens, more than the 64 that the
    sampler looks at before it sorts the whole rows). Each kind's draws cover exactly its
    nucleus (NumPy reference) with its renormalised probabilities (within 4 standard errors);
    with only peaked rows the draws are as exact."""
    from tf_transformer.decoding import greedy

    V, n, top_p = 300, 12_000, 0.9
    rng = np.random.default_rng(0)
    peaked = np.concatenate([[-30.0] * 4, [9.0, 8.0, 7.5], rng.normal(0, 1, V - 7)])
    flat = np.concatenate([[-30.0] * 4, np.sort(rng.normal(0, 0.3, V - 4))[::-1]])
    rows = tf.constant(np.stack([peaked, flat]), tf.float32)
    forced_eos = np.full(V, -30.0)
    forced_eos[EOS] = 0.0

    def fn(ids, step, cache):
        logits = tf.where(step == 0, tf.gather(rows, cache["kind"]), tf.constant(forced_eos, tf.float32)[None])
        return logits, cache

    for kinds in (np.arange(n) % 2, np.zeros(n, np.int64)):
        ids, _ = greedy_search(fn, tf.fill([n], BOS), {"kind": tf.constant(kinds, tf.int32)}, max_decode_length=2,
                               eos_id=EOS, never_ids=(PAD, BOS), sample=True, top_p=top_p, seed=(3, 0))
        first = ids.numpy()[:, 1]
        for kind, logits in ((0, peaked), (1, flat)):
            drawn = first[kinds == kind]
            if not len(drawn):
                continue
            probs = softmax(np.where(np.isin(np.arange(V), [PAD, BOS]), -np.inf, logits))
            core = nucleus(probs, top_p)
            assert (len(core) < greedy._NUCLEUS_FIRST) == (kind == 0), len(core)
            want = np.zeros(V)
            want[core] = probs[core] / probs[core].sum()
            got = np.bincount(drawn, minlength=V) / len(drawn)
            assert set(np.unique(drawn)) == set(core.tolist())
            off = np.abs(got - want) / (np.sqrt(want * (1 - want) / len(drawn)) + 1e-12)
            assert off.max() < 4.5, (kind, off.max())  # 300 tokens: 4.5 standard errors


def test_each_rows_noise_is_gumbel_and_depends_on_its_key_and_the_token_only():
    """The per-row noise: standard Gumbel (mean the Euler-Mascheroni constant, variance pi^2/6,
    exp(-exp(-g)) uniform over ten bins), different rows' keys draw apart, and a token's noise is
    the same whichever tokens it is drawn among: so the top-k path picks what the full path
    picks when the top k hold every token of probability above 0."""
    from tf_transformer.decoding.greedy import _draw, _gumbel_noise

    rng = np.random.default_rng(3)
    keys = tf.constant(rng.integers(-2**31, 2**31, size=64), tf.int32)
    tokens = tf.range(10_000, dtype=tf.int32)[None, :]
    g = _gumbel_noise(keys, tokens).numpy()
    assert abs(g.mean() - 0.5772) < 0.01 and abs(g.var() - np.pi**2 / 6) < 0.02
    counts = np.histogram(np.exp(-np.exp(-g)), bins=10, range=(0, 1))[0] / g.size
    np.testing.assert_allclose(counts, 0.1, atol=0.002)
    assert np.abs(np.corrcoef(g[0], g[1])[0, 1]) < 0.05
    some = tf.constant(rng.integers(0, 10_000, size=(64, 7)), tf.int32)
    np.testing.assert_array_equal(_gumbel_noise(keys, some).numpy(), np.take_along_axis(g, some.numpy(), axis=1))
    logits = np.full((64, 300), -np.inf, np.float32)
    logits[:, :5] = rng.normal(0, 1, (64, 5))
    log_probs = tf.nn.log_softmax(tf.constant(logits))
    full = _draw(log_probs, 0, 1.0, keys).numpy()
    np.testing.assert_array_equal(_draw(log_probs, 5, 1.0, keys).numpy(), full)
    assert full.max() < 5 and len(set(full.tolist())) > 1


def test_the_fused_noise_has_the_plain_ops_bits_in_any_batch_shape():
    """The whole-vocabulary noise runs as one XLA kernel on the CPU, its rows padded to a power of
    two where the batch size is known only at run time: the same bits as the plain TensorFlow ops
    for batches of 1 to 100 rows, in a graph of unknown batch size (as decoding is traced) and
    eagerly, where the rows' padding is left out again."""
    from tf_transformer.decoding.greedy import _FUSED_FROM, _fused_uniform, _gumbel_noise, _uniform

    rng = np.random.default_rng(5)
    tokens = tf.range(_FUSED_FROM, dtype=tf.int32)[None, :]
    fused = tf.function(lambda keys: _fused_uniform(keys, tokens), autograph=False,
                        input_signature=[tf.TensorSpec([None], tf.int32)])
    for rows in (1, 2, 5, 33, 64, 100):
        keys = tf.constant(rng.integers(-2**31, 2**31, size=rows), tf.int32)
        plain = _uniform(keys, tokens).numpy()
        assert plain.shape == (rows, _FUSED_FROM) and 0 < plain.min() and plain.max() < 1
        np.testing.assert_array_equal(fused(keys).numpy(), plain)
        np.testing.assert_array_equal(_fused_uniform(keys, tokens).numpy(), plain)
        np.testing.assert_array_equal(_gumbel_noise(keys, tokens).numpy(), (-tf.math.log(-tf.math.log(plain))).numpy())


def test_sampling_settings_are_checked():
    table, _ = first_token_table()
    fn = lambda ids, step, cache: (tf.gather(table, ids[:, step]), cache)  # noqa: E731
    with pytest.raises(ValueError, match="temperature=0: must be > 0"):
        greedy_search(fn, tf.constant([BOS]), {}, 3, EOS, sample=True, temperature=0)
    with pytest.raises(ValueError, match="top_k=-1: must be >= 0"):
        greedy_search(fn, tf.constant([BOS]), {}, 3, EOS, sample=True, top_k=-1)
    for top_p in (0, 1.5):
        with pytest.raises(ValueError, match=f"top_p={top_p}: must be in"):
            greedy_search(fn, tf.constant([BOS]), {}, 3, EOS, sample=True, top_p=top_p)
    for epsilon in (-0.1, 1.0):
        with pytest.raises(ValueError, match=f"epsilon={epsilon}: must be in"):
            greedy_search(fn, tf.constant([BOS]), {}, 3, EOS, sample=True, epsilon=epsilon)
