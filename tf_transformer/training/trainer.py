"""``TrainingModel``: the training step of the paper's recipe on top of ``model.fit``.

It wraps a :class:`~tf_transformer.model.Transformer` (whose weights it shares; checkpoints
and the final ``model.keras`` hold the Transformer alone) and replaces Keras' default
``train_step``/``test_step`` for three reasons:

1. **Token-weighted loss over the global batch.** Each replica sums the label-smoothed loss
   over its real target tokens; the per-step token statistics (loss sum, NLL sum, correct
   predictions, token count) are summed across replicas with one all-reduce; the gradient
   of the local sum is scaled by ``1 / (global token count)``; the optimizer sums the
   replicas' gradients. The update is therefore the gradient of *sum of token losses /
   number of tokens* over the whole global batch, exactly what one device holding all of
   its sentences computes. (Keras' default would average the replicas' own per-token means,
   which weighs tokens unevenly when replicas hold different token counts, as token buckets
   do.) The metrics (loss, perplexity, accuracy) are fed the same global sums.

2. **Gradient accumulation by tokens.** With ``accumulation_steps = k > 1`` each ``fit``
   step is one micro-batch; gradients of the *sums* are accumulated for ``k`` micro-batches
   (``k = round(train.tokens_per_update / data.tokens_per_batch)``) and applied once, divided
   by the number of real target tokens of all ``k`` micro-batches on all replicas. Keras'
   own ``Optimizer(gradient_accumulation_steps=k)`` averages the ``k`` micro-batch means,
   which is not the token-weighted mean when token counts differ (they always do), and
   under ``MirroredStrategy`` its conditional update raises (a ``merge_call`` inside
   ``tf.cond`` in replica context); here the condition is evaluated in cross-replica
   context, as Keras' ``LossScaleOptimizer`` does. ``optimizer.iterations`` counts updates,
   so the learning-rate schedule sees update numbers.

3. **Gradient clipping on the global gradient** (``train.clip_norm``; Keras' ``clipnorm``
   would clip each replica's local gradient before the all-reduce).

To keep magnitudes like those of a mean (for float16), the loss is scaled by
``1 / nominal_tokens`` (tokens a full update should hold) before differentiation and the
accumulated gradient by ``nominal_tokens / actual_tokens`` at the update.

It also carries the small workarounds for Keras 3 ``model.fit`` under
``MultiWorkerMirroredStrategy`` (:class:`tf_transformer.compat.LocalReplicaBuild` and
:func:`tf_transformer.compat.multiworker_bugs`).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tf_transformer import compat
from tf_transformer.training.losses import (
    Perplexity,
    TokenAccuracy,
    TokenMean,
    tied_head_statistics,
    token_weights,
)
from tf_transformer.training.strategy import is_multiworker


class _Counter:
    """Real target tokens trained on (global count, same on every replica; read from the
    first). Untracked: it is a statistic, not training state."""

    def __init__(self):
        self.tokens = tf.Variable(0.0, trainable=False, name="target_tokens_seen",
                                  synchronization=tf.VariableSynchronization.ON_READ,
                                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


class _Accumulators:
    """Per-replica gradient/token accumulators. A plain object so Keras does not track (and
    save) them: backups are only written at update boundaries, where they are zero."""

    def __init__(self, variables):
        sync = {"trainable": False, "synchronization": tf.VariableSynchronization.ON_READ,
                "aggregation": tf.VariableAggregation.SUM}
        self.grads = [tf.Variable(tf.zeros(v.shape, "float32"), name=f"accum_{i}", **sync)
                      for i, v in enumerate(variables)]
        self.tokens = tf.Variable(0.0, name="accum_tokens", **sync)
        self.micro_steps = tf.Variable(0, dtype=tf.int64, name="accum_micro_steps", **sync)


@keras.saving.register_keras_serializable(package="tf_transformer")
class TrainingModel(compat.LocalReplicaBuild, keras.Model):
    """``model.fit`` wrapper around a Transformer: token-weighted label-smoothed loss,
    cross-replica normalization, gradient accumulation, global-norm clipping.

    Args:
        transformer: the :class:`~tf_transformer.model.Transformer` to train.
        label_smoothing: ``eps_ls``.
        accumulation_steps: micro-batches per update (``k``).
        nominal_tokens: target tokens an update is expected to hold (only sets the scale of
            intermediate values; the update is normalized by the actual count).
        clip_norm: clip the global gradient norm to this (``None``: no clipping).

    Data: ``((source_ids [batch, S], target_input_ids [batch, T]), target_output_ids [batch, T])``,
    int, 0 = pad, optionally with a third element, Keras' sample weights: one per sentence
    (``[batch]``) or per target token (``[batch, T]``); the loss, its gradient and the logs are
    then means weighted by them (weights of 1 change nothing, a weight of 0 leaves a sentence
    out). Logs: ``loss`` (label-smoothed, per real target token; see
    :mod:`~tf_transformer.training.losses`), ``perplexity`` and ``accuracy``.

    Build it (``trainer.build()``) and compile it under the strategy's scope before ``fit``.

    It saves to ``.keras`` (``trainer.save``, ``keras.callbacks.ModelCheckpoint``) with its
    Transformer, settings and, once compiled, its optimizer state; ``keras.saving.load_model``
    gives it back after ``import tf_transformer``. ``trainer.transformer.save`` writes the
    Transformer alone, which is what decoding and export read.
    """

    def __init__(self, transformer, label_smoothing: float = 0.1, accumulation_steps: int = 1,
                 nominal_tokens: float = 4096.0, clip_norm=None, **kwargs):
        kwargs.setdefault("name", "training_model")
        super().__init__(**kwargs)
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps={accumulation_steps} must be >= 1")
        self.transformer = transformer
        self.label_smoothing = float(label_smoothing)
        self.accumulation_steps = int(accumulation_steps)
        self.nominal_tokens = float(nominal_tokens)
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.pad_id = int(getattr(transformer, "pad_id", 0))
        self.loss_metric = TokenMean(self.pad_id, name="loss")
        self.perplexity_metric = Perplexity(self.pad_id, name="perplexity")
        self.accuracy_metric = TokenAccuracy(self.pad_id, name="accuracy")
        self._accum = None
        self._counter = None

    # -- construction ------------------------------------------------------------------
    def build(self, input_shape=None):
        if not self.transformer.built:
            self.transformer.build()
        if self.accumulation_steps > 1 and self._accum is None:
            self._accum = _Accumulators(self.transformer.trainable_variables)
        if self._counter is None:
            self._counter = _Counter()
        self.built = True

    def get_config(self):
        config = super().get_config()
        config.update(transformer=keras.saving.serialize_keras_object(self.transformer),
                      label_smoothing=self.label_smoothing, accumulation_steps=self.accumulation_steps,
                      nominal_tokens=self.nominal_tokens, clip_norm=self.clip_norm)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["transformer"] = keras.saving.deserialize_keras_object(config["transformer"])
        return cls(**config)

    def target_tokens_seen(self) -> float:
        """Real target tokens processed by ``train_step`` so far (all replicas)."""
        return float(self._counter.tokens.numpy())

    def call(self, inputs, training=None):
        return self.transformer(inputs, training=training)

    @property
    def metrics(self):
        return [self.loss_metric, self.perplexity_metric, self.accuracy_metric]

    # -- steps -------------------------------------------------------------------------
    def _track(self, stats):
        """Sum this step's token statistics over replicas, feed the metrics, return the sums
        ``[loss_sum, nll_sum, correct, tokens, real tokens]`` (``tokens``: the weighted count;
        the real tokens as they are, for :meth:`target_tokens_seen`)."""
        local = tf.stack([stats["loss_sum"], stats["nll_sum"], stats["correct"], stats["tokens"],
                          stats.get("real_tokens", stats["tokens"])])
        context = tf.distribute.get_replica_context()
        total = context.all_reduce(tf.distribute.ReduceOp.SUM, local) if context is not None else local
        # Every replica adds the same global sums; ratios survive the SUM on read.
        self.loss_metric.update_totals(total[0], total[3])
        self.perplexity_metric.update_totals(total[1], total[3])
        self.accuracy_metric.update_totals(total[2], total[3])
        return total

    def _logs(self):
        logs = {m.name: m.result() for m in self.metrics}
        if compat.multiworker_bugs().reduces_scalars_on_axis0 and is_multiworker(self.distribute_strategy):
            # Keras reduces multi-worker step outputs with reduce(MEAN, v, axis=0), which fails
            # on scalars; the mean over a length-1 axis gives the scalar back.
            logs = {k: tf.reshape(v, [1]) for k, v in logs.items()}
        return logs

    def _loss_scale(self):
        scale = getattr(self.optimizer, "dynamic_scale", None)
        return 1.0 if scale is None else tf.cast(scale, "float32")

    def _apply(self, grads):
        """Apply one update from this replica's share of the normalized gradient."""
        variables = self.trainable_variables
        if self.clip_norm is not None:
            context = tf.distribute.get_replica_context()
            replicas = 1
            if context is not None:
                grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
                replicas = context.num_replicas_in_sync
            grads, _ = tf.clip_by_global_norm(grads, self.clip_norm * self._loss_scale())
            # the optimizer sums the replicas' gradients again
            grads = [g / replicas for g in grads] if replicas > 1 else grads
        self.optimizer.apply(grads, variables)

    def _statistics(self, data, training):
        """Token statistics of one batch (``data`` as ``fit`` gives it, with or without sample
        weights): the decoder's states and the shared table go to the fused projection + loss
        (:func:`~tf_transformer.training.losses.tied_head_statistics`), so the ``[tokens,
        vocab]`` logits are made once and passed over twice (softmax, argmax)."""
        (source, target_input), target_output, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        hidden = self.transformer.hidden_states((source, target_input), training=training)
        weights = token_weights(sample_weight, target_output)
        stats = tied_head_statistics(target_output, hidden, self.transformer.output_table,
                                     self.label_smoothing, self.pad_id, weights)
        if weights is not None:
            stats["real_tokens"] = tf.reduce_sum(tf.cast(tf.not_equal(target_output, self.pad_id), tf.float32))
        return stats

    def train_step(self, data):
        variables = self.trainable_variables
        with tf.GradientTape() as tape:
            stats = self._statistics(data, training=True)
            loss = stats["loss_sum"] / self.nominal_tokens
            loss = self.optimizer.scale_loss(loss)
        grads = tape.gradient(loss, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        grads = [tf.convert_to_tensor(g) for g in grads]
        total = self._track(stats)
        self._counter.tokens.assign_add(total[4])
        if self.accumulation_steps == 1:
            factor = self.nominal_tokens / tf.maximum(total[3], 1.0)
            self._apply([g * factor for g in grads])
        else:
            self._accumulate(grads, total[3])
        return self._logs()

    def _accumulate(self, grads, tokens):
        acc = self._accum
        for a, g in zip(acc.grads, grads):
            a.assign_add(tf.cast(g, a.dtype))
        acc.tokens.assign_add(tokens)
        micro = acc.micro_steps.assign_add(1)
        boundary = tf.equal(micro % self.accumulation_steps, 0)

        def update():
            factor = self.nominal_tokens / tf.maximum(acc.tokens.read_value(), 1.0)
            self._apply([a.read_value() * factor for a in acc.grads])
            for a in acc.grads:
                a.assign(tf.zeros_like(a))
            acc.tokens.assign(0.0)

        if compat.supports_no_merge_call():
            tf.cond(boundary, lambda: (update(), tf.constant(True))[1], lambda: tf.constant(False))
            return

        # MirroredStrategy: a merge_call (inside optimizer.apply) may not sit in a tf.cond in
        # replica context, so take the decision in cross-replica context.
        def cross_replica(distribution, boundary):
            take = distribution.experimental_local_results(boundary)[0]

            def apply_everywhere():
                distribution.extended.call_for_each_replica(update)
                return tf.constant(True)

            tf.cond(take, apply_everywhere, lambda: tf.constant(False))

        tf.distribute.get_replica_context().merge_call(cross_replica, args=(boundary,))

    def test_step(self, data):
        self._track(self._statistics(data, training=False))
        return self._logs()


def accumulation_steps_for(tokens_per_update, tokens_per_batch: int) -> int:
    """``k`` micro-batches of ``tokens_per_batch`` nearest to ``tokens_per_update`` (>= 1)."""
    if not tokens_per_update:
        return 1
    return max(1, round(tokens_per_update / tokens_per_batch))


def build_training_model(cfg) -> "TrainingModel":
    """A new Transformer for ``cfg.model`` inside a compiled :class:`TrainingModel` with the
    paper's optimizer (``cfg.train``), built under ``cfg.train.mixed_precision`` (``auto``
    resolved for this machine by :func:`~tf_transformer.training.precision.resolve_mixed_precision`;
    the global dtype policy is restored afterwards). Call it inside ``strategy.scope()`` to distribute.
    Used by :func:`tf_transformer.training.train` and the Keras Tuner hypermodel."""
    from tf_transformer.model import Transformer
    from tf_transformer.training.precision import resolve_mixed_precision
    from tf_transformer.training.schedule import make_optimizer

    k = accumulation_steps_for(cfg.train.tokens_per_update, cfg.data.tokens_per_batch)
    policy, _ = resolve_mixed_precision(cfg.train.mixed_precision)
    previous = keras.config.dtype_policy()
    if policy:
        keras.config.set_dtype_policy(policy)
    try:
        transformer = Transformer.from_config_section(cfg.model)
        trainer = TrainingModel(transformer, label_smoothing=cfg.train.label_smoothing, accumulation_steps=k,
                                nominal_tokens=float(k * cfg.data.tokens_per_batch), clip_norm=cfg.train.clip_norm)
        trainer.build()
        optimizer = make_optimizer(cfg.train, cfg.model.d_model)
        trainer.compile(optimizer=optimizer, jit_compile=bool(cfg.train.jit_compile))
        optimizer.build(trainer.trainable_variables)
    finally:
        keras.config.set_dtype_policy(previous)
    return trainer
