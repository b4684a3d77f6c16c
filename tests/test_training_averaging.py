"""Checkpoint averaging (`tft average`) and the checkpoint callback's bookkeeping."""

import numpy as np
import pytest
from helpers.synthetic import tiny_config

from tf_transformer.errors import UserError
from tf_transformer.io import write_run_config as _write_config
from tf_transformer.training.averaging import average_checkpoints, average_run


def _model(cfg):
    from tf_transformer.model import Transformer

    model = Transformer.from_config_section(cfg.model)
    model.build()
    return model


def _write_run(tmp_path, steps=(100, 200, 300, 400)):
    cfg = tiny_config(16, str(tmp_path))
    cfg.model.num_layers = 1
    _write_config(cfg, tmp_path / "config.yaml")
    model = _model(cfg)
    rng = np.random.default_rng(0)
    written = {}
    for step in steps:
        weights = [rng.normal(size=w.shape).astype("float32") for w in model.weights]
        model.set_weights(weights)
        path = tmp_path / "checkpoints" / f"ckpt-{step}.weights.h5"
        path.parent.mkdir(exist_ok=True)
        model.save_weights(str(path))
        written[step] = weights
    return cfg, written


def test_average_is_the_arithmetic_mean(tmp_path):
    _, written = _write_run(tmp_path)
    result = average_run(tmp_path, last=3)
    assert result["steps"] == [200, 300, 400] and result["output"] == tmp_path / "averaged.keras"
    import keras

    averaged = keras.saving.load_model(str(result["output"]))
    expected = [np.mean([written[s][i] for s in (200, 300, 400)], axis=0) for i in range(len(written[100]))]
    for got, want in zip(averaged.get_weights(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert "averaged 3 checkpoint(s)" in result["summary"] and "200..400" in result["summary"]


def test_average_of_identical_weights_is_unchanged_and_weights_output(tmp_path):
    cfg, written = _write_run(tmp_path, steps=(5,))
    out = tmp_path / "avg.weights.h5"
    average_run(tmp_path, last=5, output=out)  # fewer checkpoints than asked: all of them
    model = _model(cfg)
    model.load_weights(str(out))
    for got, want in zip(model.get_weights(), written[5]):
        np.testing.assert_array_equal(got, want)


def test_average_errors(tmp_path):
    with pytest.raises(UserError, match="config.yaml"):
        average_run(tmp_path)
    _write_config(tiny_config(16), tmp_path / "config.yaml")
    with pytest.raises(UserError, match="no checkpoints"):
        average_run(tmp_path)
    with pytest.raises(UserError, match="no checkpoints"):
        average_checkpoints(None, [])
    # a wrong output name is refused before any checkpoint is read
    _write_run(tmp_path, steps=(7,))
    read = []
    import tf_transformer.training.averaging as averaging

    original = averaging.average_checkpoints
    averaging.average_checkpoints = lambda *a, **k: read.append(a) or original(*a, **k)
    try:
        with pytest.raises(UserError, match=r"output .*x\.h5: expected a name ending in \.keras or \.weights\.h5"):
            average_run(tmp_path, output=tmp_path / "x.h5")
    finally:
        averaging.average_checkpoints = original
    assert read == []
