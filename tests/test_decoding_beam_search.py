"""Beam search on hand-made logits functions: known best sequences, the length-penalty
formula, early stopping, beam 1 == greedy, cached == uncached, per-sentence limits."""

import importlib
import itertools
import math

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.decoding.beam_search import _chunk_size, _top_candidates, beam_search, length_penalty
from tf_transformer.decoding.greedy import greedy_search

beam_search_module = importlib.import_module("tf_transformer.decoding.beam_search")  # the package exports the function

PAD, BOS, EOS = 0, 2, 3
JUNK = -1e4  # logit for ids that should never be produced (pad, unk, bos)


def markov_fn(table):
    """Logits depend on the previous token only: logits = table[ids[:, step]]."""
    table = tf.constant(table, tf.float32)

    def fn(ids, step, cache):
        return tf.gather(table, ids[:, step]), cache

    return fn


def log_softmax_np(x):
    x = np.asarray(x, np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def brute_force(table, alpha, max_len, tokens, cut=False):
    """All sequences over ``tokens`` that end in EOS within max_len (with ``cut``, also those
    that reach max_len without EOS), scored log P / ((5 + len) / 6) ** alpha; best first."""
    lp_table = log_softmax_np(table)
    results = []
    for n in range(1, max_len + 1):
        for seq in itertools.product(tokens, repeat=n):
            if EOS in seq[:-1]:
                continue
            if seq[-1] != EOS and not (cut and n == max_len):
                continue
            prev, logp = BOS, 0.0
            for t in seq:
                logp += lp_table[prev, t]
                prev = t
            results.append((logp / ((5.0 + n) / 6.0) ** alpha, list(seq)))
    results.sort(key=lambda r: -r[0])
    return results


def random_table(seed, vocab=6):
    rng = np.random.default_rng(seed)
    table = rng.normal(0, 1.5, size=(vocab, vocab))
    table[:, [PAD, 1, BOS]] = JUNK
    return table


def strip(seq):
    """Generated tokens of one hypothesis row (drop BOS, stop after EOS)."""
    out = []
    for t in seq[1:]:
        if t == PAD:  # the toy models never produce pad
            break
        out.append(int(t))
        if t == EOS:
            break
    return out


def test_length_penalty_formula():
    for n in (1, 4, 17):
        for a in (0.0, 0.6, 1.0):
            assert float(length_penalty(n, a)) == pytest.approx(((5 + n) / 6) ** a, rel=1e-6)


def test_trap_greedy_misses_beam_finds():
    # After BOS: token 4 (p=.6) or 5 (p=.4). After 4 the mass is spread thin; after 5 EOS is
    # almost certain. Greedy takes 4; beam 2 finds [5, EOS].
    V = 8
    table = np.full((V, V), JUNK)
    table[BOS, 4], table[BOS, 5] = math.log(0.6), math.log(0.4)
    table[4, [3, 4, 5, 6, 7]] = 0.0  # uniform: p(EOS | 4) = 0.2
    table[5, EOS] = math.log(0.99)
    table[5, 6] = math.log(0.01)
    for t in (6, 7):
        table[t, EOS] = 0.0
    fn = markov_fn(table)
    ids, _ = greedy_search(fn, tf.constant([BOS]), {}, max_decode_length=5, eos_id=EOS)
    assert strip(ids.numpy()[0])[0] == 4
    ids, scores = beam_search(fn, tf.constant([BOS]), {}, V, beam_size=2, alpha=0.0,
                              max_decode_length=5, eos_id=EOS)
    assert strip(ids.numpy()[0, 0]) == [5, EOS]
    lp = log_softmax_np(table)
    assert scores.numpy()[0, 0] == pytest.approx(lp[BOS, 5] + lp[5, EOS], abs=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0, 2.5])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("chunk", [None, 3])
def test_exhaustive_beam_equals_brute_force(alpha, seed, chunk, monkeypatch):
    # Beam 32 over 3 real tokens (EOS, 4, 5) and max length 4 holds every live prefix, so the
    # search is exhaustive: its finished set must equal the brute-force ranking of the
    # hypotheses that end in EOS, scores included (the length penalty applied as the formula
    # says); hypotheses cut at the limit do not compete with them. chunk=3: the candidates'
    # top-k through chunk maxima (what a real vocabulary gets), forced on this 6-token one.
    monkeypatch.setattr(beam_search_module, "_chunk_size", lambda vocab_size: chunk)
    table = random_table(seed)
    max_len = 4
    expected = brute_force(table, alpha, max_len, tokens=[EOS, 4, 5])
    for stop_early in (True, False):
        ids, scores = beam_search(markov_fn(table), tf.constant([BOS]), {}, 6, beam_size=32,
                                  alpha=alpha, max_decode_length=max_len, eos_id=EOS,
                                  stop_early=stop_early)
        got = [(float(s), strip(seq)) for s, seq in zip(scores.numpy()[0], ids.numpy()[0])
               if np.isfinite(s)]
        # Early stopping may leave n-best slots empty, but what it found is the exact top.
        assert len(got) >= (1 if stop_early else 12)
        score_of = {tuple(seq): sc for sc, seq in expected}
        for (es, eseq), (gs, gseq) in zip(expected[:12], got[:12]):
            assert gs == pytest.approx(es, abs=1e-4)  # same ranking of scores
            # Markov chains have exact ties (permuted middles), so check the sequence's own score
            assert score_of[tuple(gseq)] == pytest.approx(gs, abs=1e-4)
        assert got[0][1] == expected[0][1]


@pytest.mark.parametrize("vocab", [6, 8, 40, 100, 8000])
def test_top_candidates_equal_top_k_ties_and_inf_included(vocab):
    # The chunked top-k must give tf.math.top_k's values and indices exactly, ties (here
    # many: log-probs on a grid of 0.5) going to the lower index, with -inf beams (beams
    # not yet expanded, stopped sentences) and an all--inf sentence.
    rng = np.random.default_rng(vocab)
    chunk = _chunk_size(vocab) or 3
    assert vocab % chunk == 0
    for trial in range(20):
        batch, beam = 3, int(rng.integers(1, 5))
        log_probs = (rng.integers(-6, 1, (batch, beam, vocab)) * 0.5).astype("float32")
        if trial % 2:
            log_probs = rng.standard_normal((batch, beam, vocab)).astype("float32")
        alive = (rng.integers(-3, 1, (batch, beam)) * 0.5).astype("float32")
        alive[rng.random((batch, beam)) < 0.3] = -np.inf
        alive[0, :] = -np.inf if trial % 4 == 0 else alive[0, :]
        want = tf.math.top_k(np.reshape(alive[:, :, None] + log_probs, (batch, beam * vocab)), k=2 * beam)
        values, index = _top_candidates(tf.constant(alive), tf.constant(log_probs), 2 * beam, chunk)
        np.testing.assert_array_equal(values.numpy(), want.values.numpy())
        np.testing.assert_array_equal(index.numpy(), want.indices.numpy())


def test_chunk_size_divides_the_vocabulary():
    assert _chunk_size(8000) == 64  # nearest sqrt(8000 / 2) = 63.2
    assert _chunk_size(40) == 4
    assert _chunk_size(6) is None and _chunk_size(7) is None  # no divisor >= 4 leaving two chunks
    for vocab in (8, 37000, 32768, 1234):
        chunk = _chunk_size(vocab)
        assert chunk is None or (vocab % chunk == 0 and chunk >= 4 and vocab // chunk >= 2)


def run_on_table():
    """After BOS, EOS has p ~ 0.05 and token 4 the rest; after 4, token 4 again has p ~ 0.95
    (a cheap loop) and EOS ~ 0.05; token 5 is rare. A hypothesis cut at the limit
    (4 4 4 ...) has a far higher log-probability than any that ends in EOS."""
    table = np.full((6, 6), JUNK)
    table[BOS, [EOS, 4, 5]] = [0.0, 3.0, -3.0]
    table[4, [EOS, 4, 5]] = [0.0, 3.0, -3.0]
    table[5, [EOS, 4, 5]] = [3.0, 0.0, -3.0]
    return table


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("beam", [2, 4, 32])  # beam 1 never finalises here: see the next test
def test_cut_hypothesis_never_beats_a_finished_one(alpha, beam):
    # The exhaustive reference over EOS-terminated sequences vs. one that lets cut-off
    # hypotheses compete: they disagree here (the cut run-on would win), and beam search
    # must follow the EOS-only reference whenever it found any finished hypothesis.
    table = run_on_table()
    max_len = 4
    finished_only = brute_force(table, alpha, max_len, tokens=[EOS, 4, 5])
    with_cut = brute_force(table, alpha, max_len, tokens=[EOS, 4, 5], cut=True)
    assert with_cut[0][1] == [4, 4, 4, 4] != finished_only[0][1]  # the trap is real
    ids, scores = beam_search(markov_fn(table), tf.constant([BOS]), {}, 6, beam_size=beam, alpha=alpha,
                              max_decode_length=max_len, eos_id=EOS)
    best = strip(ids.numpy()[0, 0])
    assert best[-1] == EOS
    if beam == 32:  # exhaustive: exactly the reference's winner and score
        assert best == finished_only[0][1]
        assert float(scores.numpy()[0, 0]) == pytest.approx(finished_only[0][0], abs=1e-4)
    for s, seq in zip(scores.numpy()[0], ids.numpy()[0]):
        if s > -100:  # hypotheses over the real tokens (the junk ids have logit -1e4)
            assert strip(seq)[-1] == EOS  # no cut hypothesis in the n-best either


def test_cut_hypothesis_returned_when_nothing_finished():
    # EOS is (practically) never among the best candidates: no hypothesis finishes, so the
    # best live one is returned cut at the limit, scored log P / lp(limit).
    table = run_on_table()
    table[:, EOS] = -50.0
    max_len = 3
    ids, scores = beam_search(markov_fn(table), tf.constant([BOS, BOS]), {}, 6, beam_size=2, alpha=0.6,
                              max_decode_length=max_len, eos_id=EOS, max_lengths=tf.constant([3, 2]))
    lp = log_softmax_np(table)
    for row, n in enumerate([3, 2]):
        assert strip(ids.numpy()[row, 0]) == [4] * n
        expected = (lp[BOS, 4] + (n - 1) * lp[4, 4]) / ((5 + n) / 6) ** 0.6
        assert float(scores.numpy()[row, 0]) == pytest.approx(expected, abs=1e-4)


def test_length_penalty_changes_winner():
    # After BOS: EOS or 4 (p=.5 each); after 4: 4 again (p=.9) or EOS (p=.1). Without a
    # penalty [EOS] wins; with a strong one the long [4]*5 + [EOS] wins (a hypothesis cut at
    # the limit, [4]*6, would score higher still but does not compete with finished ones).
    V = 6
    table = np.full((V, V), JUNK)
    table[BOS, EOS], table[BOS, 4] = math.log(0.5), math.log(0.5)
    table[4, 4], table[4, EOS] = math.log(0.9), math.log(0.1)
    winners = {}
    for alpha in (0.0, 0.6, 3.0):
        ids, scores = beam_search(markov_fn(table), tf.constant([BOS]), {}, V, beam_size=4,
                                  alpha=alpha, max_decode_length=6, eos_id=EOS)
        expected = brute_force(table, alpha, 6, tokens=[EOS, 4])[0]
        winners[alpha] = strip(ids.numpy()[0, 0])
        assert winners[alpha] == expected[1]
        assert scores.numpy()[0, 0] == pytest.approx(expected[0], abs=1e-5)
    assert winners[0.0] == [EOS] and winners[3.0] == [4] * 5 + [EOS]
    long_score = (math.log(0.5) + 4 * math.log(0.9) + math.log(0.1)) / ((5 + 6) / 6) ** 3.0
    assert long_score > math.log(0.5)
    cut_score = (math.log(0.5) + 5 * math.log(0.9)) / ((5 + 6) / 6) ** 3.0
    assert cut_score > long_score  # the cut one would have won under the old rule


def test_known_score_equals_formula():
    # Deterministic chain 4 -> 5 -> EOS with fixed probabilities; beam score must be
    # log(p) / ((5 + 3) / 6) ** alpha.
    V = 6
    table = np.full((V, V), JUNK)
    table[BOS, 4], table[BOS, 5] = math.log(0.8), math.log(0.2)
    table[4, 5], table[4, 4] = math.log(0.7), math.log(0.3)
    table[5, EOS], table[5, 4] = math.log(0.9), math.log(0.1)
    alpha = 0.6
    ids, scores = beam_search(markov_fn(table), tf.constant([BOS]), {}, V, beam_size=1,
                              alpha=alpha, max_decode_length=3, eos_id=EOS)
    assert strip(ids.numpy()[0, 0]) == [4, 5, EOS]
    lp = log_softmax_np(table)
    logp = lp[BOS, 4] + lp[4, 5] + lp[5, EOS]
    assert scores.numpy()[0, 0] == pytest.approx(logp / ((5 + 3) / 6) ** alpha, abs=1e-5)


def test_normalized_outputs_are_used_as_they_are():
    # the function's outputs shifted by +1: a log-softmax undoes the shift, ``normalized=True``
    # (an ensemble's log-probabilities) keeps it, in beam search and greedy search alike
    V, alpha = 6, 0.6
    table = np.full((V, V), JUNK)
    table[BOS, 4], table[BOS, 5] = math.log(0.8), math.log(0.2)
    table[4, 5], table[4, 4] = math.log(0.7), math.log(0.3)
    table[5, EOS], table[5, 4] = math.log(0.9), math.log(0.1)
    lp = log_softmax_np(table)
    logp = lp[BOS, 4] + lp[4, 5] + lp[5, EOS]
    shifted = markov_fn(table + 1.0)
    for normalized, expected in ((False, logp), (True, logp + 3.0)):
        ids, scores = beam_search(shifted, tf.constant([BOS]), {}, V, beam_size=2, alpha=alpha,
                                  max_decode_length=3, eos_id=EOS, normalized=normalized)
        assert strip(ids.numpy()[0, 0]) == [4, 5, EOS]
        assert scores.numpy()[0, 0] == pytest.approx(expected / ((5 + 3) / 6) ** alpha, abs=1e-5)
        ids, scores = greedy_search(shifted, tf.constant([BOS]), {}, max_decode_length=3, eos_id=EOS,
                                    normalized=normalized)
        assert strip(ids.numpy()[0]) == [4, 5, EOS]
        assert scores.numpy()[0] == pytest.approx(expected, abs=1e-5)


class PrefixModel:
    """A toy decoder whose logits depend on the whole prefix and on the sentence:
    h = tanh(sum_j E[ids_j] * decay^(step-j) + m_b); logits = h @ W.
    Cached: the cache carries the running state and the per-sentence vector m.
    Uncached: recompute the state from ids[:, :step+1] every step."""

    def __init__(self, vocab, dim, batch, seed=0):
        rng = np.random.default_rng(seed)
        self.V = vocab
        self.E = tf.constant(rng.normal(0, 1, (vocab, dim)), tf.float32)
        self.W = tf.constant(rng.normal(0, 2, (dim, vocab)), tf.float32)
        self.m = tf.constant(rng.normal(0, 1, (batch, dim)), tf.float32)
        self.decay = 0.7
        bias = np.zeros(vocab)
        bias[[PAD, 1, BOS]] = JUNK  # never produce pad/unk/bos
        self.bias = tf.constant(bias, tf.float32)

    def initial_cache(self, cached):
        if cached:
            return {"state": tf.zeros_like(self.m), "m": self.m}
        return {"m": self.m}

    def cached_fn(self, ids, step, cache):
        state = cache["state"] * self.decay + tf.gather(self.E, ids[:, step])
        logits = tf.tanh(state + cache["m"]) @ self.W + self.bias
        return logits, {"state": state, "m": cache["m"]}

    def uncached_fn(self, ids, step, cache):
        prefix = ids[:, : step + 1]
        powers = tf.pow(self.decay, tf.cast(tf.range(step, -1, -1), tf.float32))
        state = tf.einsum("btd,t->bd", tf.gather(self.E, prefix), powers)
        return tf.tanh(state + cache["m"]) @ self.W + self.bias, cache


@pytest.mark.parametrize("beam", [1, 3])
def test_cached_equals_uncached(beam):
    model = PrefixModel(vocab=12, dim=8, batch=5, seed=beam)
    bos = tf.fill([5], BOS)
    lengths = tf.constant([3, 9, 9, 5, 1])
    out = {}
    for cached in (True, False):
        fn = model.cached_fn if cached else model.uncached_fn
        out[cached] = beam_search(fn, bos, model.initial_cache(cached), 12, beam, alpha=0.6,
                                  max_decode_length=9, eos_id=EOS, max_lengths=lengths)
    np.testing.assert_array_equal(out[True][0].numpy(), out[False][0].numpy())
    np.testing.assert_allclose(out[True][1].numpy(), out[False][1].numpy(), atol=1e-4)
    g = {c: greedy_search(model.cached_fn if c else model.uncached_fn, bos,
                          model.initial_cache(c), 9, EOS, max_lengths=lengths) for c in (True, False)}
    np.testing.assert_array_equal(g[True][0].numpy(), g[False][0].numpy())


@pytest.mark.parametrize("seed", range(4))
def test_beam_one_equals_greedy(seed):
    model = PrefixModel(vocab=10, dim=6, batch=8, seed=seed)
    bos = tf.fill([8], BOS)
    lengths = tf.constant([1, 2, 4, 8, 12, 12, 3, 7])
    g_ids, g_scores = greedy_search(model.cached_fn, bos, model.initial_cache(True), 12, EOS,
                                    max_lengths=lengths)
    b_ids, b_scores = beam_search(model.cached_fn, bos, model.initial_cache(True), 10, 1, alpha=0.0,
                                  max_decode_length=12, eos_id=EOS, max_lengths=lengths)
    np.testing.assert_array_equal(b_ids.numpy()[:, 0], g_ids.numpy())
    np.testing.assert_allclose(b_scores.numpy()[:, 0], g_scores.numpy(), atol=1e-5)


def test_per_sentence_max_length_and_batch_independence():
    model = PrefixModel(vocab=10, dim=6, batch=6, seed=7)
    bos = tf.fill([6], BOS)
    lengths = np.array([1, 2, 3, 5, 8, 11])
    ids, scores = beam_search(model.cached_fn, bos, model.initial_cache(True), 10, 4, alpha=0.6,
                              max_decode_length=11, eos_id=EOS, max_lengths=tf.constant(lengths))
    ids = ids.numpy()
    for b, n in enumerate(lengths):
        for k in range(4):
            if np.isfinite(scores.numpy()[b, k]):
                assert len(strip(ids[b, k])) <= n
                assert (ids[b, k, n + 1:] == PAD).all()
    # Decoding one sentence alone gives the same result as in the batch.
    for b in (0, 3, 5):
        single = PrefixModel(vocab=10, dim=6, batch=6, seed=7)
        single.m = model.m[b: b + 1]
        ids1, sc1 = beam_search(single.cached_fn, tf.constant([BOS]), single.initial_cache(True), 10, 4,
                                alpha=0.6, max_decode_length=11, eos_id=EOS,
                                max_lengths=tf.constant(lengths[b: b + 1]))
        np.testing.assert_array_equal(ids1.numpy()[0], ids[b])
        np.testing.assert_allclose(sc1.numpy()[0], scores.numpy()[b], atol=1e-5)


def test_early_stop_saves_steps_and_output_is_sorted():
    # EOS is very likely everywhere: every sentence can stop after a few steps of 50.
    V = 6
    table = np.full((V, V), JUNK)
    table[:, EOS], table[:, 4], table[:, 5] = 3.0, 0.0, -0.5
    steps = tf.Variable(0)
    base = markov_fn(table)

    def counting(ids, step, cache):
        steps.assign_add(1)
        return base(ids, step, cache)

    @tf.function
    def run(stop_early):
        return beam_search(counting, tf.fill([3], BOS), {}, V, 4, alpha=0.6, max_decode_length=50,
                           eos_id=EOS, stop_early=stop_early)

    ids_e, sc_e = run(True)
    early_steps = int(steps.numpy())
    steps.assign(0)
    ids_f, sc_f = run(False)
    assert early_steps < 10 and int(steps.numpy()) == 50
    np.testing.assert_array_equal(ids_e.numpy()[:, 0], ids_f.numpy()[:, 0])
    np.testing.assert_allclose(sc_e.numpy()[:, 0], sc_f.numpy()[:, 0], atol=1e-6)
    # Found hypotheses come best first; slots early stopping left empty are -inf, at the end.
    for s in (sc_e.numpy(), sc_f.numpy()):
        finite = np.isfinite(s)
        assert finite[:, 0].all()
        assert (np.sort(finite, axis=1)[:, ::-1] == finite).all()
        for row in s:
            assert (np.diff(row[np.isfinite(row)]) <= 1e-6).all()


def test_xla_and_dynamic_length_match_eager():
    model = PrefixModel(vocab=10, dim=6, batch=4, seed=3)
    bos = tf.fill([4], BOS)
    lengths = tf.constant([2, 5, 7, 7])
    eager = beam_search(model.cached_fn, bos, model.initial_cache(True), 10, 4, 0.6, 7, EOS,
                        max_lengths=lengths)

    @tf.function(jit_compile=True)
    def xla(bos, lengths):
        return beam_search(model.cached_fn, bos, model.initial_cache(True), 10, 4, 0.6, 7, EOS,
                           max_lengths=lengths)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([], tf.int32)])
    def dynamic(bos, L):
        return beam_search(model.cached_fn, bos, model.initial_cache(True), 10, 4, 0.6, L, EOS,
                           max_lengths=lengths)

    for got in (xla(bos, lengths), dynamic(bos, tf.constant(7))):
        np.testing.assert_array_equal(got[0].numpy(), eager[0].numpy())
        np.testing.assert_allclose(got[1].numpy(), eager[1].numpy(), atol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_n_best_one_same_best_in_fewer_steps(alpha):
    """Waiting only until nothing live can beat the best finished hypothesis returns the
    same best hypothesis and score as waiting for all beam slots, in fewer steps."""
    V = 8
    outputs, counts = {}, {}
    for seed in range(6):
        table = random_table(100 + seed, vocab=V)
        table[:, EOS] -= 1.0  # longer outputs: more steps for the bar to matter
        steps = tf.Variable(0)
        base = markov_fn(table)

        def counting(ids, step, cache):
            steps.assign_add(1)
            return base(ids, step, cache)

        for n_best in (None, 1):
            steps.assign(0)
            ids, scores = tf.function(lambda: beam_search(counting, tf.fill([5], BOS), {}, V, 4, alpha=alpha,
                                                          max_decode_length=30, eos_id=EOS, n_best=n_best))()
            outputs[seed, n_best] = (ids.numpy()[:, 0], scores.numpy()[:, 0])
            counts[seed, n_best] = int(steps.numpy())
        np.testing.assert_array_equal(outputs[seed, 1][0], outputs[seed, None][0])
        np.testing.assert_allclose(outputs[seed, 1][1], outputs[seed, None][1], atol=1e-6)
        assert counts[seed, 1] <= counts[seed, None]
    assert sum(counts[s, 1] for s in range(6)) < sum(counts[s, None] for s in range(6))
    with pytest.raises(ValueError, match="n_best=5"):
        beam_search(markov_fn(random_table(0)), tf.constant([BOS]), {}, 6, 4, n_best=5)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_n_best_list_is_full_and_exact(alpha):
    """An n-best list of an exhaustive search (beam 32 holds every live prefix) is the brute-
    force ranking's first n_best, every slot filled: the search waits until n_best hypotheses
    have finished, where it used to stop once nothing live could beat the worst *finished*
    one, leaving slots empty that a worse hypothesis would still have filled."""
    max_len, filled = 4, []
    for seed in range(8):
        table = random_table(seed)
        expected = brute_force(table, alpha, max_len, tokens=[EOS, 4, 5])
        for n_best in (3, 8):
            ids, scores = beam_search(markov_fn(table), tf.constant([BOS]), {}, 6, beam_size=32, alpha=alpha,
                                      max_decode_length=max_len, eos_id=EOS, n_best=n_best)
            got = scores.numpy()[0, :n_best]
            assert np.all(np.isfinite(got)), (seed, n_best, got)
            np.testing.assert_allclose(got, [sc for sc, _ in expected[:n_best]], atol=1e-4)
            score_of = {tuple(seq): sc for sc, seq in expected}
            for sc, seq in zip(got, ids.numpy()[0, :n_best]):
                assert score_of[tuple(strip(seq))] == pytest.approx(float(sc), abs=1e-4)
            filled.append(int(np.isfinite(scores.numpy()[0]).sum()))
    assert min(filled) >= 3


@pytest.mark.parametrize("beam, alpha, message", [(0, 0.6, "beam_size=0: must be >= 1"),
                                                  (2, -0.5, "alpha=-0.5: must be >= 0")])
def test_settings_are_checked_as_the_translators_check_them(beam, alpha, message):
    # the check of tf_transformer.decoding.batches, shared with Translator and CT2Translator; a
    # UserError, which is a ValueError
    from tf_transformer.decoding.batches import check_decode_settings
    from tf_transformer.errors import UserError

    with pytest.raises(UserError) as e:
        beam_search(markov_fn(random_table(0)), tf.constant([BOS]), {}, 6, beam, alpha=alpha)
    assert isinstance(e.value, ValueError) and str(e.value) == message
    with pytest.raises(UserError, match=f"^{message}$"):
        check_decode_settings(beam, alpha, 50, 64)


@pytest.mark.parametrize("beam", [1, 3])
def test_drop_finished_same_results_and_fewer_rows(beam):
    """Removing stopped sentences from the batch changes nothing but the work: the function
    sees fewer rows as sentences finish, and gets its sentence-level tensors cut alike."""
    V, B = 7, 9
    rng = np.random.default_rng(5)
    tables = rng.normal(0, 1.5, size=(B, V, V)).astype("float32")  # one Markov table per sentence
    tables[:, :, [PAD, 1, BOS]] = JUNK
    tables[np.arange(B), :, EOS] += np.linspace(-2.0, 3.0, B)[:, None]  # sentences end at varied steps
    lengths = tf.constant([3, 12, 5, 12, 8, 2, 12, 9, 6])
    rows_seen = tf.Variable(tf.zeros([0], tf.int32), shape=[None])

    def fn(ids, step, cache, sentence):
        rows_seen.assign(tf.concat([rows_seen, tf.shape(ids)[:1]], 0))
        # the sentence-level table, repeated per hypothesis: [rows, V, V] -> this row's logits
        logits = tf.gather(sentence["table"], ids[:, step], batch_dims=1)
        return logits, {"seen": cache["seen"] + 1}

    def run(drop):
        rows_seen.assign(tf.zeros([0], tf.int32))
        cache = {"seen": tf.zeros([B, 1], tf.int32)}
        bos = tf.fill([B], BOS)
        if beam == 1:
            return greedy_search(fn, bos, cache, 12, EOS, max_lengths=lengths, sentence_cache={"table": tables},
                                 drop_finished=drop)
        return beam_search(fn, bos, cache, V, beam, alpha=0.6, max_decode_length=12, eos_id=EOS,
                           max_lengths=lengths, sentence_cache={"table": tables}, drop_finished=drop)

    kept_ids, kept_scores = tf.function(lambda: run(False))()
    kept_rows = rows_seen.numpy().copy()
    ids, scores = tf.function(lambda: run(True))()
    rows = rows_seen.numpy()
    np.testing.assert_array_equal(ids.numpy(), kept_ids.numpy())
    np.testing.assert_allclose(scores.numpy(), kept_scores.numpy(), atol=1e-6)
    assert (kept_rows == B * beam).all()
    assert rows[0] == B * beam and rows[-1] < B * beam and (np.diff(rows) <= 0).all()
    assert rows.sum() < kept_rows.sum()


# -- stop rules: "bound" (exact) and "beam_finished" (fairseq / OpenNMT / CTranslate2) ---------------


def reference_search(table, beam, alpha, max_len, stop_rule):
    """One sentence, in plain Python: the module docstring's search, with ``n_best=1``.
    Returns ``(tokens, score)`` of the best hypothesis."""
    lp = log_softmax_np(table)
    V = lp.shape[0]
    pen = lambda n: ((5.0 + n) / 6.0) ** alpha  # noqa: E731
    alive, finished, n_finished = [(0.0, [BOS])], [], 0
    for length in range(1, max_len + 1):
        cands = sorted(((logp + lp[seq[-1], t], seq + [t]) for logp, seq in alive for t in range(V)),
                       key=lambda c: -c[0])[: 2 * beam]
        for rank, (logp, seq) in enumerate(cands):
            if seq[-1] == EOS and rank < beam:
                finished.append((logp / pen(length), seq))
                n_finished += 1
        finished = sorted(finished, key=lambda f: -f[0])[:beam]
        alive = [c for c in cands if c[1][-1] != EOS][:beam]
        if length == max_len:
            if not finished:  # nothing ended: the best live hypothesis, cut
                return alive[0][1][1:], alive[0][0] / pen(length)
            break
        if finished and alive[0][0] / pen(max_len) < finished[0][0]:
            break  # the bound: nothing live can beat the best finished hypothesis
        if stop_rule == "beam_finished" and n_finished >= beam:
            break
    return finished[0][1][1:], finished[0][0]


def loop_table():
    """BOS -> A or L (even); A -> EOS; L -> L (cheap) or EOS (dear). A long L loop wins under
    a strong length penalty: the trap that the first ``beam`` endings avoid."""
    A, L = 4, 5
    table = np.full((6, 6), JUNK)
    table[BOS, [A, L]] = 0.0
    table[A, EOS] = 0.0
    table[L, L], table[L, EOS] = 0.0, -3.0
    table[[EOS, PAD, 1], EOS] = 0.0  # rows never used; any valid distribution
    return table, A, L


def test_beam_finished_stops_at_the_beam_th_ending_exact_search_takes_the_loop():
    table, A, L = loop_table()
    max_len, alpha = 12, 3.0
    exact = brute_force(table, alpha, max_len, tokens=[EOS, A, L])[0]
    assert exact[1] == [L] * (max_len - 1) + [EOS]  # the loop, as long as the limit allows
    run = lambda rule: beam_search(markov_fn(table), tf.constant([BOS]), {}, 6, 2, alpha=alpha,  # noqa: E731
                                   max_decode_length=max_len, eos_id=EOS, n_best=1, stop_rule=rule)
    ids, scores = run("bound")
    assert strip(ids.numpy()[0, 0]) == exact[1] and scores.numpy()[0, 0] == pytest.approx(exact[0], rel=1e-5)
    # "A EOS" ends at step 2 (rank 0 of 4), "L L EOS" at step 3 (rank 1): two endings, stop;
    # the better of the two by score is "A EOS"
    ids, scores = run("beam_finished")
    lp = log_softmax_np(table)
    assert strip(ids.numpy()[0, 0]) == [A, EOS]
    assert scores.numpy()[0, 0] == pytest.approx((lp[BOS, A] + lp[A, EOS]) / (7 / 6) ** alpha, rel=1e-5)
    assert reference_search(table, 2, alpha, max_len, "beam_finished")[0] == [A, EOS]


@pytest.mark.parametrize("stop_rule", ["bound", "beam_finished"])
@pytest.mark.parametrize("beam, alpha", [(2, 0.6), (3, 1.4), (2, 3.0), (4, 3.0)])
def test_stop_rules_equal_the_python_reference(stop_rule, beam, alpha):
    V, max_len, different = 7, 9, 0
    for seed in range(8):
        table = random_table(300 + seed, vocab=V)
        ids, scores = beam_search(markov_fn(table), tf.constant([BOS]), {}, V, beam, alpha=alpha,
                                  max_decode_length=max_len, eos_id=EOS, n_best=1, stop_rule=stop_rule)
        tokens, score = reference_search(table, beam, alpha, max_len, stop_rule)
        assert strip(ids.numpy()[0, 0]) == tokens, seed
        assert scores.numpy()[0, 0] == pytest.approx(score, rel=1e-5, abs=1e-6)
        other = reference_search(table, beam, alpha, max_len, {"bound": "beam_finished"}.get(stop_rule, "bound"))
        different += other[0] != tokens
    if alpha == 3.0:
        assert different == 2  # the rules disagree on 2 of these 8 tables: the comparison can fail


def test_stop_rule_is_checked():
    from tf_transformer.errors import UserError

    with pytest.raises(UserError, match="stop_rule='first': expected one of 'bound', 'beam_finished'"):
        beam_search(markov_fn(random_table(0)), tf.constant([BOS]), {}, 6, 2, stop_rule="first")
