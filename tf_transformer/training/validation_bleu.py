"""BLEU on the validation set during training, best-checkpoint keeping and early stopping.

What OpenNMT-tf's ``--with_eval`` and fairseq's ``--eval-bleu --patience`` give, as one
Keras callback. At the end of every ``every_steps`` updates (aligned with ``fit``'s epochs,
so the validation loss of the same moment is in ``logs``), :class:`ValidationBLEU`:

1. translates the validation sources (all of them, or the first ``max_sentences``) with
   the Transformer being trained: greedy (``beam_size=1``) or beam search, the same
   :class:`~tf_transformer.decoding.translator.Translator` as ``tft translate``;
2. scores them with sacreBLEU (detokenized, cased; the same function as ``tft evaluate``;
   against lowercased references when the vocabulary lowercases, as ``tft evaluate`` does)
   and puts ``val_bleu`` into the epoch's ``logs``, so the progress line, ``History`` and
   the TensorBoard callback (placed after this one) all show it;
3. writes a checkpoint through the run's :class:`~tf_transformer.training.callbacks.TimedCheckpoint`
   (so checkpoints line up with evaluations and "average the last N" means the last N
   evaluation points), and keeps the weights of the ``keep_best`` best evaluations by ``metric``
   in ``best/`` (``best-<update>.weights.h5``; the best is ``best_step``'s, not the newest file);
4. appends one JSON line to ``eval.jsonl`` (step, wall-clock minutes, val_bleu, seconds
   spent decoding, val_loss, val_perplexity, best so far): the learning curve, and the state a resumed run reads back;
5. stops training after ``patience`` evaluations without improvement of ``metric``
   (``None``: never).

The metric is ``val_bleu`` (higher is better) or ``val_loss`` (lower is better). An
improvement is any strict one (no minimum delta), as fairseq's ``--patience``. With
``window`` N > 1, "best" and the patience count look at the mean of the metric over the
last N evaluations (fewer at the start) instead of the latest evaluation alone: greedy BLEU
on a validation set of 1,000 sentences moves by 2-4 points between evaluations 100 updates
apart, so one lucky evaluation would otherwise start the patience count while the model is
still improving. The weights kept in ``best/`` are then those of the last evaluation of the
best window.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import keras

from tf_transformer.io import atomic_write, list_step_files, read_eval_log, save_weights
from tf_transformer.training.callbacks import current_step

METRICS = ("val_bleu", "val_loss")

__all__ = ["METRICS", "ValidationBLEU", "read_eval_log"]


def _better(metric: str, new: float, old: Optional[float]) -> bool:
    if old is None or not math.isfinite(old):
        return math.isfinite(new)
    return new > old if metric == "val_bleu" else new < old


class ValidationBLEU(keras.callbacks.Callback):
    """Decode and score the validation set every ``every_steps`` updates; keep the best
    weights; stop early.

    Args:
        transformer: the Transformer being trained (its weights are read in place).
        tokenizer: the run's :class:`~tf_transformer.data.Tokenizer`.
        sources, references: validation sentences (detokenized text, parallel lists).
        every_steps: evaluate when the update counter is a multiple of this (call sites
            make it a multiple of ``fit``'s updates per epoch; evaluation runs at epoch end).
        beam_size, alpha, max_extra_length, batch_size, stop_rule: decoding settings
            (``beam_size=1``: greedy), as :class:`~tf_transformer.decoding.translator.Translator`'s.
        max_sentences: score only the first this many pairs (a fixed sample); ``None``: all.
        metric: ``"val_bleu"`` or ``"val_loss"``: what "best" and "patience" look at.
        patience: stop after this many evaluations without improvement; ``None``: never.
        window: best and patience follow the mean of ``metric`` over the last this many
            evaluations (1: the evaluation itself, as fairseq).
        keep_best: best weight files kept in ``best_dir`` (0: none).
        best_dir: where ``best-<step>.weights.h5`` go.
        log_path: the ``eval.jsonl`` file (read back on resume; ``None``: no file).
        checkpoint: a ``TimedCheckpoint`` to save at each evaluation (optional).
        tensorboard_dir: also write ``val_bleu`` as a scalar here (optional; the TensorBoard
            callback logs it too when it comes after this callback).
        enabled: ``False`` on non-chief workers: they still stop with the chief (the
            decision is made from the same metric), but write nothing.
        log: one-line messages.
    """

    def __init__(self, transformer, tokenizer, sources: Sequence[str], references: Sequence[str], *,
                 every_steps: int, beam_size: int = 1, alpha: float = 0.6, max_extra_length: int = 50,
                 batch_size: int = 128, stop_rule: str = "bound", max_sentences: Optional[int] = None,
                 metric: str = "val_bleu", window: int = 1,
                 patience: Optional[int] = None, keep_best: int = 1, best_dir=None, log_path=None,
                 checkpoint=None, tensorboard_dir=None, enabled: bool = True,
                 log: Optional[Callable[[str], None]] = None):
        super().__init__()
        if metric not in METRICS:
            raise ValueError(f"metric={metric!r} is not one of {', '.join(METRICS)}")
        if len(sources) != len(references):
            raise ValueError(f"{len(sources)} validation sources but {len(references)} references")
        if max_sentences is not None:
            sources, references = sources[:max_sentences], references[:max_sentences]
        if not sources:
            raise ValueError("no validation sentences to evaluate BLEU on")
        if int(window) < 1:
            raise ValueError(f"window={window} must be >= 1")
        self.transformer = transformer
        self.tokenizer = tokenizer
        self.sources = list(sources)
        from tf_transformer.evaluation.bleu import references_for

        self.references = references_for(tokenizer, references)
        self.every_steps = int(every_steps)
        self.decode_settings = dict(beam_size=int(beam_size), alpha=float(alpha),
                                    max_extra_length=int(max_extra_length), batch_size=int(batch_size),
                                    stop_rule=stop_rule)
        self.metric = metric
        self.window = int(window)
        self.patience = patience
        self.keep_best = int(keep_best)
        self.best_dir = Path(best_dir) if best_dir is not None else None
        self.log_path = Path(log_path) if log_path is not None else None
        self.checkpoint = checkpoint
        self.tensorboard_dir = tensorboard_dir
        self.enabled = enabled
        self.log = log or (lambda msg: print(msg, flush=True))
        self._translator = None
        self._writer = None
        self.rows: list[dict] = []
        self.best: Optional[float] = None
        self.best_step: Optional[int] = None
        self.bad_evaluations = 0
        self.stopped = False
        self._start = None
        self._minutes_before = 0.0

    # -- state ---------------------------------------------------------------------------
    def restore(self, step: int) -> None:
        """Read back ``eval.jsonl`` rows up to ``step`` (a resumed run continues the same
        best value, patience count and learning curve). Rows after ``step`` belong to work
        that the resume repeats: the file is rewritten without them."""
        if self.log_path is None:
            return
        rows = [r for r in read_eval_log(self.log_path) if int(r["step"]) <= step]
        self.rows = []
        self.best = self.best_step = None
        self.bad_evaluations = 0
        for row in rows:
            self._account(row)
        if rows:
            self._minutes_before = float(rows[-1].get("minutes", 0.0))
        self.stopped = self.patience is not None and self.bad_evaluations >= self.patience
        if self.enabled:
            self._rewrite_log()

    def _watched(self) -> Optional[float]:
        """What best and patience compare: the metric of the latest row, or its mean over
        the last ``window`` rows that have it."""
        values = [float(r[self.metric]) for r in self.rows[-self.window:] if r.get(self.metric) is not None]
        if not values or self.rows[-1].get(self.metric) is None:
            return None
        return sum(values) / len(values)

    @property
    def watched_name(self) -> str:
        return self.metric if self.window == 1 else f"{self.metric}_mean{self.window}"

    def _account(self, row: dict) -> bool:
        self.rows.append(row)
        value = self._watched()
        if self.window > 1 and value is not None:
            row[self.watched_name] = round(value, 4)
        improved = value is not None and _better(self.metric, float(value), self.best)
        if improved:
            self.best, self.best_step = float(value), int(row["step"])
            self.bad_evaluations = 0
        else:
            self.bad_evaluations += 1
        return improved

    def _rewrite_log(self) -> None:
        atomic_write(self.log_path, "".join(json.dumps(r) + "\n" for r in self.rows))

    # -- scoring -------------------------------------------------------------------------
    def score(self) -> tuple[float, list[str]]:
        """sacreBLEU of the current weights on the validation sentences, and the outputs."""
        from tf_transformer.decoding.translator import Translator
        from tf_transformer.evaluation.bleu import sacre_bleu

        if self._translator is None:
            self._translator = Translator(self.transformer, self.tokenizer, **self.decode_settings)
        hypotheses, _, _ = self._translator.translate(self.sources)
        return sacre_bleu(hypotheses, self.references).score, hypotheses

    # -- Keras hooks ---------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        if self._start is None:  # train() may call fit twice (to finish an interrupted epoch)
            self._start = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        step = current_step(self.model)
        if step % self.every_steps or (self.rows and int(self.rows[-1]["step"]) == step):
            return
        started = time.monotonic()
        bleu, _ = self.score()
        seconds = time.monotonic() - started
        logs["val_bleu"] = bleu
        row = {"step": step,
               "minutes": round(self._minutes_before + (time.monotonic() - self._start) / 60.0, 3),
               "val_bleu": round(bleu, 4), "eval_seconds": round(seconds, 2)}
        for key in ("val_loss", "val_perplexity", "val_accuracy", "loss"):
            if key in logs:
                row[key] = round(float(logs[key]), 5)
        if self.metric == "val_loss" and "val_loss" not in row:
            raise RuntimeError("metric val_loss needs validation data in fit (train.validation_steps / data)")
        improved = self._account(row)
        row["best"] = self.best
        row["best_step"] = self.best_step
        if self.enabled:
            if self.checkpoint is not None:
                self.checkpoint.save()
            if self.keep_best > 0 and self.best_dir is not None:
                self._keep_best(step)
            if self.log_path is not None:
                self._append(row)
            self._write_scalar(step, bleu)
        windowed = self.window > 1 and self.watched_name in row
        watched = f"{self.watched_name} {row[self.watched_name]:.2f}; " if windowed else ""
        tail = f"{watched}best {self.best:.4g} at step {self.best_step}"
        if self.patience is not None:
            tail += f", {self.bad_evaluations}/{self.patience} without improvement"
        self.log(f"eval step {step}: val_bleu {bleu:.2f} ({len(self.sources)} sentences, "
                 f"{seconds:.0f} s){' *' if improved else ''}; {tail}")
        if self.patience is not None and self.bad_evaluations >= self.patience:
            self.log(f"early stopping: {self.watched_name} has not improved for {self.patience} evaluations; "
                     f"best {self.best:.4g} at step {self.best_step}")
            self.stopped = True
            self.model.stop_training = True

    def _append(self, row: dict) -> None:
        """Rewrite the log with ``row`` (already in ``rows``) atomically: a kill leaves the
        previous complete log, never a half line."""
        atomic_write(self.log_path, "".join(json.dumps(r) + "\n" for r in self.rows))

    def best_steps(self) -> list[int]:
        """The updates of the ``keep_best`` best evaluations so far by the watched value, best
        first; of equal values the earlier ranks first (so the first is ``best_step``)."""
        key = self.watched_name if self.window > 1 else self.metric
        scored = [(float(r[key]), int(r["step"])) for r in self.rows
                  if r.get(key) is not None and math.isfinite(float(r[key]))]
        sign = -1.0 if self.metric == "val_bleu" else 1.0  # val_bleu: higher is better
        ranked = [step for _, step in sorted(scored, key=lambda vs: (sign * vs[0], vs[1]))]
        if self.best_step is not None and self.best_step in ranked:  # first, whatever the rounding of rows
            ranked.remove(self.best_step)
            ranked.insert(0, self.best_step)
        return ranked[: self.keep_best]

    def _keep_best(self, step: int) -> None:
        """Write this evaluation's weights when they rank among the ``keep_best`` best, and
        remove the files that no longer do (a later file is not necessarily a better one)."""
        top = set(self.best_steps())
        if step in top:
            save_weights(self.transformer, self.best_dir / f"best-{step}.weights.h5")
        for kept_step, path in list_step_files(self.best_dir, "best"):
            if kept_step not in top:
                path.unlink(missing_ok=True)

    def _write_scalar(self, step: int, bleu: float) -> None:
        if self.tensorboard_dir is None:
            return
        import tensorflow as tf

        if self._writer is None:
            self._writer = tf.summary.create_file_writer(str(Path(self.tensorboard_dir) / "eval"))
        with self._writer.as_default():
            tf.summary.scalar("val_bleu", bleu, step=step)
        self._writer.flush()
