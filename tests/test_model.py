"""The Transformer: causality, padding invariance, cached decoding, save/load."""

import keras
import numpy as np
import pytest
from keras import ops

from tf_transformer.config import load_config
from tf_transformer.model import Transformer, count_parameters

V = 40


def small_model(**kw):
    args = dict(vocab_size=V, d_model=32, num_layers=2, num_heads=4, d_ff=64, dropout=0.1)
    args.update(kw)
    return Transformer(**args)


def batch(seed=0, b=3, s=7, t=6):
    rng = np.random.default_rng(seed)
    src = rng.integers(4, V, size=(b, s)).astype("int32")
    src[0, 4:] = 0
    tgt = rng.integers(4, V, size=(b, t)).astype("int32")
    tgt[:, 0] = 2
    return src, tgt


def np_(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("position_encoding", ["sinusoidal", "learned"])
def test_causality(position_encoding):
    model = small_model(position_encoding=position_encoding)
    src, tgt = batch()
    base = np_(model((src, tgt)))
    for i in range(tgt.shape[1] - 1):
        changed = tgt.copy()
        changed[:, i + 1:] = np.random.default_rng(i).integers(0, V, size=changed[:, i + 1:].shape)
        out = np_(model((src, changed)))
        np.testing.assert_allclose(out[:, : i + 1], base[:, : i + 1], atol=1e-5)
        assert not np.allclose(out[:, i + 1:], base[:, i + 1:], atol=1e-5)


def test_source_padding_does_not_change_outputs():
    model = small_model()
    src, tgt = batch()
    base = np_(model((src, tgt)))
    padded = np.concatenate([src, np.zeros((src.shape[0], 5), "int32")], axis=1)
    np.testing.assert_allclose(np_(model((padded, tgt))), base, atol=1e-5)
    memory, mask = model.encode(src)
    memory_padded, _ = model.encode(padded)
    real = src != 0
    np.testing.assert_allclose(np_(memory_padded)[:, :7][real], np_(memory)[real], atol=1e-5)


def test_target_padding_does_not_change_real_positions():
    model = small_model()
    src, tgt = batch()
    base = np_(model((src, tgt)))
    padded = np.concatenate([tgt, np.zeros((tgt.shape[0], 3), "int32")], axis=1)
    np.testing.assert_allclose(np_(model((src, padded)))[:, : tgt.shape[1]], base, atol=1e-5)


@pytest.mark.parametrize("position_encoding", ["sinusoidal", "learned"])
def test_cached_incremental_decoding_equals_full_pass(position_encoding):
    model = small_model(position_encoding=position_encoding, key_dim=6, value_dim=10)
    src, tgt = batch(seed=1, t=9)
    full = np_(model((src, tgt)))
    memory, mask = model.encode(src)
    cache = model.init_cache(memory, mask, max_length=12)
    assert np_(cache["layer_0"]["cross_key"]).shape == (3, 4, 7, 6)
    assert np_(cache["layer_1"]["self_value"]).shape == (3, 4, 12, 10)
    for step in range(tgt.shape[1]):
        logits, cache = model.decode_step(ops.convert_to_tensor(tgt[:, step]), ops.convert_to_tensor(step), cache)
        np.testing.assert_allclose(np_(logits), full[:, step], atol=1e-5)


def test_attention_biases_work_through_cache_save_and_count(tmp_path):
    model = small_model(key_dim=6, value_dim=10, attention_bias=True, dropout=0.0)
    src, tgt = batch(seed=2, t=8)
    model((src, tgt))
    rng = np.random.default_rng(7)
    biases = [w for w in model.weights if w.path.endswith("_bias") and "attention" in w.path]
    assert len(biases) == 4 * 3 * 2  # q, k, v, o in 3 attention layers of each of 2 layer pairs
    for w in biases:  # off their zero start, so a path that drops them would show
        w.assign(rng.normal(0, 0.5, w.shape).astype("float32"))
    full = np_(model((src, tgt)))
    memory, mask = model.encode(src)
    cache = model.init_cache(memory, mask, max_length=10)
    for step in range(tgt.shape[1]):
        logits, cache = model.decode_step(ops.convert_to_tensor(tgt[:, step]), ops.convert_to_tensor(step), cache)
        np.testing.assert_allclose(np_(logits), full[:, step], atol=1e-5)
    model.save(tmp_path / "b.keras")
    loaded = keras.saving.load_model(tmp_path / "b.keras")
    assert loaded.attention_bias and loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(np_(loaded((src, tgt))), full)
    d, h, dk, dv = 32, 4, 6, 10
    plain = small_model(key_dim=6, value_dim=10)
    plain.build()
    # 6 attention layers (1 per encoder layer, 2 per decoder layer), each with 4 bias vectors
    assert count_parameters(model) == count_parameters(plain) + 6 * (2 * h * dk + h * dv + d)


def test_qkv_init_gain_scales_query_key_value_kernels_only():
    def kernels(gain):
        keras.utils.set_random_seed(4)
        model = small_model(d_model=128, num_heads=4, qkv_init_gain=gain)
        model.build()
        attention = model.decoder.layers[0].cross_attention
        return (np.concatenate([np_(attention.query_kernel), np_(attention.key_kernel), np_(attention.value_kernel)]),
                np_(attention.output_kernel))

    (qkv1, out1), (qkv2, out2) = kernels(1.0), kernels(2 ** -0.5)
    limit = np.sqrt(6 / 256)  # Glorot uniform over 128 -> 128
    assert np.abs(qkv1).max() <= limit and np.abs(qkv2).max() <= limit * 2 ** -0.5
    assert abs(qkv2.std() / qkv1.std() - 2 ** -0.5) < 0.03
    assert abs(out2.std() / out1.std() - 1) < 0.05 and np.abs(out2).max() > limit * 2 ** -0.5


def test_ffn_init_fan_in_uniform_is_torch_linears_default():
    # fan_in_uniform: every FFN kernel and bias uniform in +-1/sqrt(fan_in) (PyTorch's nn.Linear
    # default, fairseq's FFN); glorot_uniform: Glorot-uniform kernels, zero biases. Each weight
    # its own draw; the attention projections are not touched.
    def ffn_weights(init):
        keras.utils.set_random_seed(3)
        model = small_model(d_model=128, num_heads=4, d_ff=256, ffn_init=init)
        model.build()
        ffns = [layer.ffn for layer in model.encoder.layers + model.decoder.layers]
        return ffns, np_(model.encoder.layers[0].self_attention.query_kernel)

    ffns, q_fan = ffn_weights("fan_in_uniform")
    for ffn in ffns:
        for weight, fan_in in ((ffn.inner_kernel, 128), (ffn.inner_bias, 128), (ffn.outer_kernel, 256),
                               (ffn.outer_bias, 256)):
            w = np_(weight)
            limit = fan_in ** -0.5
            assert np.abs(w).max() <= limit and np.abs(w).max() > 0.95 * limit, weight.path
            assert abs(w.std() / (limit / np.sqrt(3)) - 1) < (0.05 if w.ndim == 2 else 0.2), weight.path
    assert not np.allclose(np_(ffns[0].inner_kernel), np_(ffns[1].inner_kernel))
    assert not np.allclose(np_(ffns[0].inner_bias), np_(ffns[1].inner_bias))
    glorot, q_glorot = ffn_weights("glorot_uniform")
    limit = np.sqrt(6 / (128 + 256))
    for ffn in glorot:
        assert np.abs(np_(ffn.inner_kernel)).max() <= limit and np.abs(np_(ffn.outer_kernel)).max() > 0.95 * limit
        assert not np_(ffn.inner_bias).any() and not np_(ffn.outer_bias).any()
    assert abs(q_fan.std() / q_glorot.std() - 1) < 0.05  # attention kernels: Glorot under both
    assert Transformer.from_config(small_model(ffn_init="fan_in_uniform").get_config()).ffn_init == "fan_in_uniform"


@pytest.mark.parametrize("max_length", [None, 12])  # the growing and the preallocated cache
def test_step_weights_give_the_same_steps(max_length):
    # decode_step with the weights prepared once (what the decoding loop passes) must give
    # the very logits and cache of the step that reads the variables itself.
    model = small_model(key_dim=6, value_dim=10)
    src, tgt = batch(seed=3, t=5)
    weights = model.step_weights()
    assert np_(weights["output_kernel"]).shape == (model.d_model, model.vocab_size)
    np.testing.assert_array_equal(np_(weights["output_kernel"]), np_(model.output_table).T)
    memory, mask = model.encode(src)
    plain = prepared = model.init_cache(memory, mask, max_length=max_length)
    for step in range(tgt.shape[1]):
        token, at = ops.convert_to_tensor(tgt[:, step]), ops.convert_to_tensor(step)
        logits, plain = model.decode_step(token, at, plain)
        logits_w, prepared = model.decode_step(token, at, prepared, weights=weights)
        np.testing.assert_array_equal(np_(logits_w), np_(logits))
        for a, b in zip(keras.tree.flatten(prepared), keras.tree.flatten(plain)):
            np.testing.assert_array_equal(np_(a), np_(b))


def test_cached_decoding_inside_tf_function():
    import tensorflow as tf

    model = small_model()
    src, tgt = batch(seed=2)
    full = np_(model((src, tgt)))
    memory, mask = model.encode(src)

    @tf.function
    def run(cache):
        def body(step, cache, out):
            logits, cache = model.decode_step(tf.gather(tgt, step, axis=1), step, cache)
            return step + 1, cache, out.write(step, logits)
        _, _, out = tf.while_loop(lambda s, c, o: s < tgt.shape[1], body,
                                  (tf.constant(0), cache, tf.TensorArray(tf.float32, size=tgt.shape[1])))
        return tf.transpose(out.stack(), (1, 0, 2))

    np.testing.assert_allclose(run(model.init_cache(memory, mask, 8)).numpy(), full, atol=1e-5)


def test_keras_file_round_trip(tmp_path):
    model = small_model(position_encoding="learned", key_dim=5, value_dim=7)
    src, tgt = batch()
    out = np_(model((src, tgt)))
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, Transformer)
    assert loaded.get_config() == model.get_config()
    np.testing.assert_array_equal(np_(loaded((src, tgt))), out)


def test_weights_round_trip_into_built_model(tmp_path):
    model = small_model()
    src, tgt = batch()
    out = np_(model((src, tgt)))
    model.save_weights(tmp_path / "w.weights.h5")
    other = Transformer.from_config(model.get_config())
    other.build()
    other.load_weights(tmp_path / "w.weights.h5")
    np.testing.assert_array_equal(np_(other((src, tgt))), out)


def test_from_config_section_and_config_property():
    cfg = load_config("multi30k_small", ["model.vocab_size=100", "model.num_layers=1"])
    model = Transformer.from_config_section(cfg.model)
    assert model.config.resolved() == cfg.model.resolved()
    assert model.key_dim == 64 and model.value_dim == 64


def test_parameter_count_formula():
    d, h, dk, dv, f, n, v = 32, 4, 6, 10, 64, 2, V
    model = small_model(key_dim=dk, value_dim=dv)
    model.build()
    attn = d * h * dk * 2 + d * h * dv + h * dv * d
    ffn = d * f + f + f * d + d
    ln = 2 * d
    expected = v * d + n * (attn + ffn + 2 * ln) + n * (2 * attn + ffn + 3 * ln)
    assert count_parameters(model) == expected


def test_shared_table_is_the_only_embedding():
    model = small_model()
    model.build()
    tables = [w for w in model.weights if tuple(w.shape) == (V, 32)]
    assert len(tables) == 1


def test_mixed_precision_forward_is_finite_and_float32():
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        model = small_model()
        src, tgt = batch()
        out = model((src, tgt))
        assert keras.backend.standardize_dtype(out.dtype) == "float32"
        assert np.isfinite(np_(out)).all()
    finally:
        keras.mixed_precision.set_dtype_policy("float32")


@pytest.mark.parametrize("row", ["table3/C1", "table3/C3", "table3/C6", "table3/B1"])
def test_table3_parameter_differences_match_the_paper(row):
    """Rows at d_model=512 differ from base by what the paper says (within its 1M rounding)."""
    from tf_transformer.paper import TABLE3
    from tf_transformer.params import count_preset

    ours = (count_preset(row) - count_preset("base")) / 1e6
    paper = TABLE3[row][2] - TABLE3["base"][2]
    assert abs(ours - paper) <= 1.0, (row, ours, paper)


def _word_dropped(model, ids, layer, training):
    """Per token: whether ``embed`` zeroed its embedding (only the positions left), and the
    embeddings themselves; ``dropout=0`` so that nothing else is random."""
    x = np_(model.embed(ids, training=training, word_dropout=layer))
    positions = np_(model.positions(ops.zeros((1, ids.shape[1], model.d_model))))[0]
    table = np_(model.embedding(ids))
    dropped = np.all(np.abs(x - positions) < 1e-6, axis=-1)
    return dropped, x, positions, table


def test_word_dropout_zeroes_whole_token_embeddings_in_training_only():
    rate = 0.25
    model = small_model(dropout=0.0, source_word_dropout=rate, target_word_dropout=0.5)
    model.build()
    ids = np.random.default_rng(3).integers(4, V, size=(64, 50)).astype("int32")
    dropped, x, positions, table = _word_dropped(model, ids, model.source_word_drop, training=True)
    # a kept token is its embedding scaled by 1 / (1 - rate), plus its position
    kept = ~dropped
    np.testing.assert_allclose(x[kept], (table / (1 - rate) + positions)[kept], rtol=1e-5, atol=1e-5)
    n = dropped.size
    assert abs(dropped.mean() - rate) < 4 * np.sqrt(rate * (1 - rate) / n)   # 3,200 tokens: +-0.03
    # the target side has its own rate
    assert abs(_word_dropped(model, ids, model.target_word_drop, True)[0].mean() - 0.5) < 0.04
    # at inference (and in decoding) nothing is dropped or scaled: the model equals one without
    src, tgt = batch()
    plain = small_model(dropout=0.0)
    plain.build()
    plain.set_weights(model.get_weights())
    np.testing.assert_array_equal(np_(model((src, tgt), training=False)), np_(plain((src, tgt), training=False)))
    assert not _word_dropped(model, ids, model.source_word_drop, training=False)[0].any()


def test_word_dropout_reaches_both_sides_of_a_training_pass():
    src, tgt = batch(b=2, s=7, t=6)
    src[0, 4:] = 5  # no padding: every position real
    for side in ("source", "target"):
        model = small_model(dropout=0.0, **{f"{side}_word_dropout": 0.5})
        reference = small_model(dropout=0.0)
        model.build()
        reference.build()
        reference.set_weights(model.get_weights())
        outs = [np_(model((src, tgt), training=True)) for _ in range(3)]
        # random in training (each call draws again), deterministic without it
        assert not np.allclose(outs[0], outs[1]) or not np.allclose(outs[1], outs[2])
        np.testing.assert_allclose(np_(model((src, tgt), training=False)),
                                   np_(reference((src, tgt), training=True)), atol=1e-5)


def test_word_dropout_config_round_trips_and_adds_seed_state_only_when_used(tmp_path):
    model = small_model(source_word_dropout=0.1, target_word_dropout=0.2)
    src, tgt = batch()
    out = np_(model((src, tgt)))
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert (loaded.source_word_dropout, loaded.target_word_dropout) == (0.1, 0.2)
    assert loaded.config.source_word_dropout == 0.1
    np.testing.assert_array_equal(np_(loaded((src, tgt))), out)

    from tf_transformer import compat
    plain, used = small_model(), small_model(source_word_dropout=0.1)
    plain.build()
    used.build()
    assert plain.source_word_drop is None and plain.target_word_drop is None
    assert len(compat.seed_generator_states(used)) == len(compat.seed_generator_states(plain)) + 1
    with pytest.raises(ValueError, match="source_word_dropout=1.0"):
        small_model(source_word_dropout=1.0)


def test_word_dropout_config_fields_are_checked():
    from tf_transformer.config import ConfigError
    with pytest.raises(ConfigError, match=r"model\.target_word_dropout=1\.5 must be in \[0, 1\)"):
        load_config("multi30k_tiny", ["model.target_word_dropout=1.5"])
    cfg = load_config("multi30k_tiny", ["model.source_word_dropout=0.1"])
    model = Transformer.from_config_section(cfg.model)
    assert model.source_word_dropout == 0.1 and model.target_word_dropout == 0.0
