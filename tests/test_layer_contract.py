"""Every public layer of tf_transformer.layers meets the shared layer contract
(helpers.layer_contract.run_layer_test: build, shapes, config, .keras round trip, mixed
precision)."""

import numpy as np
import pytest
from helpers.layer_contract import run_layer_test

import tf_transformer.layers as L

RNG = np.random.default_rng(3)
X = RNG.normal(size=(2, 5, 16)).astype("float32")
MEMORY = RNG.normal(size=(2, 4, 16)).astype("float32")
IDS = np.array([[4, 5, 6, 0, 0], [7, 8, 1, 2, 3]], "int32")
BLOCK = dict(num_heads=2, key_dim=8, value_dim=6, d_ff=32, dropout=0.1, attention_dropout=0.1, relu_dropout=0.1,
             layer_norm_epsilon=1e-5)

# (class, init kwargs, inputs, output shape, number of weights)
CASES = {
    "MultiHeadAttention": (L.MultiHeadAttention, dict(num_heads=2, key_dim=3, value_dim=5, use_bias=True),
                           (X, MEMORY), (2, 5, 16), 8),
    "PositionwiseFeedForward": (L.PositionwiseFeedForward, dict(d_ff=8, relu_dropout=0.1), (X,), (2, 5, 16), 4),
    "LayerNorm": (L.LayerNorm, dict(epsilon=1e-5), (X,), (2, 5, 16), 2),
    "SharedEmbedding": (L.SharedEmbedding, dict(vocab_size=9, d_model=16), (IDS,), (2, 5, 16), 1),
    "SinusoidalPositionalEncoding": (L.SinusoidalPositionalEncoding, dict(max_wavelength=500.0), (X,), (2, 5, 16), 0),
    "LearnedPositionalEmbedding": (L.LearnedPositionalEmbedding, dict(max_length=7), (X,), (2, 5, 16), 1),
    "EncoderLayer": (L.EncoderLayer, BLOCK, (X,), (2, 5, 16), 4 + 4 + 4),
    "DecoderLayer": (L.DecoderLayer, BLOCK, (X, MEMORY), (2, 5, 16), 4 + 4 + 4 + 6),
    "Encoder": (L.Encoder, dict(num_layers=2, **BLOCK), (X,), (2, 5, 16), 2 * 12),
    "Decoder": (L.Decoder, dict(num_layers=2, **BLOCK), (X, MEMORY), (2, 5, 16), 2 * 18),
}

BASES = {"SublayerSettings", "LayerStack"}  # bases of the blocks, not layers to use on their own
LAYER_CLASSES = {name for name in L.__all__ if isinstance(getattr(L, name), type) and name not in BASES}


def test_every_public_layer_has_a_case():
    assert set(CASES) == LAYER_CLASSES


@pytest.mark.parametrize("name", sorted(CASES))
def test_layer_contract(name, tmp_path):
    cls, kwargs, inputs, shape, weights = CASES[name]
    run_layer_test(cls, kwargs, inputs, shape, tmp_path, expected_num_weights=weights, atol=1e-5)


def test_block_settings_are_explicit_and_in_the_config():
    layer = L.EncoderLayer(**BLOCK)
    config = layer.get_config()
    for key in ("attention_dropout", "relu_dropout", "layer_norm_epsilon"):
        assert config[key] == BLOCK[key]
    assert layer.self_attention.dropout_rate == 0.1 and layer.ffn.relu_dropout == 0.1
    assert layer.ffn_norm.epsilon == 1e-5


def test_a_model_saved_before_the_restructuring_loads_with_the_same_outputs():
    """tests/data/transformer-0.1.0.keras was saved by the code before layers/ changed (a
    2+2-layer model with learned positions); the registered names and weight paths must
    still resolve, and the outputs must be the same."""
    from pathlib import Path

    import keras

    import tf_transformer.model  # noqa: F401  (registers the classes)

    data = Path(__file__).resolve().parent / "data"
    expected = np.load(data / "transformer-0.1.0.npz")
    model = keras.saving.load_model(data / "transformer-0.1.0.keras", compile=False)
    assert type(model).__name__ == "Transformer"
    assert type(model.encoder).__name__ == "Encoder" and len(model.encoder.layers) == 2
    logits = keras.ops.convert_to_numpy(model((expected["source"], expected["target"])))
    np.testing.assert_allclose(logits, expected["logits"], atol=1e-5)
