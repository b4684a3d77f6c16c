"""Callbacks: timed checkpoints (keep last K), stopping at a step, wall-clock budget."""

import keras
from helpers.synthetic import tiny_config

from tf_transformer.training.callbacks import (
    StopAtStep,
    TimedCheckpoint,
    WallClockBudget,
    list_checkpoints,
)


class _Holder(keras.Model):
    """What fit sees: a model with ``.transformer`` and an optimizer whose step we drive."""

    def __init__(self, transformer):
        super().__init__()
        self.transformer = transformer


def _holder():
    from tf_transformer.model import Transformer

    cfg = tiny_config(16)
    cfg.model.num_layers = 1
    transformer = Transformer.from_config_section(cfg.model)
    transformer.build()
    holder = _Holder(transformer)
    holder.optimizer = keras.optimizers.Adam()
    holder.optimizer.build(transformer.trainable_variables)
    return holder


def test_timed_checkpoint_keeps_last_k(tmp_path):
    holder = _holder()
    ckpt = TimedCheckpoint(tmp_path, every_minutes=0.0, keep=3, accumulation_steps=2)
    ckpt.set_model(holder)
    ckpt.on_train_begin()
    for batch in range(10):
        if batch % 2 == 0:
            holder.optimizer.iterations.assign_add(1)
        ckpt.on_train_batch_end(batch)  # saves only at update boundaries (every 2nd batch)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 4, 5]
    assert ckpt.finish() is None  # step 5 is already saved
    assert not list(tmp_path.glob(".partial-*"))
    (tmp_path / "ckpt-x.weights.h5").write_text("")  # not ours: ignored
    assert len(list_checkpoints(tmp_path)) == 3


def test_timed_checkpoint_waits_for_the_interval(tmp_path):
    holder = _holder()
    ckpt = TimedCheckpoint(tmp_path, every_minutes=10.0, keep=3)
    ckpt.set_model(holder)
    ckpt.on_train_begin()
    for batch in range(5):
        holder.optimizer.iterations.assign_add(1)
        ckpt.on_train_batch_end(batch)
    assert list_checkpoints(tmp_path) == []
    ckpt.finish()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [5]


def test_stop_at_step_counts_updates():
    holder = _holder()
    stop = StopAtStep(last_step=7, start_step=5, accumulation_steps=3)
    stop.set_model(holder)
    holder.stop_training = False
    for batch in range(5):
        stop.on_train_batch_end(batch)
    assert not holder.stop_training  # 5 batches = 1 update + 2 micro-batches: step 6
    stop.on_train_batch_end(5)
    assert holder.stop_training  # 6 batches = 2 updates: step 7


def test_wall_clock_budget_stops_at_an_update_boundary():
    holder = _holder()
    messages = []
    budget = WallClockBudget(max_minutes=1e-9, accumulation_steps=2, log=messages.append)
    budget.set_model(holder)
    holder.stop_training = False
    budget.on_train_begin()
    budget.on_train_batch_end(0)
    assert not holder.stop_training  # mid-update
    budget.on_train_batch_end(1)
    assert holder.stop_training and budget.stopped and "max_minutes" in messages[0]


def test_heartbeat_speaks_only_after_silence_names_the_phase_and_stops_when_paused():
    import time

    from tf_transformer.io import Heartbeat

    lines = []
    beat = Heartbeat("train", log=lines.append, every=0.1, max_every=0.1)  # no back-off here
    beat.phase("building the model")
    time.sleep(0.35)  # about 3 lines of silence
    building = list(lines)
    assert 2 <= len(building) <= 4 and all(line.startswith("train: building the model: ") for line in building)
    for _ in range(6):  # output every 0.05 s keeps it quiet
        beat.say("update line")
        time.sleep(0.05)
    assert lines[len(building):] == ["update line"] * 6
    beat.phase("tracing")
    time.sleep(0.2)
    assert any(line.startswith("train: tracing: ") for line in lines[len(building) + 6:])
    beat.pause()
    said = len(lines)
    time.sleep(0.3)
    assert len(lines) == said  # paused: silent
    beat.close()
    beat.phase("again")  # a phase after close starts a new thread
    time.sleep(0.25)
    beat.close()
    assert lines[-1].startswith("train: again: ")


def test_heartbeat_backs_off_while_the_silence_lasts_and_starts_again_after_output():
    """every 0.05 s, at most 0.2 s apart: lines at 0.05, 0.15, 0.35, 0.55, 0.75, 0.95 s of a
    1.0 s silence (6, not the 20 of a fixed 0.05 s); after a line of output the next come
    0.05 and 0.15 s into the silence again."""
    import time

    from tf_transformer.io import Heartbeat

    lines = []
    beat = Heartbeat("train", log=lines.append, every=0.05, max_every=0.2)
    beat.phase("skipping")
    time.sleep(1.0)
    silent = len(lines)
    assert 3 <= silent <= 8, lines
    beat.say("progress")
    time.sleep(0.3)  # back to 0.05 s after output: lines at 0.05 and 0.15 (at 0.2 without the reset)
    assert len(lines) >= silent + 3 and lines[silent] == "progress", lines[silent:]
    beat.close()
    assert Heartbeat("x", every=5.0, max_every=1.0).max_every == 5.0  # never below every


def test_first_update_heartbeat_speaks_while_waiting_and_stops_at_the_first_update():
    import time

    from tf_transformer.training.progress import FirstUpdateHeartbeat

    lines = []
    beat = FirstUpdateHeartbeat(every=0.05, log=lines.append)
    beat.on_train_begin()
    time.sleep(0.5)  # lines at 0.05, 0.15, 0.35 s (the wait doubles)
    beat.on_train_batch_end(0)
    said = len(lines)
    assert said >= 2 and all(line.startswith("train: preparing the first update") for line in lines)
    time.sleep(0.2)
    beat.on_train_batch_end(1)
    beat.on_train_end()
    assert len(lines) == said  # silent after the first update

    later = []  # a second fit call of the run (a resume makes two): its wait is not the first one's
    beat = FirstUpdateHeartbeat(every=0.05, log=later.append, what="skipping the input of 5 updates")
    beat.on_train_begin()
    beat.on_train_batch_end(0)
    beat.on_train_end()
    beat.on_train_begin()
    time.sleep(0.4)
    beat.on_train_batch_end(0)
    beat.on_train_end()
    assert later and all(line.startswith("train: preparing the first update of the next epochs: ") for line in later)

    quick = []
    beat = FirstUpdateHeartbeat(every=5.0, log=quick.append)
    beat.on_train_begin()
    beat.on_train_batch_end(0)
    beat.on_train_end()
    assert quick == []
