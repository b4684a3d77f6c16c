"""The paper's learning-rate schedule and optimizer (section 5.3).

``lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``: a linear rise for
``warmup`` steps, then decay with the inverse square root of the step number. The paper
numbers steps from 1; Keras' ``optimizer.iterations`` counts from 0 (it is 0 while the first
update is being computed), so the schedule evaluates the formula at ``iterations + 1``.

Example:
    >>> s = TransformerSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(s(3999)), 7)      # the 4000th update: the peak, 512^-0.5 * 4000^-0.5
    0.0006988
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="tf_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """``scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)``, ``step = iterations + 1``.

    Args:
        d_model: model width (512 base, 1024 big).
        warmup_steps: updates of linear warmup (4000 in the paper).
        scale: constant factor (1.0 in the paper; t2t's ``learning_rate`` hyper-parameter).
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0):
        super().__init__()
        if d_model <= 0 or warmup_steps <= 0 or scale <= 0:
            raise ValueError(
                f"TransformerSchedule needs d_model > 0, warmup_steps > 0, scale > 0; got "
                f"d_model={d_model}, warmup_steps={warmup_steps}, scale={scale}"
            )
        self.d_model = int(d_model)
        self.warmup_steps = int(warmup_steps)
        self.scale = float(scale)

    def __call__(self, step):
        # `step` is optimizer.iterations (0 during the first update); the paper's step is 1-based.
        step = ops.cast(step, "float32") + 1.0
        rise = step * (self.warmup_steps ** -1.5)
        decay = ops.rsqrt(step)
        return (self.scale * self.d_model ** -0.5) * ops.minimum(rise, decay)

    def peak(self) -> float:
        """The largest learning rate, reached at step ``warmup_steps``."""
        return self.scale * self.d_model ** -0.5 * self.warmup_steps ** -0.5

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


def paper_learning_rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """The formula in plain Python for a 1-based ``step`` (reference for tests and plots)."""
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


@keras.saving.register_keras_serializable(package="tf_transformer")
class FusedAdam(keras.optimizers.Adam):
    """``keras.optimizers.Adam`` whose update of each variable is one fused TensorFlow kernel
    (``ResourceApplyAdam``) instead of about twenty small ops.

    The formula is Keras' (and the paper's Adam with the "epsilon hat" of Kingma & Ba,
    section 2): ``m += (g - m)(1 - beta_1)``, ``v += (g^2 - v)(1 - beta_2)``,
    ``w -= lr sqrt(1 - beta_2^t) / (1 - beta_1^t) * m / (sqrt(v) + epsilon)``, in the same
    order of operations, so the two agree to float rounding. The slots and their names are
    Adam's, so a checkpoint of either loads into the other. With another backend, AMSGrad or
    sparse gradients it falls back to Adam's own update. Tracing a training step has ~20x
    fewer optimizer ops to build, which shortens the wait for the first update."""

    def __init__(self, *args, name: str = "adam", **kwargs):
        super().__init__(*args, name=name, **kwargs)

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or keras.backend.backend() != "tensorflow":
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        if isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        index = self._get_variable_index(variable)
        step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable), m=_handle(self._momentums[index]), v=_handle(self._velocities[index]),
            beta1_power=tf.pow(beta_1, step), beta2_power=tf.pow(beta_2, step), lr=tf.cast(learning_rate, dtype),
            beta1=beta_1, beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype),
            use_locking=False)


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable (inside a strategy's update: the
    current device's copy)."""
    return (variable.value if isinstance(variable, keras.Variable) else variable).handle


@keras.saving.register_keras_serializable(package="tf_transformer")
class CountingLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras' dynamic loss scaling (for ``mixed_float16``), with an update it skips still
    counted in ``iterations``.

    When float16 gradients overflow, the update is skipped and the loss scale halved. Keras 3
    then leaves ``iterations`` where it was (Keras 2's ``LossScaleOptimizer`` advanced it), so
    an update number no longer says how many batches were consumed: a run planned in updates
    would end short, evaluations due every N updates would be missed, and a resumed run, which
    skips ``update x micro-batches`` of the data, would not continue where it stopped. Here a
    skipped update advances ``iterations`` as an applied one does, and the learning-rate
    schedule moves on with it, as with Keras 2."""

    def _stateful_handle_non_finite_grads(self):
        super()._stateful_handle_non_finite_grads()
        self.inner_optimizer.iterations.assign_add(1)


def make_optimizer(train_config=None, d_model: int | None = None, **fields):
    """Adam(beta_1, beta_2, epsilon from ``train_config``; paper: 0.9, 0.98, 1e-9) on
    :class:`TransformerSchedule` (as :class:`FusedAdam`: the same update in one kernel per
    variable). Wrapped in :class:`CountingLossScaleOptimizer` (Keras' dynamic loss scaling;
    a skipped update still counts) when ``train_config.mixed_precision == "mixed_float16"``.

    Without a config, keyword arguments name the ``TrainConfig`` fields to change from the
    paper's defaults, e.g. ``make_optimizer(d_model=256, warmup_steps=400)`` or
    ``make_optimizer(cfg.train, 256, learning_rate_scale=2.0)``.

    ``train_config.clip_norm`` is *not* given to Adam: Keras would clip each replica's local
    gradient before the all-reduce; :class:`~tf_transformer.training.trainer.TrainingModel`
    clips the global gradient instead.
    """
    import dataclasses

    from tf_transformer.config import TrainConfig

    if d_model is None:
        raise TypeError("make_optimizer needs d_model (the model width: the schedule's d_model^-0.5)")
    train_config = TrainConfig() if train_config is None else train_config
    if fields:
        known = {f.name for f in dataclasses.fields(TrainConfig)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise TypeError(f"make_optimizer: unknown TrainConfig field(s) {', '.join(unknown)} (known: warmup_steps, "
                            "learning_rate_scale, adam_beta_1, adam_beta_2, adam_epsilon, mixed_precision, ...)")
        train_config = dataclasses.replace(train_config, **fields)
    schedule = TransformerSchedule(d_model, train_config.warmup_steps, train_config.learning_rate_scale)
    optimizer = FusedAdam(
        learning_rate=schedule,
        beta_1=train_config.adam_beta_1,
        beta_2=train_config.adam_beta_2,
        epsilon=train_config.adam_epsilon,
    )
    if train_config.mixed_precision == "mixed_float16":
        optimizer = CountingLossScaleOptimizer(optimizer)
    return optimizer
