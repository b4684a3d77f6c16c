"""Layers: numbers against formulas and a NumPy reference; get_config round trips."""

import math
import warnings

import keras
import numpy as np
import pytest

from tf_transformer.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    LearnedPositionalEmbedding,
    MultiHeadAttention,
    PositionwiseFeedForward,
    SharedEmbedding,
    SinusoidalPositionalEncoding,
    causal_mask,
    scaled_dot_product_attention,
    sinusoidal_encoding,
)


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_attention(q, k, v, mask=None):
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    w = np_softmax(scores)
    return w @ v, w


@pytest.mark.parametrize("d_model", [16, 512, 7])
def test_sinusoidal_encoding_equals_formula(d_model):
    positions = np.array([0, 1, 5, 37, 999, 5000])
    pe = np.array(sinusoidal_encoding(positions, d_model))
    pairs = sorted({0, 1, d_model // 4, (d_model - 1) // 2})  # includes the last pair
    for r, pos in enumerate(positions):
        for i in pairs:
            angle = pos / 10000 ** (2 * i / d_model)
            assert pe[r, 2 * i] == pytest.approx(math.sin(angle), abs=2e-4 * max(1, pos / 1000))
            if 2 * i + 1 < d_model:
                assert pe[r, 2 * i + 1] == pytest.approx(math.cos(angle), abs=2e-4 * max(1, pos / 1000))


def test_sinusoidal_layer_adds_encoding_with_offset():
    x = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")
    layer = SinusoidalPositionalEncoding()
    out = np.array(layer(x, start_index=3))
    expected = x + np.array(sinusoidal_encoding(np.arange(3, 9), 8))[None]
    np.testing.assert_allclose(out, expected, atol=1e-6)


def test_sinusoidal_encoding_any_length():
    pe = np.array(SinusoidalPositionalEncoding()(np.zeros((1, 3000, 4), "float32")))
    assert pe.shape == (1, 3000, 4) and np.isfinite(pe).all()


def test_attention_matches_numpy_reference_with_mask():
    rng = np.random.default_rng(1)
    q = rng.normal(size=(2, 3, 5, 8)).astype("float32")
    k = rng.normal(size=(2, 3, 7, 8)).astype("float32")
    v = rng.normal(size=(2, 3, 7, 4)).astype("float32")
    mask = rng.random((2, 1, 5, 7)) > 0.3
    mask[..., 0] = True  # every query sees at least one key
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    ref_out, ref_w = np_attention(q, k, v, mask)
    np.testing.assert_allclose(np.array(w), ref_w, atol=1e-6)
    np.testing.assert_allclose(np.array(out), ref_out, atol=1e-5)
    assert np.all(np.array(w)[np.broadcast_to(~mask, ref_w.shape)] == 0.0)


def test_attention_without_mask_and_float16_masking_is_finite():
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(1, 2, 4, 8)).astype("float32") for _ in range(3))
    out, _ = scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(np.array(out), np_attention(q, k, v)[0], atol=1e-5)
    mask = np.tril(np.ones((4, 4), bool))[None, None]
    out16, w16 = scaled_dot_product_attention(*(x.astype("float16") for x in (q, k, v)), mask=mask)
    assert np.isfinite(np.array(out16)).all()
    np.testing.assert_allclose(np.array(out16).astype("float32"), np_attention(q, k, v, mask)[0], atol=1e-2)
    assert np.all(np.array(w16)[0, 0][~mask[0, 0]] == 0)


def test_multi_head_attention_matches_numpy():
    rng = np.random.default_rng(3)
    mha = MultiHeadAttention(num_heads=3, key_dim=4, value_dim=5)
    x = rng.normal(size=(2, 6, 10)).astype("float32")
    m = rng.normal(size=(2, 4, 10)).astype("float32")
    mask = np.ones((2, 6, 4), bool)
    mask[1, :, 2:] = False
    out, w = mha(x, m, attention_mask=mask, return_attention_scores=True)
    wq, wk, wv, wo = (keras.ops.convert_to_numpy(t)
                      for t in (mha.query_kernel, mha.key_kernel, mha.value_kernel, mha.output_kernel))
    assert wq.shape == (10, 12) and wv.shape == (10, 15) and wo.shape == (15, 10)

    def heads(t, d):
        return t.reshape(t.shape[0], t.shape[1], 3, d).transpose(0, 2, 1, 3)

    ctx, ref_w = np_attention(heads(x @ wq, 4), heads(m @ wk, 4), heads(m @ wv, 5), mask[:, None])
    ref = ctx.transpose(0, 2, 1, 3).reshape(2, 6, 15) @ wo
    np.testing.assert_allclose(np.array(out), ref, atol=1e-5)
    np.testing.assert_allclose(np.array(w), ref_w, atol=1e-6)


def _kernels(mha):
    return [keras.ops.convert_to_numpy(t)
            for t in (mha.query_kernel, mha.key_kernel, mha.value_kernel, mha.output_kernel)]


def test_attention_projections_start_distinct_with_glorot_scale():
    # Keras' random initializers repeat their values for every weight of one shape; a
    # shared instance once started every layer with W^Q = W^K = W^V
    keras.utils.set_random_seed(11)
    mha = MultiHeadAttention(num_heads=4, key_dim=32)
    mha.build((None, None, 128))
    kernels = _kernels(mha)
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.allclose(kernels[i], kernels[j]), (i, j)
    limit = math.sqrt(6 / (128 + 128))  # Glorot uniform
    for kernel in kernels:
        assert np.abs(kernel).max() <= limit
        assert abs(kernel.std() - limit / math.sqrt(3)) < 0.05 * limit
    # same global seed, same kernels: the fresh seeds come from the seeded Python RNG
    keras.utils.set_random_seed(11)
    again = MultiHeadAttention(num_heads=4, key_dim=32)
    again.build((None, None, 128))
    for a, b in zip(kernels, _kernels(again)):
        np.testing.assert_array_equal(a, b)


def test_attention_seeded_initializer_is_reproducible_and_distinct_per_projection():
    def build(seed, scale=1.0):
        init = keras.initializers.VarianceScaling(scale, "fan_avg", "uniform", seed=seed)
        mha = MultiHeadAttention(num_heads=2, key_dim=8, kernel_initializer=init,
                                 output_kernel_initializer="zeros")
        mha.build((None, None, 16))
        return _kernels(mha)

    first, second = build(5), build(5)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert not np.allclose(first[0], first[1]) and not np.allclose(first[1], first[2])
    assert not first[3].any()  # W^O has its own initializer
    # VarianceScaling's scale is the squared gain: gain 1/sqrt(2) halves the variance
    half = build(5, scale=0.5)
    assert np.abs(half[0]).max() <= math.sqrt(0.5 * 6 / 32)
    assert abs(np.concatenate(half[:3]).std() / np.concatenate(first[:3]).std() - math.sqrt(0.5)) < 0.1


def test_tied_query_key_init_starts_equal_then_trains_apart():
    keras.utils.set_random_seed(2)
    layer = EncoderLayer(num_heads=4, key_dim=8, d_ff=32, dropout=0.0, attention_init="tied_qk")
    x = np.random.default_rng(0).normal(size=(2, 5, 32)).astype("float32")
    layer(x)
    q, k, v, o = _kernels(layer.self_attention)
    np.testing.assert_array_equal(q, k)
    assert not np.allclose(q, v) and not np.allclose(q, o)
    # W W^T of a Glorot-uniform 32 x 32 W: diagonal about 1, off-diagonal about 0
    gram = q @ q.T
    assert abs(np.diag(gram).mean() - 1) < 0.15 and np.abs(gram - np.diag(np.diag(gram))).mean() < 0.2
    # untied from the start of training: the gradients of W^Q and W^K differ
    import tensorflow as tf
    with tf.GradientTape() as tape:
        loss = keras.ops.sum(layer(x) * x[..., ::-1])
    gq, gk = tape.gradient(loss, [layer.self_attention.query_kernel, layer.self_attention.key_kernel])
    assert not np.allclose(np.array(gq), np.array(gk))
    plain = DecoderLayer(num_heads=4, key_dim=8, d_ff=32)
    plain(x, x)
    assert not np.allclose(*_kernels(plain.cross_attention)[:2])
    tied = DecoderLayer(num_heads=4, key_dim=8, d_ff=32, attention_init="tied_qk")
    tied(x, x)
    np.testing.assert_array_equal(*_kernels(tied.cross_attention)[:2])
    with pytest.raises(ValueError, match="attention_init='mimetic'"):
        EncoderLayer(num_heads=4, key_dim=8, attention_init="mimetic")


def test_feed_forward_matches_formula():
    rng = np.random.default_rng(4)
    ffn = PositionwiseFeedForward(d_ff=16)
    x = rng.normal(size=(2, 3, 8)).astype("float32")
    out = np.array(ffn(x))
    w1, b1, w2, b2 = (keras.ops.convert_to_numpy(t)
                      for t in (ffn.inner_kernel, ffn.inner_bias, ffn.outer_kernel, ffn.outer_bias))
    np.testing.assert_allclose(out, np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5)


def test_shared_embedding_scales_and_ties():
    emb = SharedEmbedding(vocab_size=11, d_model=4)
    ids = np.array([[1, 5, 0]])
    x = np.array(emb(ids))
    table = keras.ops.convert_to_numpy(emb.embeddings)
    np.testing.assert_allclose(x, table[ids] * 2.0, atol=1e-6)
    np.testing.assert_allclose(np.array(emb.logits(x)), x @ table.T, atol=1e-5)


def test_learned_positions_add_table_rows():
    layer = LearnedPositionalEmbedding(max_length=10)
    x = np.zeros((1, 4, 3), "float32")
    out = np.array(layer(x, start_index=2))
    np.testing.assert_allclose(out[0], keras.ops.convert_to_numpy(layer.table)[2:6])


def test_causal_mask_is_lower_triangular():
    np.testing.assert_array_equal(np.array(causal_mask(5)), np.tril(np.ones((5, 5), bool)))


def _roundtrip(layer, *inputs):
    out = layer(*inputs)
    config = layer.get_config()
    clone = layer.__class__.from_config(config)
    assert clone.get_config() == config
    clone(*inputs)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(np.array(clone(*inputs)), np.array(out), atol=1e-6)


def test_get_config_round_trips_for_every_layer():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(2, 5, 16)).astype("float32")
    m = rng.normal(size=(2, 4, 16)).astype("float32")
    _roundtrip(MultiHeadAttention(num_heads=2, key_dim=3, value_dim=5, output_dim=16, use_bias=True), x, m)
    _roundtrip(PositionwiseFeedForward(d_ff=8, relu_dropout=0.1), x)
    _roundtrip(SharedEmbedding(vocab_size=9, d_model=16), np.array([[1, 2, 3]]))
    _roundtrip(SinusoidalPositionalEncoding(max_wavelength=500.0), x)
    _roundtrip(LearnedPositionalEmbedding(max_length=7), x)
    _roundtrip(PositionwiseFeedForward(d_ff=8, init="fan_in_uniform"), x)
    settings = dict(num_heads=2, key_dim=8, value_dim=6, d_ff=32, dropout=0.2, layer_norm_epsilon=1e-5,
                    attention_bias=True, qkv_init_gain=0.5, attention_init="tied_qk", ffn_init="fan_in_uniform")
    _roundtrip(EncoderLayer(**settings), x)
    _roundtrip(DecoderLayer(**settings), x, m)
    _roundtrip(Encoder(num_layers=2, **settings), x)
    _roundtrip(Decoder(num_layers=2, **settings), x, m)


def test_encoder_layer_is_post_layer_norm():
    """Output rows have zero mean / unit variance (LayerNorm last, gamma=1, beta=0)."""
    layer = EncoderLayer(num_heads=2, key_dim=4, d_ff=16, dropout=0.0)
    out = np.array(layer(np.random.default_rng(6).normal(size=(2, 5, 8)).astype("float32")))
    np.testing.assert_allclose(out.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(-1), 1, atol=1e-3)


def test_dropout_only_in_training():
    layer = EncoderLayer(num_heads=2, key_dim=4, d_ff=16, dropout=0.5)
    x = np.random.default_rng(7).normal(size=(2, 5, 8)).astype("float32")
    a, b = np.array(layer(x, training=False)), np.array(layer(x, training=False))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(np.array(layer(x, training=True)), a)


@pytest.mark.parametrize("dtype", ["float32", "mixed_float16"])
def test_layer_norm_equals_keras_layer_normalization_values_and_gradients(dtype):
    """LayerNorm (closed-form gradient under TensorFlow) == keras.layers.LayerNormalization:
    outputs and the gradients to the input, gamma and beta; same weights, interchangeable."""
    import tensorflow as tf

    from tf_transformer.layers.normalization import LayerNorm

    rng = np.random.default_rng(11)
    x = tf.constant(rng.normal(size=(3, 7, 16)).astype("float32") * 3 + 1)
    w = tf.constant(rng.normal(size=(3, 7, 16)).astype("float32"))
    ours, theirs = LayerNorm(epsilon=1e-6, dtype=dtype), keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype)
    ours.build(x.shape)
    theirs.build(x.shape)
    assert [v.path.split("/")[-1] for v in ours.weights] == [v.path.split("/")[-1] for v in theirs.weights]
    theirs.set_weights([rng.normal(size=16).astype("float32"), rng.normal(size=16).astype("float32")])
    ours.set_weights(theirs.get_weights())

    def run(layer):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            objective = tf.reduce_sum(tf.cast(y, "float32") * w)
        grads = tape.gradient(objective, [x] + layer.trainable_variables)
        return y.numpy().astype("float32"), [tf.convert_to_tensor(g).numpy().astype("float32") for g in grads]

    (y1, g1), (y2, g2) = run(ours), run(theirs)
    tol = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(y1, y2, atol=tol * 10)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a, b, atol=tol * 10, rtol=tol)
    assert ours.compute_dtype == theirs.compute_dtype and y1.dtype == y2.dtype


def test_layer_norm_other_axes_fall_back_to_keras():
    from tf_transformer.layers.normalization import LayerNorm

    x = np.random.default_rng(12).normal(size=(2, 3, 4)).astype("float32")
    ours, theirs = LayerNorm(axis=1), keras.layers.LayerNormalization(axis=1)
    np.testing.assert_allclose(np.array(ours(x)), np.array(theirs(x)), atol=1e-6)
    x_hat = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-3)
    np.testing.assert_allclose(np.array(ours(x)), x_hat, atol=1e-5)


def test_linear_gives_the_bits_of_keras_matmul_with_fewer_graph_ops():
    # linear() is the one 2-D MatMul that keras.ops.matmul (tf.tensordot on TensorFlow)
    # wraps in shape ops: the same numbers to the bit, for static and run-time shapes, with
    # and without bias, and "rows" gives the 2-D product.
    import tensorflow as tf

    from tf_transformer.layers.linear import leading_shape, linear

    rng = np.random.default_rng(0)
    w = rng.normal(size=(16, 24)).astype("float32")
    b = rng.normal(size=(24,)).astype("float32")
    for shape in ((5, 16), (3, 7, 16), (2, 3, 4, 16)):
        x = rng.normal(size=shape).astype("float32")
        want = np.asarray(keras.ops.matmul(x, w)) + b
        np.testing.assert_array_equal(np.asarray(linear(x, w, b)), want)
        np.testing.assert_allclose(np.asarray(linear(x, w)), x @ w, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(linear(x, w, b, lead="rows")), want.reshape(-1, 24))
    with pytest.raises(ValueError, match="lead='cols'"):
        linear(x, w, lead="cols")

    spec = tf.TensorSpec([None, None, 16], tf.float32)

    def ops_of(fn):
        graph = tf.function(fn, input_signature=[spec], autograph=False).get_concrete_function().graph
        return [n.op for n in graph.as_graph_def().node]

    x = rng.normal(size=(3, 7, 16)).astype("float32")
    traced = tf.function(lambda t: linear(t, w, b), input_signature=[spec], autograph=False)
    np.testing.assert_array_equal(traced(x).numpy(), np.asarray(keras.ops.matmul(x, w)) + b)
    assert traced.get_concrete_function().output_shapes.as_list() == [None, None, 24]
    # run-time batch and length: tensordot's shape arithmetic (gathers, products, a
    # transpose) is what linear() leaves out; one MatMul either way
    ours, theirs = ops_of(lambda t: linear(t, w, b)), ops_of(lambda t: keras.ops.matmul(t, w) + b)
    assert ours.count("MatMul") == theirs.count("MatMul") == 1
    assert not {"GatherV2", "Prod", "Transpose"} & set(ours) and {"GatherV2", "Prod"} <= set(theirs)
    assert len(ours) < len(theirs)
    assert ours.count("Shape") == 1  # batch and length both unknown: one read of the shape for both
    # a decoding step ([batch, 1, d]): the one unknown size is the reshape's -1, no shape op
    step = tf.TensorSpec([None, 1, 16], tf.float32)
    graph = tf.function(lambda t: linear(t, w, b), input_signature=[step], autograph=False).get_concrete_function()
    assert "Shape" not in [n.op for n in graph.graph.as_graph_def().node]
    assert graph.output_shapes.as_list() == [None, 1, 24]
    assert leading_shape(np.zeros((2, 3, 4, 5)), (0, 2)) == (2, 4)


def test_linear_and_attention_keep_the_length_of_an_empty_batch():
    # MirroredStrategy can hand a replica a batch of 0 sentences: every reshape must keep the
    # run-time length, which a -1 cannot infer from an empty tensor.
    import tensorflow as tf

    from tf_transformer.layers import MultiHeadAttention
    from tf_transformer.layers.linear import linear

    w = np.ones((8, 6), "float32")
    spec = tf.TensorSpec([None, None, 8], tf.float32)
    f = tf.function(lambda t: linear(t, w), input_signature=[spec], autograph=False)
    assert tuple(f(np.zeros((0, 5, 8), "float32")).shape) == (0, 5, 6)
    mha = MultiHeadAttention(num_heads=2, key_dim=4)
    mha(np.zeros((1, 3, 8), "float32"))
    g = tf.function(lambda t: mha(t), input_signature=[spec], autograph=False)
    assert tuple(g(np.zeros((0, 3, 8), "float32")).shape) == (0, 3, 8)
    assert tuple(g(np.ones((2, 3, 8), "float32")).shape) == (2, 3, 8)


def test_attention_scores_in_a_functional_model_equal_the_eager_call():
    """``return_attention_scores=True`` on ``keras.Input``: the symbolic call returns the nested
    structure (output, weights) with the right shapes, and the functional model computes what
    the eager layers do."""
    q_in, m_in = keras.Input((None, 16)), keras.Input((None, 16))
    mha = MultiHeadAttention(4, 4)
    out, weights = mha(q_in, m_in, return_attention_scores=True)
    assert tuple(out.shape) == (None, None, 16) and tuple(weights.shape) == (None, 4, None, None)
    encoder = Encoder(2, 4, 4, d_ff=32, dropout=0.0)
    enc_out, enc_weights = encoder(q_in, return_attention_scores=True)
    assert len(enc_weights) == 2 and all(tuple(w.shape) == (None, 4, None, None) for w in enc_weights)
    decoder = Decoder(1, 4, 4, d_ff=32, dropout=0.0)
    dec_out, dec_weights = decoder(q_in, m_in, return_attention_scores=True)
    (self_w, cross_w), = dec_weights
    assert tuple(self_w.shape) == (None, 4, None, None) and tuple(cross_w.shape) == (None, 4, None, None)
    model = keras.Model([q_in, m_in], [out, weights, enc_out, *enc_weights, dec_out, self_w, cross_w])

    rng = np.random.default_rng(0)
    q, m = rng.normal(size=(2, 5, 16)).astype("float32"), rng.normal(size=(2, 7, 16)).astype("float32")
    got = [np.asarray(t) for t in model([q, m])]
    eager_out, eager_w = mha(q, m, return_attention_scores=True)
    eager_enc, eager_enc_w = encoder(q, return_attention_scores=True)
    eager_dec, ((eager_self, eager_cross),) = decoder(q, m, return_attention_scores=True)
    want = [eager_out, eager_w, eager_enc, *eager_enc_w, eager_dec, eager_self, eager_cross]
    assert [g.shape for g in got] == [(2, 5, 16), (2, 4, 5, 7), (2, 5, 16), (2, 4, 5, 5), (2, 4, 5, 5),
                                      (2, 5, 16), (2, 4, 5, 5), (2, 4, 5, 7)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), atol=1e-5)


def test_attention_mask_of_rank_two_is_refused():
    """A ``[batch, k]`` padding mask broadcasts against the query axis when batch == q_length and
    would mask the wrong keys: it is refused with the shapes that work."""
    mha = MultiHeadAttention(2, 4)
    x = np.ones((3, 3, 8), "float32")
    refused = (r"attention_mask must be \[batch, q_length, k_length\].*got shape \(3, 3\)"
               r".*causal_mask\(length\)\) mask\[None\]")
    with pytest.raises(ValueError, match=refused):
        mha(x, attention_mask=np.ones((3, 3), bool))
    padding = np.array([[1, 1, 0], [1, 0, 0], [1, 1, 1]], bool)
    masked = np.asarray(mha(x + np.arange(3, dtype="float32")[None, :, None], attention_mask=padding[:, None, :]))
    changed = x + np.arange(3, dtype="float32")[None, :, None]
    changed[0, 2] += 5.0  # a padded key of sentence 0
    np.testing.assert_allclose(np.asarray(mha(changed, attention_mask=padding[:, None, :]))[0, :2], masked[0, :2],
                               atol=1e-6)


def test_wrong_shapes_and_sizes_get_errors_that_name_them():
    from tf_transformer.model import Transformer

    with pytest.raises(ValueError, match=r"query must be \[batch, length, features\].*\(2, 32\)"):
        MultiHeadAttention(4, 8)(np.ones((2, 32), "float32"))
    with pytest.raises(ValueError, match=r"\[batch, length, features\].*\(5, 32\)"):
        EncoderLayer(4, 8, d_ff=16)(np.ones((5, 32), "float32"))
    for kwargs, message in (({"num_heads": 0, "key_dim": 4}, "num_heads=0 must be >= 1"),
                            ({"num_heads": 2, "key_dim": 0}, "key_dim=0 must be >= 1"),
                            ({"num_heads": -1, "key_dim": 4}, "num_heads=-1 must be >= 1"),
                            ({"num_heads": 2, "key_dim": 4, "dropout": 1.0}, r"dropout=1.0 must be in \[0, 1\)")):
        with pytest.raises(ValueError, match=message):
            MultiHeadAttention(**kwargs)
    mha = MultiHeadAttention(4, 8)
    mha(np.ones((1, 2, 32), "float32"))
    with pytest.raises(ValueError, match="query has 16 features but the layer was built for 32"):
        mha(np.ones((1, 2, 16), "float32"))
    for field, value in (("num_heads", 0), ("d_model", -8), ("num_layers", 0), ("vocab_size", 2.5)):
        with pytest.raises(ValueError, match=f"{field}={value!r}: expected a positive integer"):
            Transformer(**{"vocab_size": 50, "d_model": 16, "num_heads": 2, field: value})
    model = Transformer(50, d_model=16, num_layers=1, num_heads=2, d_ff=32)
    with pytest.raises(ValueError, match=r"called on a pair \(source_ids.*got one tensor of shape \(2, 5\)"):
        model(np.ones((2, 5), "int32"))


def test_length_one_sequences_raise_no_softmax_warning():
    """A one-token source (or target) attends over one key: Keras' warning that such a softmax is
    constant is right but useless here, and was printed once per attention layer."""
    from tf_transformer.model import Transformer

    model = Transformer(50, d_model=16, num_layers=2, num_heads=2, d_ff=32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logits = model((np.array([[7]]), np.array([[2]])))
    assert tuple(logits.shape) == (1, 1, 50)
    assert not [w for w in caught if "softmax" in str(w.message)], [str(w.message) for w in caught]


def test_decoder_layer_is_causal_without_a_mask():
    """A ``DecoderLayer`` called without ``self_mask`` masks its self-attention causally (the
    paper's masked self-attention): a change at position 3 leaves positions 0-2 as they were, the
    weights above the diagonal are 0, and the output equals that with ``causal_mask`` given."""
    layer = DecoderLayer(num_heads=2, key_dim=4, d_ff=16)
    rng = np.random.default_rng(3)
    x, memory = rng.normal(size=(2, 5, 8)).astype("float32"), rng.normal(size=(2, 4, 8)).astype("float32")
    out, (self_weights, _) = layer(x, memory, return_attention_scores=True)
    changed = x.copy()
    changed[:, 3] += 10.0
    np.testing.assert_allclose(np.asarray(layer(changed, memory))[:, :3], np.asarray(out)[:, :3], atol=1e-5)
    assert np.abs(np.asarray(layer(changed, memory))[:, 3] - np.asarray(out)[:, 3]).max() > 1e-2
    np.testing.assert_array_equal(np.triu(np.asarray(self_weights), k=1), 0.0)
    explicit = layer(x, memory, self_mask=causal_mask(5)[None, None])
    np.testing.assert_allclose(np.asarray(explicit), np.asarray(out), atol=1e-6)
    full = layer(x, memory, self_mask=np.ones((1, 1, 5, 5), bool))  # a given mask replaces the causal one
    assert np.abs(np.asarray(full)[:, 0] - np.asarray(out)[:, 0]).max() > 1e-3
