"""Progress lines for a log file: what ``tft train`` shows when stdout is not a terminal.

Keras' progress bar redraws one line with carriage returns and ANSI codes, which a log file
(``tft train ... > train.log``, a CI job, ``nohup``) keeps as a wall of overwritten text.
:class:`ProgressLines` prints plain lines instead: one every ``every_steps`` optimizer
updates (update, epoch, the running training metrics, updates/s) and one at the end of each
epoch with the epoch's training and validation metrics, e.g.::

    update 200/2000  epoch 2/20  loss 5.1234  perplexity 212.4  accuracy 0.1830  lr 1.20e-03  1.90 updates/s
        8,406 tgt tokens/s  ETA 16 min      (one line in the log)
    epoch 2/20 (update 200, epoch end 2.4 s): loss 5.0982  perplexity 207.1  accuracy 0.1852  val_loss 4.8810 ...

The learning rate is the schedule's at the update; updates/s and target tokens/s are over the
interval since the previous line; the ETA is to the run's last update at the pace of this
sitting so far, or to the end of ``train.max_minutes`` when that comes first (marked so; early
stopping may end the run sooner).

"epoch end" is the time from the epoch's last update to its line: the validation pass and the
epoch-end work of the callbacks before this one (validation BLEU, checkpoints, backups). It is
where a slow evaluation shows: a stall there otherwise only lowers the next interval's updates/s.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional

import keras
import numpy as np

from tf_transformer.io import Heartbeat, say
from tf_transformer.training.callbacks import current_step

__all__ = ["FirstUpdateHeartbeat", "ProgressLines", "UpdateProgressBar", "stdout_is_terminal"]


def stdout_is_terminal(stream=None) -> bool:
    stream = sys.stdout if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _fmt(name: str, value) -> str:
    v = float(np.asarray(value).reshape(-1)[0])
    if name.endswith("learning_rate") or name == "lr":
        return f"{name} {v:.2e}"
    return f"{name} {v:.4f}" if abs(v) < 1e4 else f"{name} {v:.4g}"


def _eta(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class ProgressLines(keras.callbacks.Callback):
    """One plain line every ``every_steps`` updates and one per epoch (see the module doc).

    Args:
        every_steps: updates between lines (optimizer steps: with gradient accumulation, one
            update is several Keras batches).
        total_steps: the run's last update, for ``update N/total``.
        epochs: the last epoch number, for ``epoch E/epochs``.
        write: where lines go (default: print to stdout, flushed).
    """

    def __init__(self, every_steps: int, total_steps: int, epochs: int,
                 write: Optional[Callable[[str], None]] = None, max_minutes: Optional[float] = None):
        super().__init__()
        self.every_steps = max(1, int(every_steps))
        self.total_steps = int(total_steps)
        self.max_seconds = float(max_minutes) * 60.0 if max_minutes else None
        self.epochs = int(epochs)
        self.write = write or (lambda line: print(line, flush=True))
        self._epoch = 0
        self._last_logged = None
        self._mark = None
        self._start = None  # (time, step) of this sitting's first fit call
        self._last_update_at = None

    def _tokens(self) -> Optional[float]:
        seen = getattr(self.model, "target_tokens_seen", None)
        try:
            return float(seen()) if seen is not None else None
        except (AttributeError, TypeError, ValueError):  # not built yet, or not our training model
            return None

    def on_train_begin(self, logs=None):
        step = current_step(self.model)
        self._last_logged = step
        self._mark = (time.perf_counter(), step, self._tokens())
        if self._start is None:
            self._start = self._mark

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch + 1

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self._last_update_at = now
        step = current_step(self.model)
        if step == self._last_logged or step % self.every_steps:
            return
        self._last_logged = step
        then, then_step, then_tokens = self._mark
        seconds = max(now - then, 1e-9)
        rate = (step - then_step) / seconds
        tokens = self._tokens()
        self._mark = (now, step, tokens)
        metrics = "  ".join(_fmt(k, v) for k, v in (logs or {}).items() if k not in ("learning_rate", "lr"))
        parts = [f"update {step:,}/{self.total_steps:,}", f"epoch {self._epoch}/{self.epochs}", metrics]
        try:
            parts.append(_fmt("lr", keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))
        except (AttributeError, TypeError, ValueError):
            pass
        parts.append(f"{rate:.2f} updates/s")
        if tokens is not None and then_tokens is not None:
            parts.append(f"{(tokens - then_tokens) / seconds:,.0f} tgt tokens/s")
        elapsed = now - self._start[0]
        pace = (step - self._start[1]) / max(elapsed, 1e-9)
        if pace > 0 and step < self.total_steps:
            left = (self.total_steps - step) / pace
            budget_left = None if self.max_seconds is None else max(0.0, self.max_seconds - elapsed)
            if budget_left is not None and budget_left < left:  # the sitting's time budget ends it first
                parts.append(f"ETA {_eta(budget_left)} (train.max_minutes)")
            else:
                parts.append(f"ETA {_eta(left)}")
        self.write("  ".join(p for p in parts if p))

    def on_epoch_end(self, epoch, logs=None):
        ended = ""
        if self._last_update_at is not None:
            ended = f", epoch end {time.perf_counter() - self._last_update_at:.1f} s"
        metrics = "  ".join(_fmt(k, v) for k, v in (logs or {}).items())
        self.write(f"epoch {epoch + 1}/{self.epochs} (update {current_step(self.model):,}{ended}): {metrics}")


class UpdateProgressBar(keras.callbacks.Callback):
    """Keras' progress bar (``verbose=1``) counting optimizer updates, not Keras batches.

    Under gradient accumulation every update is ``accumulation_steps`` batches of ``fit``, so
    Keras' own bar would show ``k`` times the epoch's updates and a per-batch time. This bar
    advances once per update, to the epoch's number of updates, with the running metrics."""

    def __init__(self, accumulation_steps: int):
        super().__init__()
        self.k = max(1, int(accumulation_steps))
        self._bar = None
        self._first = 0
        self._seen = 0

    def on_epoch_begin(self, epoch, logs=None):
        batches = (self.params or {}).get("steps")
        epochs = (self.params or {}).get("epochs")
        if epochs:
            print(f"Epoch {epoch + 1}/{epochs}", flush=True)
        self._bar = keras.utils.Progbar(None if batches is None else -(-int(batches) // self.k),
                                        unit_name="update")
        self._first = current_step(self.model)
        self._seen = 0

    def _values(self, logs):
        return [(k, float(np.asarray(v).reshape(-1)[0])) for k, v in (logs or {}).items()
                if np.size(v) == 1]

    def on_train_batch_end(self, batch, logs=None):
        done = current_step(self.model) - self._first
        if self._bar is not None and done != self._seen:
            self._seen = done
            self._bar.update(done, values=self._values(logs))

    def on_epoch_end(self, epoch, logs=None):
        if self._bar is not None:
            self._bar.update(self._seen, values=self._values(logs), finalize=True)
            self._bar = None


def resolve_verbose(verbose, train_config, enabled: bool = True, stream=None,
                    accumulation_steps: int = 1) -> tuple:
    """``(keras_verbose, extra_callbacks)`` for ``model.fit``: ``"auto"`` is Keras' progress bar on
    a terminal and, elsewhere, no Keras output plus :class:`ProgressLines` every
    ``train.log_every_steps`` updates; 0, 1 and 2 are Keras' own (no extra lines). With gradient
    accumulation (``accumulation_steps`` > 1) the progress bar is :class:`UpdateProgressBar`,
    which counts updates where Keras' would count micro-batches."""
    bar = (0, [UpdateProgressBar(accumulation_steps)]) if accumulation_steps > 1 else (1, [])
    if verbose != "auto":
        return bar if verbose == 1 else (verbose, [])
    if stdout_is_terminal(stream):
        return bar
    if not enabled:
        return 0, []
    epochs = -(-train_config.train_steps // train_config.steps_per_epoch)
    return 0, [ProgressLines(train_config.log_every_steps, train_config.train_steps, epochs,
                             max_minutes=train_config.max_minutes)]


class FirstUpdateHeartbeat(keras.callbacks.Callback):
    """A line every ``every`` seconds of silence while a ``fit`` call waits for its first update.

    Before the first update the input pipeline fills its first chunk or shuffle buffer (and,
    on a resume, skips the batches already trained on) and TensorFlow traces the training
    step, which on a large corpus can take tens of seconds with nothing else to show; this
    says so instead of staying silent. ``heartbeat`` is the :class:`~tf_transformer.io.Heartbeat`
    of the whole command (``train`` makes one); without it the callback runs its own, printing
    through ``log``. Nothing is printed when the first update comes within ``every`` seconds.
    ``what`` describes the wait of the first ``fit`` call; later calls of the same run (a
    resume makes two) wait for nothing but their first step, and say so."""

    def __init__(self, every: float = 5.0, log: Optional[Callable[[str], None]] = None,
                 heartbeat: Optional[Heartbeat] = None, what: str = ""):
        super().__init__()
        self._own = heartbeat is None
        self.heartbeat = heartbeat or Heartbeat("train", log=log or say, every=every)
        self.what = what or "input pipeline filling its buffers, training step being traced"
        self._waiting = False
        self._calls = 0

    def on_train_begin(self, logs=None):
        self._waiting = True
        self._calls += 1
        if self._calls == 1:
            self.heartbeat.phase(f"preparing the first update ({self.what})")
        else:
            self.heartbeat.phase("preparing the first update of the next epochs")

    def _stop(self):
        if self._waiting:
            self._waiting = False
            self.heartbeat.pause()
        if self._own:
            self.heartbeat.close()

    def on_train_batch_end(self, batch, logs=None):
        if self._waiting:
            self._stop()

    def on_train_end(self, logs=None):
        self._stop()
