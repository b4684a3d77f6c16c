"""Decoding a real (tiny, random) Transformer: cached == uncached, beam 1 == greedy,
length limits, dynamic shapes and XLA give the same ids."""

import numpy as np
import pytest
import tensorflow as tf

from tf_transformer.decoding.beam_search import beam_search
from tf_transformer.decoding.greedy import greedy_search
from tf_transformer.decoding.model_fns import (
    cached_decoder,
    translate_batch,
    uncached_decoder,
)
from tf_transformer.model import Transformer

BOS, EOS = 2, 3


@pytest.fixture(scope="module")
def model():
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(11)
    m = Transformer(vocab_size=40, d_model=16, num_layers=2, num_heads=2, d_ff=32, dropout=0.0,
                    max_length=24)
    m((np.ones((1, 3), "int32"), np.ones((1, 2), "int32")))
    # Sharpen the output distribution a little so hypotheses differ in length.
    return m


@pytest.fixture(scope="module")
def source():
    rng = np.random.default_rng(0)
    lengths = [1, 5, 9, 3, 7, 9]
    src = np.zeros((len(lengths), 9), np.int32)
    for i, n in enumerate(lengths):
        src[i, :n] = rng.integers(4, 40, n)
    return tf.constant(src)


@pytest.mark.parametrize("beam", [1, 4])
def test_cached_equals_uncached_model(model, source, beam):
    out = {}
    for cached in (True, False):
        out[cached] = translate_batch(model, source, beam_size=beam, alpha=0.6, max_extra_length=6,
                                      cached=cached)
    np.testing.assert_array_equal(out[True][0].numpy(), out[False][0].numpy())
    np.testing.assert_allclose(out[True][1].numpy(), out[False][1].numpy(), atol=1e-4)


def test_model_beam_one_equals_greedy(model, source):
    L = 12
    fn, cache = cached_decoder(model, source, L)
    bos = tf.fill([source.shape[0]], BOS)
    g_ids, g_sc = greedy_search(fn, bos, cache, L, EOS)
    b_ids, b_sc = beam_search(fn, bos, cache, 40, 1, alpha=0.0, max_decode_length=L, eos_id=EOS)
    np.testing.assert_array_equal(b_ids.numpy()[:, 0], g_ids.numpy())
    np.testing.assert_allclose(b_sc.numpy()[:, 0], g_sc.numpy(), atol=1e-5)


def test_uncached_fn_matches_forward_pass(model, source):
    # The logits the decoding functions see equal the teacher-forced forward pass.
    tgt = tf.constant(np.random.default_rng(1).integers(4, 40, (source.shape[0], 5)), tf.int32)
    tgt = tf.concat([tf.fill([source.shape[0], 1], BOS), tgt], axis=1)
    full = model((source, tgt), training=False).numpy()
    fn_c, cache = cached_decoder(model, source, 6)
    fn_u, ucache = uncached_decoder(model, source)  # beam_size=1: batch-major as is
    for step in range(6):
        lc, cache = fn_c(tgt, tf.constant(step), cache)
        lu, _ = fn_u(tgt, tf.constant(step), ucache)
        np.testing.assert_allclose(lc.numpy(), full[:, step], atol=1e-4)
        np.testing.assert_allclose(lu.numpy(), full[:, step], atol=1e-4)


def test_length_limits_and_dynamic_and_xla(model, source):
    ids, scores = translate_batch(model, source, beam_size=4, alpha=0.6, max_extra_length=2)
    n_src = (source.numpy() != 0).sum(1)
    produced = (ids.numpy() != 0).sum(1)
    assert ids.shape[1] == 9 + 2
    assert (produced <= n_src + 2).all()

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def dynamic(src):
        return translate_batch(model, src, beam_size=4, alpha=0.6, max_extra_length=2)

    @tf.function(jit_compile=True)
    def xla(src):
        return translate_batch(model, src, beam_size=4, alpha=0.6, max_extra_length=2)

    for fn in (dynamic, xla):
        got_ids, got_scores = fn(source)
        np.testing.assert_array_equal(got_ids.numpy(), ids.numpy())
        np.testing.assert_allclose(got_scores.numpy(), scores.numpy(), atol=1e-4)


def test_output_capped_by_model_limit(model):
    src = tf.constant(np.full((2, 24), 7, np.int32))
    ids, _ = translate_batch(model, src, beam_size=2, alpha=0.6, max_extra_length=50)
    assert ids.shape[1] == 24  # min(24 + 50, max_length=24)


@pytest.mark.parametrize("beam", [1, 4])
def test_padding_and_bos_are_never_written(model, source, beam, monkeypatch):
    """A model whose most probable tokens are PAD (0) and BOS (2) at every step: translate_batch
    writes neither (greedy: the tokens the unpatched model picks); the searches' own default
    (no never_ids) does write them."""
    PAD = 0
    plain, _ = translate_batch(model, source, beam_size=1, max_extra_length=6)
    step = model.decode_step

    def favour_pad_and_bos(*args, **kwargs):
        logits, cache = step(*args, **kwargs)
        favoured = tf.reduce_sum(tf.one_hot([PAD, BOS], tf.shape(logits)[-1], dtype=logits.dtype), axis=0)
        return logits + 50.0 * favoured, cache

    monkeypatch.setattr(model, "decode_step", favour_pad_and_bos)
    ids, scores = translate_batch(model, source, beam_size=beam, alpha=0.6, max_extra_length=6)
    ids = ids.numpy()
    assert not np.isin(ids, [BOS]).any() and np.isfinite(scores.numpy()).all()
    for row in ids:  # PAD only after the sentence's end
        n = int(np.argmax(row == EOS)) if (row == EOS).any() else int(np.sum(row != PAD))
        assert (row[:n] != PAD).all()
    if beam == 1:
        np.testing.assert_array_equal(ids, plain.numpy())
    fn, cache = cached_decoder(model, source, 6)
    raw, _ = greedy_search(fn, tf.fill([source.shape[0]], BOS), cache, 6, EOS)
    assert (raw.numpy()[:, 1] == BOS).all()  # without never_ids the search follows the logits
