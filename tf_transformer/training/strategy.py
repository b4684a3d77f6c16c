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
worker). Keras 3's ``model.fit`` has two bugs under ``MultiWorkerMirroredStrategy``
(keras-team/keras#20585, tensorflow/tensorflow#72388). The workarounds live in
:mod:`tf_transformer.compat` and are switched on only while
:func:`tf_transformer.compat.multiworker_bugs` still finds the faulty code in Keras.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Callable, Optional, Union

import numpy as np
import tensorflow as tf

from tf_transformer import compat
from tf_transformer.config import STRATEGIES
from tf_transformer.errors import UserError


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
        raise UserError(f"strategy {name!r} is not one of {', '.join(STRATEGIES)}")
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
        if devices:
            _check_devices(devices)
        return tf.distribute.MirroredStrategy(devices)
    config = tf_config()
    if not config:
        raise UserError("the multiworker strategy needs TF_CONFIG, e.g. "
                        '{"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}, '
                        '"task": {"type": "worker", "index": 0}} (one process per worker)')
    return _join_cluster(config)


def _check_devices(devices: list[str]) -> None:
    """Every device of an explicit ``mirrored`` list exists (a missing one would make a replica
    that never runs: training waits for it forever)."""
    known = {(d.device_type, tf.DeviceSpec.from_string(d.name).device_index) for d in tf.config.list_logical_devices()}
    for name in devices:
        try:
            spec = tf.DeviceSpec.from_string(name)
        except (ValueError, TypeError) as e:
            raise UserError(f"device {name!r}: not a device name ({e})") from None
        if (str(spec.device_type or "").upper(), spec.device_index or 0) not in known:
            have = ", ".join(sorted(f"/{t.lower()}:{i}" for t, i in known))
            raise UserError(f"device {name!r} does not exist in this process (logical devices: {have})")


def _join_cluster(config: dict) -> tf.distribute.Strategy:
    """``MultiWorkerMirroredStrategy`` over ``config``'s cluster, after checking this task's
    place in it. Creating it waits, inside TensorFlow, until every worker has started; Python's
    signal handlers cannot run meanwhile, so SIGINT (Ctrl-C) keeps its default action (ending
    the process, which has trained nothing yet) until it returns, and a line says what the
    process waits for. SIGTERM is TensorFlow's during the wait (its preemption notifier takes it
    over): it ends the process only once the cluster has formed."""
    import signal
    import threading

    from tf_transformer.io import say

    task = config.get("task") or {}
    kind, index = task.get("type"), task.get("index")
    members = (config.get("cluster") or {}).get(kind) if isinstance(kind, str) else None
    if not members:
        raise UserError(f"TF_CONFIG: task type {kind!r} is not in its cluster "
                        f"({', '.join(sorted(config.get('cluster') or {})) or 'empty'})")
    if not isinstance(index, int) or not 0 <= index < len(members):
        raise UserError(f"TF_CONFIG: task index {index!r} is not one of 0..{len(members) - 1} for the "
                        f"{len(members)} '{kind}' task(s) of its cluster")
    size = _cluster_size(config)
    say(f"train: {kind} {index} of a cluster of {size} (TF_CONFIG) at {members[index]}: waiting for every worker "
        "to start (Ctrl-C ends this process at once until they have; TensorFlow holds SIGTERM back until then)")
    main_thread = threading.current_thread() is threading.main_thread()  # where handlers can be set
    handler = signal.signal(signal.SIGINT, signal.SIG_DFL) if main_thread else None
    try:
        return tf.distribute.MultiWorkerMirroredStrategy()
    except ValueError as e:
        raise UserError(f"TF_CONFIG: {e}") from None
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, handler)


def resolve_strategy(strategy: Union[str, tf.distribute.Strategy, None], default: str = "auto",
                     one_machine: Optional[str] = None) -> tf.distribute.Strategy:
    """A strategy object from an object (returned as is), a name, or ``None`` (``default``,
    e.g. ``train.strategy``). With ``one_machine`` (what needs it, e.g. ``"tft tune"``) a
    strategy spanning several workers is refused."""
    if strategy is None or isinstance(strategy, str):
        strategy = make_strategy(strategy or default)
    if one_machine and is_multiworker(strategy):
        raise UserError(f"{one_machine} runs on one machine; unset TF_CONFIG or use the mirrored strategy")
    return strategy


def is_default(strategy) -> bool:
    """True for TensorFlow's default (no-op) strategy."""
    return type(strategy).__name__ == "_DefaultDistributionStrategy"


def is_multiworker(strategy) -> bool:
    """True for a ``MultiWorkerMirroredStrategy`` that spans more than one worker."""
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
            and compat.in_multi_worker_mode(strategy))


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


def gather_from_replicas(strategy, values: list[int]) -> np.ndarray:
    """Every replica's ``values``, one row per replica of every worker, in replica order: a
    collective operation, so every worker must call it at the same point. (Each replica
    writes its row into a zero matrix at its own index and the matrices are summed:
    ``ReplicaContext.all_gather`` fails under ``MultiWorkerMirroredStrategy`` in TF 2.21 with
    "destinations can not be empty"; float64 holds the small integers exactly.)"""
    local = np.asarray(values, np.float64)[None, :]

    def place():
        context = tf.distribute.get_replica_context()
        row = tf.one_hot(context.replica_id_in_sync_group, context.num_replicas_in_sync, dtype=tf.float64)
        return row[:, None] * tf.constant(local)

    total = strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(tf.function(place)), axis=None)
    return np.rint(np.asarray(total)).astype(np.int64)


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


def steps_per_replica(dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset], replicas: int) -> int:
    """Steps that cover a finite dataset once when ``replicas`` share it: the batches
    ``dataset_fn`` makes for one pipeline at the per-replica budget, divided among the
    replicas (rounded up; 0 only for an empty dataset). Every worker computes the same number."""
    counted = dataset_fn(tf.distribute.InputContext(1, 0, replicas))
    batches = int(counted.reduce(np.int64(0), lambda n, _: n + 1))
    return math.ceil(batches / replicas)

