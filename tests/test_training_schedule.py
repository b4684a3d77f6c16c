"""The paper's learning-rate schedule and Adam settings."""

import keras
import numpy as np
import pytest

from tf_transformer.config import TrainConfig
from tf_transformer.training.schedule import (
    TransformerSchedule,
    make_optimizer,
    paper_learning_rate,
)


def formula(step, d_model, warmup, scale=1.0):
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


@pytest.mark.parametrize("d_model,warmup,scale", [(512, 4000, 1.0), (1024, 4000, 1.0), (256, 800, 2.0)])
def test_schedule_matches_formula_at_1_warmup_and_4x_warmup(d_model, warmup, scale):
    schedule = TransformerSchedule(d_model, warmup, scale)
    for step in (1, warmup, 4 * warmup):
        # optimizer.iterations is 0-based: the paper's step s is iteration s-1
        got = float(schedule(step - 1))
        assert got == pytest.approx(formula(step, d_model, warmup, scale), rel=1e-6)
        assert paper_learning_rate(step, d_model, warmup, scale) == pytest.approx(formula(step, d_model, warmup, scale))
    # linear rise, peak at warmup, inverse-sqrt decay: lr(4w) = lr(w) / 2
    assert float(schedule(warmup - 1)) == pytest.approx(schedule.peak(), rel=1e-6)
    assert float(schedule(4 * warmup - 1)) == pytest.approx(schedule.peak() / 2, rel=1e-6)
    assert float(schedule(0)) == pytest.approx(schedule.peak() / warmup, rel=1e-6)


def test_base_peak_is_about_7e_minus_4():
    assert TransformerSchedule(512, 4000).peak() == pytest.approx(6.99e-4, rel=1e-3)


def test_schedule_serializes():
    schedule = TransformerSchedule(256, 800, 2.0)
    restored = keras.optimizers.schedules.deserialize(keras.optimizers.schedules.serialize(schedule))
    assert isinstance(restored, TransformerSchedule)
    assert restored.get_config() == {"d_model": 256, "warmup_steps": 800, "scale": 2.0}
    steps = np.array([0, 10, 799, 5000])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(restored(steps)),
                               keras.ops.convert_to_numpy(schedule(steps)))


def test_optimizer_is_paper_adam_on_the_schedule():
    opt = make_optimizer(TrainConfig(warmup_steps=100), d_model=64)
    assert isinstance(opt, keras.optimizers.Adam)
    assert (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.98, 1e-9)
    assert isinstance(opt._learning_rate, TransformerSchedule)
    assert opt.clipnorm is None and opt.global_clipnorm is None
    lso = make_optimizer(TrainConfig(mixed_precision="mixed_float16"), d_model=64)
    assert isinstance(lso, keras.optimizers.LossScaleOptimizer)
    assert isinstance(lso.inner_optimizer, keras.optimizers.Adam)


def test_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        TransformerSchedule(512, 0)
