"""Distribution strategies for ``tft train --strategy auto|default|mirrored|multiworker``.

**How a global batch is split.** ``data.tokens_per_batch`` is the size of one *global*
batch: about that many source and that many target tokens summed over all replicas
(the paper: ~25,000 + 25,000 over 8 GPUs). The training data is distributed with
``strategy.distribute_datasets_from_function``: each worker builds its own input pipeline
over its shard of the corpus (``InputContext.input_pipeline_id`` of
``num_input_pipelines``) and batches it by token count with a budget of
``tokens_per_batch / num_replicas_in_sync`` tokens; every replica then dequeues its own
such batch, so replicas hold different numbers of sentences and different padded lengths
(whatever their length bucket gives), and one step sees about ``tokens_per_batch`` tokens
in all. The loss is normalized by the number of real target tokens of the whole global
batch, summed across replicas (see :mod:`tf_transformer.training.trainer`), so the update
equals that of one device holding the same sentences.

**Multi-worker.** ``multiworker`` reads the cluster from ``TF_CONFIG`` (one process per
worker). Keras 3.15's ``model.fit`` has two bugs under ``MultiWorkerMirroredStrategy``
(NOTES.md, "Broken upstream"; keras-team/keras#20585, tensorflow/tensorflow#72388). The
workaround lives in :class:`~tf_transformer.training.trainer.TrainingModel` and is switched
on only while :func:`keras_multiworker_bugs` still finds the faulty code in Keras.
"""

from __future__ import annotations

import inspect
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional

import tensorflow as tf

from tf_transformer.errors import UserError

STRATEGIES = ("auto", "default", "mirrored", "multiworker")


def tf_config() -> dict:
    """The parsed ``TF_CONFIG`` environment variable (``{}`` when unset)."""
    text = os.environ.get("TF_CONFIG", "").strip()
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"TF_CONFIG is not valid JSON ({e}); expected "
                        '{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}') from None
    if not isinstance(value, dict) or "cluster" not in value or "task" not in value:
        raise UserError("TF_CONFIG must be a JSON object with 'cluster' and 'task' keys, got "
                        f"{text[:200]!r}")
    return value


def _cluster_size(config: dict) -> int:
    cluster = config.get("cluster", {})
    return sum(len(cluster.get(kind, [])) for kind in ("chief", "worker"))


def make_strategy(name: str = "auto", devices: Optional[list[str]] = None) -> tf.distribute.Strategy:
    """Create the strategy named by ``train.strategy`` / ``--strategy``.

    Args:
        name: ``default`` (one device, no tf.distribute), ``mirrored`` (all visible GPUs of
            this machine, or ``devices``; on a machine without GPUs one CPU replica),
            ``multiworker`` (``MultiWorkerMirroredStrategy`` over the ``TF_CONFIG`` cluster),
            ``auto`` (``multiworker`` when ``TF_CONFIG`` names more than one task, else
            ``mirrored`` when more than one GPU is visible, else ``default``).
        devices: explicit device list for ``mirrored`` (tests use two logical CPUs).

    Must be called before TensorFlow runs any op when ``multiworker`` is used.
    """
    if name not in STRATEGIES:
        raise UserError(f"--strategy {name!r} is not one of {', '.join(STRATEGIES)}")
    if name == "auto":
        if _cluster_size(tf_config()) > 1:
            name = "multiworker"
        elif len(tf.config.list_logical_devices("GPU")) > 1 or devices:
            name = "mirrored"
        else:
            name = "default"
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices)
    config = tf_config()
    if not config:
        raise UserError("--strategy multiworker needs TF_CONFIG, e.g. "
                        '{"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}, '
                        '"task": {"type": "worker", "index": 0}} (one process per worker)')
    return tf.distribute.MultiWorkerMirroredStrategy()


def is_default(strategy) -> bool:
    """True for TensorFlow's default (no-op) strategy."""
    return type(strategy).__name__ == "_DefaultDistributionStrategy"


def is_multiworker(strategy) -> bool:
    """True for a ``MultiWorkerMirroredStrategy`` that spans more than one worker."""
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and strategy.extended._in_multi_worker_mode())


@dataclass(frozen=True)
class TaskInfo:
    """Who this process is in the cluster. The chief writes ``model_dir``; the other workers
    write what they must (saving reads variables collectively) to a scratch directory."""

    kind: str = "worker"
    index: int = 0
    num_workers: int = 1
    is_chief: bool = True

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.index}"


def task_info(strategy) -> TaskInfo:
    """This process's task; the chief is the ``chief`` task if the cluster has one, else worker 0."""
    if not is_multiworker(strategy):
        return TaskInfo()
    resolver = strategy.cluster_resolver
    config = tf_config()
    has_chief = bool(config.get("cluster", {}).get("chief"))
    kind = resolver.task_type or "worker"
    index = int(resolver.task_id or 0)
    chief = kind == "chief" or (not has_chief and kind == "worker" and index == 0)
    return TaskInfo(kind, index, _cluster_size(config), chief)


def describe(strategy) -> str:
    """One line: strategy kind, replicas, devices."""
    kind = type(strategy).__name__
    if is_default(strategy):
        device = "GPU:0" if tf.config.list_logical_devices("GPU") else "CPU"
        return f"default (1 replica on {device})"
    extra = ""
    if is_multiworker(strategy):
        info = task_info(strategy)
        extra = f", {info.num_workers} workers, this is {info.name}"
    devices = ", ".join(getattr(strategy.extended, "worker_devices", ()) or ())
    return f"{kind} ({strategy.num_replicas_in_sync} replicas{extra}; local devices: {devices})"


def distribute(strategy, dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset]):
    """A dataset for ``model.fit`` from ``dataset_fn(input_context)``.

    Under a real strategy the result of ``strategy.distribute_datasets_from_function``:
    ``dataset_fn`` is called once per worker and must return that worker's shard batched
    to the *per-replica* budget; each replica dequeues its own batch. Under the default
    strategy ``dataset_fn`` is called with a one-replica context and returned as is.
    """
    if is_default(strategy):
        return dataset_fn(tf.distribute.InputContext(1, 0, 1))
    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    return strategy.distribute_datasets_from_function(dataset_fn, options=options)


# ---------------------------------------------------------------------------------------
# Keras 3 model.fit under MultiWorkerMirroredStrategy (NOTES.md "Broken upstream")
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KerasMultiWorkerBugs:
    """Which of the two known Keras bugs the installed Keras still has.

    ``reduces_first_batch``: ``TensorFlowTrainer._maybe_symbolic_build`` averages the first
    input batch across replicas (``strategy.reduce("MEAN", batch)``) to build the model; under
    the collective strategy this fails, and it also fails whenever replicas hold batches of
    different shapes (our token buckets). Fixed here by building from one local replica's batch.

    ``reduces_scalars_on_axis0``: ``reduce_per_replica`` reduces every step output with
    ``strategy.reduce("MEAN", v, axis=0)`` in multi-worker mode, which fails for scalar logs.
    Fixed here by returning logs of shape ``[1]`` in multi-worker mode (the mean over that
    axis is the scalar again).
    """

    reduces_first_batch: bool
    reduces_scalars_on_axis0: bool

    def any(self) -> bool:
        return self.reduces_first_batch or self.reduces_scalars_on_axis0


@lru_cache(maxsize=1)
def keras_multiworker_bugs() -> KerasMultiWorkerBugs:
    """Probe the installed Keras' source for the faulty calls (so the workaround turns itself
    off once Keras is fixed). Unreadable source counts as "still broken"."""
    try:
        from keras.src.backend.tensorflow import trainer as tf_trainer
    except ImportError:  # a Keras without this module has a different trainer: nothing to fix
        return KerasMultiWorkerBugs(False, False)

    def source(obj) -> Optional[str]:
        try:
            return inspect.getsource(obj)
        except (OSError, TypeError):
            return None

    build = source(getattr(tf_trainer.TensorFlowTrainer, "_maybe_symbolic_build", None))
    reduce = source(getattr(tf_trainer, "reduce_per_replica", None))
    first_batch = build is None or ("distribute_strategy.reduce(" in build.replace("\n", "").replace(" ", ""))
    if reduce is None:
        scalars = True
    else:
        compact = reduce.replace("\n", "").replace(" ", "")
        scalars = 'strategy.reduce("MEAN",v,axis=0)' in compact or "strategy.reduce('MEAN',v,axis=0)" in compact
    return KerasMultiWorkerBugs(first_batch, scalars)
