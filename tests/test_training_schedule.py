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


def _adam_run(optimizer_cls, strategy=None, steps=6, **kwargs):
    """Variables after ``steps`` updates by ``optimizer_cls`` on fixed gradients, eagerly and
    inside a tf.function (the way Keras' fit calls it)."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    init = [rng.normal(size=(5, 3)).astype("float32"), rng.normal(size=(7,)).astype("float32")]
    grads = [[rng.normal(size=w.shape).astype("float32") * (i + 1) for w in init] for i in range(steps)]
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        variables = [keras.Variable(w) for w in init]
        opt = optimizer_cls(learning_rate=TransformerSchedule(16, 4, 3.0), beta_1=0.9, beta_2=0.98, epsilon=1e-9,
                            **kwargs)
        opt.build(variables)

    @tf.function
    def apply(g):
        opt.apply(g, variables)

    for i, g in enumerate(grads):
        g = [tf.constant(x) for x in g]
        if i % 2:
            strategy.run(apply, args=(g,)) if strategy.num_replicas_in_sync > 1 else apply(g)
        else:
            opt.apply(g, variables) if strategy.num_replicas_in_sync == 1 else strategy.run(apply, args=(g,))
    return [v.numpy() for v in variables], [m.numpy() for m in opt._momentums], [v.numpy() for v in opt._velocities]


def test_fused_adam_equals_keras_adam():
    """FusedAdam (one ResourceApplyAdam per variable) gives Keras Adam's weights and slots,
    eagerly and traced; its slots are Adam's (same names), so checkpoints interchange."""
    from tf_transformer.training.schedule import FusedAdam

    ours, reference = _adam_run(FusedAdam), _adam_run(keras.optimizers.Adam)
    for got, want in zip(ours, reference):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)  # float32 rounding; one update moves ~0.3
    assert not np.allclose(ours[0][0], _adam_run(keras.optimizers.Adam, steps=5)[0][0])  # the updates matter
    opt = make_optimizer(TrainConfig(), d_model=64)
    assert isinstance(opt, FusedAdam) and opt.name == "adam"
    opt.build([keras.Variable(np.zeros((2, 2), "float32"), name="w")])
    ref = keras.optimizers.Adam(learning_rate=TransformerSchedule(64, 4000))
    ref.build([keras.Variable(np.zeros((2, 2), "float32"), name="w")])
    assert [v.name for v in opt.variables] == [v.name for v in ref.variables] == ["iteration", "w_momentum",
                                                                                   "w_velocity"]
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert isinstance(restored, FusedAdam) and restored.get_config() == opt.get_config()


def test_fused_adam_equals_keras_adam_under_mirrored_strategy():
    import tensorflow as tf

    from tf_transformer.training.schedule import FusedAdam

    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    strategy = tf.distribute.MirroredStrategy(devices[:2]) if len(devices) >= 2 else tf.distribute.MirroredStrategy()
    ours, reference = _adam_run(FusedAdam, strategy), _adam_run(keras.optimizers.Adam, strategy)
    for got, want in zip(ours, reference):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=2e-6)  # float32 rounding; one update moves ~0.3
