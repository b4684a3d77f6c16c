"""Every reliance of the package on Keras' and TensorFlow's private API, in one place.

Training on ``model.fit`` under ``tf.distribute`` needs a few things Keras does not offer
publicly; each is wrapped here under a name that says what it is for, and
:data:`REQUIREMENTS` lists the private names they touch so that
``tests/test_compat.py`` fails, naming the Keras version and the missing attribute, as soon
as an installed Keras (or TensorFlow) no longer has one of them.

* :class:`LocalReplicaBuild`: a ``keras.Model`` mixin that replaces Keras' first-batch model
  build under a strategy (``TensorFlowTrainer._maybe_symbolic_build``), which averages the
  first batch across replicas and so fails under the multi-worker strategy and whenever
  replicas hold batches of different shapes (token buckets, keras-team/keras#20585).
* :func:`multiworker_bugs`: which of the two known Keras bugs under
  ``MultiWorkerMirroredStrategy`` the installed Keras still has, read off its source, so the
  workarounds switch themselves off once Keras is fixed (tensorflow/tensorflow#72388).
* :func:`in_multi_worker_mode` and :func:`supports_no_merge_call`: two questions about a
  strategy that only TensorFlow's private API answers.
* :func:`seed_generator_states`: the state variables of the ``keras.random.SeedGenerator``
  of every layer (dropout masks), which ``save_weights`` does not save; exact resume saves
  and restores them.
* :func:`continuing_stream`: a ``model.fit`` input that goes on with one iterator from one
  ``fit`` call to the next (Keras makes a new iterator per call, which starts the stream
  over), through Keras' custom data adapter seam (``get_data_adapter`` returns a
  ``DataAdapter`` it is given as it is).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional


def keras_version() -> str:
    import keras

    return keras.__version__


# ---------------------------------------------------------------------------------------
# What is relied on
# ---------------------------------------------------------------------------------------


def _tf_trainer():
    from keras.src.backend.tensorflow import trainer as tf_trainer

    return tf_trainer


def _mwms_extended():
    from tensorflow.python.distribute import collective_all_reduce_strategy as mwms

    return mwms.CollectiveAllReduceExtended


def _tf_internal_distribute():
    import tensorflow as tf

    return tf.__internal__.distribute


def _data_adapters():
    from keras.src.trainers import data_adapters

    return data_adapters


def _data_adapter_base():
    from keras.src.trainers.data_adapters import data_adapter

    return data_adapter.DataAdapter


#: ``(what, owner, attribute)``: ``owner()`` returns the object that must have ``attribute``.
REQUIREMENTS = (
    ("first-batch build hook of model.fit", lambda: _tf_trainer().TensorFlowTrainer, "_maybe_symbolic_build"),
    ("symbolic build of model.fit", lambda: _tf_trainer().TensorFlowTrainer, "_symbolic_build"),
    ("per-replica reduction of step outputs", _tf_trainer, "reduce_per_replica"),
    ("layer traversal", lambda: __import__("keras").Layer, "_flatten_layers"),
    ("seed generators of a layer", lambda: __import__("keras").layers.Dropout(0.5), "_seed_generators"),
    ("multi-worker mode of a MultiWorkerMirroredStrategy", _mwms_extended, "_in_multi_worker_mode"),
    ("merge-call support of a strategy", _tf_internal_distribute, "strategy_supports_no_merge_call"),
    ("custom data adapters of model.fit", _data_adapters, "get_data_adapter"),
    ("the data adapter interface", _data_adapter_base, "get_tf_dataset"),
)

#: Attributes ``Model.compile`` sets that :class:`LocalReplicaBuild` reads.
COMPILED_ATTRIBUTES = ("_compile_metrics", "_compile_loss")

#: Attributes of a compiled ``keras.Model`` that :class:`LocalReplicaBuild` reads.
MODEL_ATTRIBUTES = ("_distribute_strategy",) + COMPILED_ATTRIBUTES


def missing() -> list[str]:
    """One message per entry of :data:`REQUIREMENTS` the installed versions lack (empty: all there)."""
    problems = []
    for what, owner, attribute in REQUIREMENTS:
        try:
            obj = owner()
        except (ImportError, AttributeError) as e:
            problems.append(f"{what}: cannot reach the owner of {attribute!r} in Keras {keras_version()} ({e})")
            continue
        if not hasattr(obj, attribute):
            name = getattr(obj, "__qualname__", getattr(obj, "__name__", repr(obj)))
            problems.append(f"{what}: Keras {keras_version()} has no {name}.{attribute}")
    return problems


# ---------------------------------------------------------------------------------------
# Random state
# ---------------------------------------------------------------------------------------


def seed_generator_states(model) -> list:
    """The ``state`` variable of every ``SeedGenerator`` of ``model``'s layers, in layer
    order (``model`` itself included): what makes the next dropout masks."""
    states = []
    for layer in model._flatten_layers(include_self=True):
        for generator in getattr(layer, "_seed_generators", ()):
            states.append(generator.state)
    return states


# ---------------------------------------------------------------------------------------
# Input streams
# ---------------------------------------------------------------------------------------


def continuing_stream(dataset):
    """``dataset`` (a ``tf.data.Dataset`` or a ``tf.distribute`` distributed dataset) as a
    ``model.fit`` input whose iterator lives across ``fit`` calls: each call goes on where
    the one before stopped, instead of starting the stream over (Keras makes a new iterator
    for every ``fit`` call). Batches the iterator had read ahead (prefetched, or fetched to
    the devices) are not lost either: the next call trains on them.

    The iterator is made on the first call, so a ``fit`` that never starts costs nothing.
    Only the TensorFlow backend's ``fit`` is served (``get_tf_dataset``). The model must be
    built and compiled before the first call (as ``TrainingModel`` is): Keras' first-batch
    build would take that batch from the stream, where a fresh iterator per call gave it back.
    """
    import tensorflow as tf

    base = _data_adapter_base()

    class _HeldIterator(tf.distribute.DistributedDataset):
        # Keras' TensorFlow epoch iterator takes a distributed dataset as it is and calls
        # ``iter`` on it once per fit call (and again after its first-batch build, which a
        # built model skips): every call gets the one iterator.
        def __init__(self, source):
            self._source = source
            self._iterator = None

        def __iter__(self):
            if self._iterator is None:
                self._iterator = iter(self._source)
            return self._iterator

        @property
        def element_spec(self):
            return self._source.element_spec

        def reduce(self, initial_state, reduce_func):
            raise TypeError("a continuing training stream cannot be reduced: it is consumed by model.fit")

    class _ContinuingAdapter(base):
        def __init__(self, source):
            self._held = _HeldIterator(source)

        def get_tf_dataset(self):
            return self._held

        def _unsupported(self, what):
            raise NotImplementedError(f"a continuing training stream serves the TensorFlow backend only ({what})")

        def get_numpy_iterator(self):
            self._unsupported("numpy iterator")

        def get_jax_iterator(self):
            self._unsupported("JAX iterator")

        def get_torch_dataloader(self):
            self._unsupported("torch DataLoader")

        @property
        def num_batches(self):
            return None  # endless: fit runs steps_per_epoch steps per epoch

        @property
        def batch_size(self):
            return None

        @property
        def has_partial_batch(self):
            return False

        @property
        def partial_batch_size(self):
            return None

    return _ContinuingAdapter(dataset)


# ---------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------


def in_multi_worker_mode(strategy) -> bool:
    """True when a ``MultiWorkerMirroredStrategy`` really spans more than one worker."""
    return bool(strategy.extended._in_multi_worker_mode())


def supports_no_merge_call() -> bool:
    """True when the current strategy lets replicas apply updates without a ``merge_call``
    (the default and multi-worker strategies; not ``MirroredStrategy``)."""
    return bool(_tf_internal_distribute().strategy_supports_no_merge_call())


# ---------------------------------------------------------------------------------------
# Keras 3 model.fit under MultiWorkerMirroredStrategy
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KerasMultiWorkerBugs:
    """Which of the two known Keras bugs the installed Keras still has.

    ``reduces_first_batch``: ``TensorFlowTrainer._maybe_symbolic_build`` averages the first
    input batch across replicas (``strategy.reduce("MEAN", batch)``) to build the model; under
    the collective strategy this fails, and it also fails whenever replicas hold batches of
    different shapes (our token buckets). Worked around by :class:`LocalReplicaBuild`.

    ``reduces_scalars_on_axis0``: ``reduce_per_replica`` reduces every step output with
    ``strategy.reduce("MEAN", v, axis=0)`` in multi-worker mode, which fails for scalar logs.
    Worked around by returning logs of shape ``[1]`` in multi-worker mode (the mean over that
    axis is the scalar again).
    """

    reduces_first_batch: bool
    reduces_scalars_on_axis0: bool

    def any(self) -> bool:
        return self.reduces_first_batch or self.reduces_scalars_on_axis0


def detect_multiworker_bugs(build_source: Optional[str], reduce_source: Optional[str]) -> KerasMultiWorkerBugs:
    """The bugs present in the given sources of ``_maybe_symbolic_build`` and
    ``reduce_per_replica`` (``None``: unreadable, counted as still broken)."""

    def compact(text: str) -> str:
        return text.replace("\n", "").replace(" ", "")

    first_batch = build_source is None or "distribute_strategy.reduce(" in compact(build_source)
    if reduce_source is None:
        scalars = True
    else:
        code = compact(reduce_source)
        scalars = 'strategy.reduce("MEAN",v,axis=0)' in code or "strategy.reduce('MEAN',v,axis=0)" in code
    return KerasMultiWorkerBugs(first_batch, scalars)


def _source(obj) -> Optional[str]:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return None


@lru_cache(maxsize=1)
def multiworker_bugs() -> KerasMultiWorkerBugs:
    """:func:`detect_multiworker_bugs` on the installed Keras (cached)."""
    try:
        tf_trainer = _tf_trainer()
    except ImportError:  # a Keras without this module has a different trainer: nothing to fix
        return KerasMultiWorkerBugs(False, False)
    build = _source(getattr(tf_trainer.TensorFlowTrainer, "_maybe_symbolic_build", None))
    reduce = _source(getattr(tf_trainer, "reduce_per_replica", None))
    return detect_multiworker_bugs(build, reduce)


class LocalReplicaBuild:
    """``keras.Model`` mixin: under a strategy, build the model from one local replica's first
    batch (or, when it is built already, from no batch at all) instead of Keras' average of
    the first batch across replicas.

    Keras reads the first batch and averages it across replicas (``strategy.reduce``) to build
    the model. That fails under the collective (multi-worker) strategy and when replicas hold
    differently shaped batches, and under any strategy it reads the persistent validation
    iterator before resetting it, which raises StopIteration once a finite validation set has
    been read to its end. Keras' build also takes that first batch from the training
    iterator, so a fit call would skip one batch per replica (exact resume counts the
    batches consumed): a built model is never given a batch here.
    """

    def _needs_symbolic_build(self) -> bool:
        unbuilt = not all(layer.built for layer in self._flatten_layers())
        for attr in COMPILED_ATTRIBUTES:
            obj = getattr(self, attr, None)
            unbuilt = unbuilt or (obj is not None and not obj.built)
        return unbuilt

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        import tensorflow as tf

        strategy = getattr(self, "_distribute_strategy", None)
        if strategy is None:
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
        if not multiworker_bugs().reduces_first_batch and self._needs_symbolic_build():
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
        # A built model needs no batch: reading one here would take it from the training
        # stream (Keras' own build does), which exact resume counts.
        if data_batch is None and iterator is not None and self._needs_symbolic_build():
            for _, _, it in iterator:
                batch = next(it)
                data_batch = tf.nest.map_structure(
                    lambda v: strategy.experimental_local_results(v)[0]
                    if isinstance(v, tf.distribute.DistributedValues) else v, batch)
                break
        with strategy.scope():
            self._symbolic_build(data_batch=data_batch)
