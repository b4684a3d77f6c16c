"""Callbacks of ``tft train``: checkpoints every N minutes, resumable backups, budgets.

All of them count *updates* (``optimizer.iterations``), not ``fit`` batches: with gradient
accumulation one update takes ``accumulation_steps`` batches, and they only act at update
boundaries.

Files (under ``model_dir``)::

    checkpoints/ckpt-<step>.weights.h5    Transformer weights, every train.checkpoint_every_minutes
                                          and at the end; the last train.keep_checkpoints kept
    backup/latest.weights.h5              weights + optimizer state (step counter, Adam moments)
                                          + dropout RNG state and data position (exact resume)
    backup/training_metadata.json         {"epoch", "batch", "step"} of that backup

Both are written to a temporary name, flushed and renamed, so a process killed while
writing leaves the previous file intact.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Callable, Optional

import keras
import numpy as np

from tf_transformer import compat
from tf_transformer.errors import DamagedFileError
from tf_transformer.io import atomic_path, atomic_write, list_step_files, load_weights, save_weights, state_bytes


def current_step(model) -> int:
    """``optimizer.iterations`` as a Python int (works for mirrored variables too)."""
    return int(np.asarray(keras.ops.convert_to_numpy(model.optimizer.iterations)))


def list_checkpoints(directory) -> list[tuple[int, Path]]:
    """``[(step, path), ...]`` of ``ckpt-<step>.weights.h5`` files, oldest first."""
    return list_step_files(directory, "ckpt")


class _UpdateCounting(keras.callbacks.Callback):
    """Counts fit batches and knows when one is the last of an update."""

    def __init__(self, accumulation_steps: int = 1):
        super().__init__()
        self.accumulation_steps = max(1, int(accumulation_steps))
        self._batches = 0

    def _count_batch(self) -> bool:
        """Call once per batch; True when the batch completed an update."""
        self._batches += 1
        return self._batches % self.accumulation_steps == 0


class TimedCheckpoint(_UpdateCounting):
    """Write the Transformer's weights to ``directory/ckpt-<step>.weights.h5`` every
    ``every_minutes`` of wall-clock time and at the end of training; keep the newest ``keep``.

    Args:
        directory: where checkpoints go (created).
        every_minutes: the paper's 10.
        keep: how many to keep (paper: 5 averaged for base, 20 for big).
        accumulation_steps: fit batches per update.
        get_layer: what to save, from the fit model (default: ``model.transformer``).
        enabled: False on non-chief workers (they write nothing).
        log: callable for one-line messages (default: print).
    """

    def __init__(self, directory, every_minutes: float = 10.0, keep: int = 20, accumulation_steps: int = 1,
                 get_layer: Optional[Callable] = None, enabled: bool = True, log: Optional[Callable] = None):
        super().__init__(accumulation_steps)
        self.directory = Path(directory)
        self.every_seconds = float(every_minutes) * 60.0
        self.keep = int(keep)
        self.get_layer = get_layer or (lambda model: getattr(model, "transformer", model))
        self.enabled = enabled
        self.log = log or (lambda msg: print(msg, flush=True))
        self.saved: list[Path] = []
        self._last_time = None
        self._last_step = None

    def on_train_begin(self, logs=None):
        if self._last_time is None:
            self._last_time = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if self._count_batch() and time.monotonic() - self._last_time >= self.every_seconds:
            self.save()

    def save(self) -> Optional[Path]:
        self._last_time = time.monotonic()
        if not self.enabled:
            return None
        step = current_step(self.model)
        if step == self._last_step:
            return None
        path = self.directory / f"ckpt-{step}.weights.h5"
        if self._last_step is None and path.is_file():  # a rerun of a finished run
            self._last_step = step
            return None
        save_weights(self.get_layer(self.model), path)
        self._last_step = step
        self.saved.append(path)
        self._prune()
        return path

    def _prune(self):
        existing = list_checkpoints(self.directory)
        for _, path in existing[: max(0, len(existing) - self.keep)]:
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def finish(self) -> Optional[Path]:
        """Save the final weights (call once after the last ``fit``)."""
        return self.save()


class ResumableBackup(keras.callbacks.Callback):
    """Resumable backups (weights, optimizer state, dropout RNG state) that resume at the
    saved *update*, exactly.

    ``backup_dir/latest.weights.h5`` is ``model.save_weights`` of the training model (the
    Transformer's weights, the step counter and the Adam moments) plus an HDF5 group
    ``tf_transformer_resume`` holding what Keras does not save: the state of every dropout
    ``SeedGenerator`` and the number of training batches the run has consumed, with the
    step they belong to. One file, written atomically, so weights, optimizer, RNG and data
    position always agree. ``training_metadata.json`` repeats the step for people and tools.

    It differs from ``keras.callbacks.BackupAndRestore`` where training by updates needs it:
    :meth:`restore` is called before ``fit`` (so the caller can plan the rest of the run from
    the restored ``optimizer.iterations`` and position the input stream), backups are
    written atomically, ``save_every_updates`` counts updates (``None``: at each epoch end),
    and the backup is kept when training ends (rerunning a finished run is then a no-op, and
    longer runs can continue). Training after a restart loses at most the updates done since
    the last backup, and continues with the batches and dropout masks it would have had.

    The state also records the number of replicas that trained (``replicas``): the stream is
    cut into one token-budget batch per replica, so only a resume on as many replicas
    continues with exactly the batches the run would have had.

    ``keep_previous`` (multi-worker training) keeps the backup before ``latest`` as
    ``previous.weights.h5``: a worker killed between another worker's backup and its own
    still holds the update that all workers have, and :meth:`restore` with ``step`` loads it.
    """

    GROUP = "tf_transformer_resume"

    def __init__(self, backup_dir, save_every_updates: Optional[int] = None, accumulation_steps: int = 1,
                 enabled: bool = True, keep_previous: bool = False, replicas: int = 1):
        super().__init__()
        self.backup_dir = Path(backup_dir)
        self.enabled = enabled
        self.keep_previous = keep_previous
        self.replicas = int(replicas)
        self.restored_replicas: Optional[int] = None  # the replica count of the restored backup, where known
        self.accumulation_steps = max(1, int(accumulation_steps))
        self.save_every_updates = save_every_updates
        self.save_freq = "epoch" if not save_every_updates else int(save_every_updates) * self.accumulation_steps
        self._batches = 0
        self._epochs_done = 0
        self.last_saved_step: Optional[int] = None
        self.restored_rng = False
        self.restored_path: Optional[Path] = None

    @property
    def weights_path(self) -> Path:
        return self.backup_dir / "latest.weights.h5"

    @property
    def previous_path(self) -> Path:
        """The backup before ``latest`` (written only with ``keep_previous``)."""
        return self.backup_dir / "previous.weights.h5"

    @property
    def metadata_path(self) -> Path:
        return self.backup_dir / "training_metadata.json"

    def exists(self) -> bool:
        return self.weights_path.is_file() or (self.keep_previous and self.previous_path.is_file())

    def saved_steps(self) -> dict[int, Path]:
        """``{update step: file}`` of the backups on disk, read from their resume state
        without loading them: ``latest`` and, with ``keep_previous``, ``previous`` (alone
        when a kill came between retiring the old latest and renaming the new one in)."""
        found = {}
        for path in (self.previous_path, self.weights_path) if self.keep_previous else (self.weights_path,):
            if path.is_file():
                state = self._read_state(path)
                if "step" not in state:
                    raise DamagedFileError(f"backup {path}: damaged: it has no resume state "
                                           f"(group {self.GROUP} with the step)")
                found[int(state["step"])] = path
        return found

    def restore(self, model, step: Optional[int] = None) -> Optional[int]:
        """Load the newest backup (or, with ``step``, the one of that update, see
        :meth:`saved_steps`) into ``model`` (built, optimizer built) after checking that the
        file is complete and every value finite; return the restored update step, or
        ``None`` when there is no backup."""
        if step is not None:
            saved = self.saved_steps()
            if step not in saved:
                raise DamagedFileError(f"backup {self.backup_dir}: no backup of step {step} "
                                       f"(it holds steps {sorted(saved) or 'none'})")
            path = saved[step]
        elif self.weights_path.is_file():
            path = self.weights_path
        elif self.keep_previous and self.previous_path.is_file():
            path = self.previous_path
        else:
            return None
        load_weights(model, path, "backup")
        self.restored_path = path
        state = self._read_state(path)
        self.restored_replicas = int(state["replicas"]) if "replicas" in state else None
        rng = compat.seed_generator_states(model)
        saved = state.get("rng")
        if saved is not None and len(saved) == len(rng):
            for variable, value in zip(rng, saved):
                variable.assign(np.asarray(value).astype(keras.backend.standardize_dtype(variable.dtype)))
            self.restored_rng = True
        step = current_step(model)
        if "step" in state and int(state["step"]) != step:
            raise DamagedFileError(f"backup {path}: damaged: its resume state is of step "
                                   f"{int(state['step'])} but its optimizer of step {step}")
        self.last_saved_step = step
        return step

    def _read_state(self, path: Path) -> dict:
        import h5py

        with h5py.File(path, "r") as f:
            if self.GROUP not in f:
                return {}
            group = f[self.GROUP]
            state = {key: group[key][()] for key in group}
            state.update({key: group.attrs[key] for key in group.attrs})
        return state

    def on_epoch_end(self, epoch, logs=None):
        self._epochs_done = epoch + 1
        if self.save_freq == "epoch":
            self.save()

    def on_train_batch_end(self, batch, logs=None):
        if self.save_freq == "epoch":
            return
        self._batches += 1
        if self._batches % self.save_freq == 0:
            self.save()

    def save(self) -> Optional[Path]:
        """Back up the fit model now (nothing when disabled or already saved at this step);
        returns the weights path written, if any. Call at an update boundary."""
        if not self.enabled:
            return None
        import h5py

        step = current_step(self.model)
        if step == self.last_saved_step:
            return None
        rng = np.stack([np.asarray(keras.ops.convert_to_numpy(v)).astype(np.int64)
                        for v in compat.seed_generator_states(self.model)] or [np.zeros([0, 2], np.int64)])
        with atomic_path(self.weights_path, expected_bytes=state_bytes(self.model) + 2**20) as tmp:
            self.model.save_weights(str(tmp), overwrite=True)
            with h5py.File(tmp, "a") as f:
                group = f.create_group(self.GROUP)
                group.create_dataset("rng", data=rng)
                group.attrs["step"] = step
                group.attrs["batches"] = step * self.accumulation_steps
                group.attrs["replicas"] = self.replicas
            if self.keep_previous and self.weights_path.is_file():  # retire the old latest first
                os.replace(self.weights_path, self.previous_path)
        atomic_write(self.metadata_path, json.dumps({"epoch": self._epochs_done, "batch": 0, "step": step}))
        self.last_saved_step = step
        return self.weights_path


class StopAtStep(_UpdateCounting):
    """Stop ``fit`` once ``optimizer.iterations`` reaches ``last_step`` (counted from
    ``start_step`` without reading the variable every batch)."""

    def __init__(self, last_step: int, start_step: int = 0, accumulation_steps: int = 1):
        super().__init__(accumulation_steps)
        self.last_step = int(last_step)
        self.step = int(start_step)

    def on_train_batch_end(self, batch, logs=None):
        if self._count_batch():
            self.step += 1
            if self.step >= self.last_step:
                self.model.stop_training = True


class StopOnSignal(_UpdateCounting):
    """Stop ``fit`` at the next update boundary on SIGTERM or SIGINT (Ctrl-C), so that the
    run's end-of-training writes (checkpoint, backup, ``model.keras``) happen and a rerun of
    the same command continues with nothing lost: what a batch scheduler's preemption or a
    user's Ctrl-C otherwise costs is every update since the last backup.

    The first signal asks for the stop (and is reported); the handlers are then put back, so a
    second one acts at once as it would have without this callback. Installed for the
    duration of ``fit`` only, and only from the main thread (where Python delivers
    signals). :attr:`received` is the signal's name (``"SIGTERM"``/``"SIGINT"``) or None.

    ``save_now``: called at the update where training stops (the run's backup), before Keras'
    end-of-epoch work (the validation pass of the cut epoch) that a scheduler's grace period
    may not outlast. A signal that arrives during that work (validation, BLEU) stops training
    at the epoch's end, before another update.
    """

    SIGNALS = ("SIGTERM", "SIGINT")

    def __init__(self, accumulation_steps: int = 1, log: Optional[Callable] = None,
                 save_now: Optional[Callable] = None):
        super().__init__(accumulation_steps)
        self.log = log or (lambda msg: print(msg, flush=True))
        self.save_now = save_now
        self.received: Optional[str] = None
        self._previous: dict = {}

    def _handler(self, signum, frame):
        import signal

        self.received = signal.Signals(signum).name
        self._restore()
        again = "Ctrl-C" if signum == signal.SIGINT else self.received
        self.log(f"train: {self.received} received: stopping after the current update and writing the backup, "
                 f"checkpoint and model (rerun the same command to continue; {again} again stops at once)")

    def _restore(self):
        import signal

        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def on_train_begin(self, logs=None):
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread() or self._previous:
            return
        for name in self.SIGNALS:
            signum = getattr(signal, name, None)
            if signum is not None:
                self._previous[signum] = signal.signal(signum, self._handler)

    def on_train_batch_end(self, batch, logs=None):
        if self._count_batch() and self.received:
            if not self.model.stop_training and self.save_now is not None:
                self.save_now()
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if self.received:
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        self._restore()


class WallClockBudget(_UpdateCounting):
    """Stop ``fit`` (at an update boundary) after ``max_minutes`` of training time."""

    def __init__(self, max_minutes: float, accumulation_steps: int = 1, log: Optional[Callable] = None):
        super().__init__(accumulation_steps)
        self.max_seconds = float(max_minutes) * 60.0
        self.log = log or (lambda msg: print(msg, flush=True))
        self.start = None
        self.stopped = False

    def on_train_begin(self, logs=None):
        if self.start is None:
            self.start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        if self._count_batch() and time.monotonic() - self.start >= self.max_seconds:
            if not self.stopped:
                self.log(f"train.max_minutes={self.max_seconds / 60:g} reached: stopping at step "
                         f"{current_step(self.model)}")
            self.stopped = True
            self.model.stop_training = True


def _scalars(logs) -> dict[str, float]:
    """The numeric entries of Keras ``logs`` as floats."""
    out = {}
    for key, value in (logs or {}).items():
        try:
            out[key] = float(np.asarray(keras.ops.convert_to_numpy(value)).reshape(-1)[0])
        except (TypeError, ValueError, IndexError):
            continue
    return out


class UpdateTensorBoard(_UpdateCounting):
    """TensorBoard scalars with the optimizer update as the step, in ``log_dir/train`` and
    ``log_dir/validation``.

    * every ``every_steps`` updates (``None``: none): ``batch_<metric>`` (the running means of the
      epoch so far, as Keras logs them) and ``batch_learning_rate`` in ``train``;
    * at every epoch end: ``epoch_<metric>`` and ``epoch_learning_rate`` in ``train``, the
      validation metrics as ``epoch_<metric>`` in ``validation`` (so train and validation curves
      of one metric share a chart).

    Keras' own ``TensorBoard`` callback counts steps from each ``fit`` call's start, so a resumed
    run wrote over its earlier steps, gradient accumulation stretched the axis by the number of
    micro-batches, and epoch scalars used the epoch index; and its every-N-batches filter also
    silenced other writers between its own writes (the validation BLEU). Here every scalar of a
    run, resumed or not, lies on one update axis, the one of ``eval.jsonl`` and the checkpoints.
    """

    def __init__(self, log_dir, every_steps: Optional[int] = None, accumulation_steps: int = 1):
        super().__init__(accumulation_steps)
        self.log_dir = Path(log_dir)
        self.every = int(every_steps) if every_steps else None
        self._writers = {}
        self._last = None

    def _write(self, name: str, scalars: dict, step: int) -> None:
        import tensorflow as tf

        if name not in self._writers:
            self._writers[name] = tf.summary.create_file_writer(str(self.log_dir / name))
        with self._writers[name].as_default():
            for tag, value in scalars.items():
                tf.summary.scalar(tag, value, step=step)

    def _learning_rate(self) -> float:
        return float(np.asarray(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    def on_train_batch_end(self, batch, logs=None):
        if not self._count_batch() or not self.every:
            return
        step = current_step(self.model)
        if step % self.every or step == self._last:
            return
        self._last = step
        scalars = {f"batch_{k}": v for k, v in _scalars(logs).items() if k != "learning_rate"}
        scalars["batch_learning_rate"] = self._learning_rate()
        self._write("train", scalars, step)

    def on_epoch_end(self, epoch, logs=None):
        step = current_step(self.model)
        values = _scalars(logs)
        train = {f"epoch_{k}": v for k, v in values.items() if not k.startswith("val_") and k != "learning_rate"}
        train["epoch_learning_rate"] = self._learning_rate()
        self._write("train", train, step)
        validation = {f"epoch_{k[4:]}": v for k, v in values.items() if k.startswith("val_")}
        if validation:
            self._write("validation", validation, step)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        for writer in self._writers.values():
            writer.flush()
