"""One contract every public layer meets, checked by :func:`run_layer_test` (in the spirit of
keras-hub's ``run_layer_test``): it builds, has the output shape it declares, its config
round-trips, it survives ``.keras`` serialization with equal outputs, and it runs under the
``mixed_float16`` policy with float32 weights and float16 outputs."""

from __future__ import annotations

import keras
import numpy as np


def _outputs(layer, inputs):
    return keras.ops.convert_to_numpy(layer(*inputs)).astype("float32")


def run_layer_test(cls, init_kwargs: dict, inputs: tuple, expected_output_shape: tuple, tmp_path,
                   expected_num_weights: int | None = None, atol: float = 1e-6):
    """Check ``cls(**init_kwargs)`` called on ``inputs`` (NumPy arrays, positional) against the
    contract; returns the built layer. ``expected_num_weights``: how many variables it makes."""
    keras.utils.set_random_seed(7)
    layer = cls(**init_kwargs)
    out = _outputs(layer, inputs)

    # build and output shape
    assert layer.built, f"{cls.__name__} is not built after a call"
    assert tuple(out.shape) == tuple(expected_output_shape), (cls.__name__, out.shape, expected_output_shape)
    assert np.all(np.isfinite(out)), f"{cls.__name__}: non-finite outputs"
    if expected_num_weights is not None:
        assert len(layer.weights) == expected_num_weights, [w.path for w in layer.weights]
    try:
        declared = layer.compute_output_shape(*[x.shape for x in inputs])
    except NotImplementedError:
        declared = None
    if declared is not None:
        assert tuple(declared) == tuple(expected_output_shape), (cls.__name__, declared)

    # get_config round trip: same config, same outputs with the same weights
    config = layer.get_config()
    clone = cls.from_config(config)
    assert clone.get_config() == config
    clone(*inputs)
    clone.set_weights(layer.get_weights())
    np.testing.assert_allclose(_outputs(clone, inputs), out, atol=atol)

    # serialization by registered name, and a .keras file round trip
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is cls and revived.get_config() == config
    symbolic = [keras.Input(shape=x.shape[1:], batch_size=x.shape[0], dtype=str(x.dtype)) for x in inputs]
    model = keras.Model(symbolic, layer(*symbolic))
    path = tmp_path / f"{cls.__name__}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    loaded_layer = next(x for x in loaded.layers if isinstance(x, cls))
    assert loaded_layer.get_config() == config
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(list(inputs))).astype("float32"), out, atol=atol)

    # mixed precision: float32 variables, float16 computation and outputs
    mixed = cls(**init_kwargs, dtype="mixed_float16")
    y = mixed(*inputs)
    assert keras.backend.standardize_dtype(y.dtype) == "float16", (cls.__name__, y.dtype)
    assert all(keras.backend.standardize_dtype(w.dtype) == "float32" for w in mixed.weights)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(y).astype("float32")))
    return layer
