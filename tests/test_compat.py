"""tf_transformer.compat: every private Keras/TensorFlow name the package relies on is still
there in the installed versions (each failure names the Keras version and the attribute),
and the source probe of the two multi-worker bugs reads what it must."""

import keras
import pytest

from tf_transformer import compat


def test_every_private_name_relied_on_is_there():
    problems = compat.missing()
    assert not problems, f"Keras {keras.__version__} changed under tf_transformer.compat:\n" + "\n".join(problems)


def test_a_vanished_name_is_reported_with_the_keras_version(monkeypatch):
    class Owner:
        pass

    monkeypatch.setattr(compat, "REQUIREMENTS", (("something", lambda: Owner, "_gone"),
                                                 ("unreachable", lambda: __import__("no_such_module_xyz"), "_x")))
    problems = compat.missing()
    assert len(problems) == 2
    assert f"Keras {keras.__version__} has no" in problems[0] and "Owner._gone" in problems[0]
    assert "cannot reach" in problems[1] and "'_x'" in problems[1]


def test_a_compiled_model_has_the_attributes_the_build_workaround_reads():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer="sgd", loss="mse")
    absent = [a for a in compat.MODEL_ATTRIBUTES if not hasattr(model, a)]
    assert not absent, f"Keras {keras.__version__}: a compiled keras.Model has no {', '.join(absent)}"
    assert hasattr(model, "_flatten_layers") and hasattr(model, "_symbolic_build")


def test_the_bug_probe_can_read_the_installed_keras_source():
    tf_trainer = compat._tf_trainer()
    build = compat._source(tf_trainer.TensorFlowTrainer._maybe_symbolic_build)
    reduce = compat._source(tf_trainer.reduce_per_replica)
    assert build and reduce, f"Keras {keras.__version__}: the source of the probed functions is unreadable"
    bugs = compat.multiworker_bugs()
    assert bugs == compat.detect_multiworker_bugs(build, reduce)


@pytest.mark.parametrize("build, reduce, expected", [
    ("data_batch = self.distribute_strategy.reduce(\n 'MEAN', batch)", 'strategy.reduce("MEAN", v, axis=0)',
     (True, True)),
    ("data_batch = first_local_batch(iterator)", "strategy.reduce('MEAN', v, axis=0)", (False, True)),
    ("data_batch = first_local_batch(iterator)", "if v.shape.rank == 0: return v", (False, False)),
    (None, None, (True, True)),  # unreadable source counts as still broken
])
def test_detect_multiworker_bugs(build, reduce, expected):
    bugs = compat.detect_multiworker_bugs(build, reduce)
    assert (bugs.reduces_first_batch, bugs.reduces_scalars_on_axis0) == expected
    assert bugs.any() == any(expected)


def test_training_model_uses_the_seam():
    from tf_transformer.training.trainer import TrainingModel

    assert issubclass(TrainingModel, compat.LocalReplicaBuild)
    assert TrainingModel._maybe_symbolic_build is compat.LocalReplicaBuild._maybe_symbolic_build


def test_a_continuing_stream_goes_on_across_fit_calls():
    """Two fit calls on one continuing stream train on batches 0-2, then 3-10 (a plain
    dataset starts over at 0 in the second call); batches read ahead by a prefetch are not
    lost between the calls."""
    import numpy as np
    import tensorflow as tf

    seen = []

    class Recorder(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            x, _ = data
            return {"first": x[0, 0]}

    class Collect(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(int(logs["first"]))

    def index(i):
        return tf.fill([1, 1], tf.cast(i, tf.float32)), tf.zeros([1, 1])

    dataset = tf.data.Dataset.range(100).map(index).prefetch(8)
    model = Recorder()
    model.compile(optimizer="sgd", loss="mse")
    model(np.zeros((1, 1), "float32"))
    stream = compat.continuing_stream(dataset)
    model.fit(stream, epochs=1, steps_per_epoch=3, verbose=0, callbacks=[Collect()])
    model.fit(stream, epochs=3, initial_epoch=1, steps_per_epoch=4, verbose=0, callbacks=[Collect()])
    assert seen == list(range(11))
    seen.clear()
    for _ in range(2):
        model.fit(dataset, epochs=1, steps_per_epoch=3, verbose=0, callbacks=[Collect()])
    assert seen == [0, 1, 2, 0, 1, 2]  # what Keras does with a dataset: a new iterator per call
    with pytest.raises(NotImplementedError, match="TensorFlow backend only"):
        stream.get_numpy_iterator()
