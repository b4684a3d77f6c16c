"""``train(config)``: the whole training run behind ``tft train``, callable from Python.

::

    from tf_transformer.config import load_config
    from tf_transformer.training import train
    result = train(load_config("multi30k_small", ["train.train_steps=500"]), model_dir="runs/try")
    print(result.summary())        # what was written where
    result.model                   # the trained Transformer

A run directory (``train.model_dir``) holds::

    model.keras                  the final Transformer (keras.saving.load_model)
    config.yaml                  the resolved config (vocab_size filled in, vocab_model -> vocab.model)
    vocab.model, vocab.vocab     copy of the SentencePiece vocabulary
    checkpoints/ckpt-<step>.weights.h5   every train.checkpoint_every_minutes, last train.keep_checkpoints
    backup/                      weights + optimizer state for resuming (train.backup_every_steps)
    sittings.jsonl               one line per train call: start/end time, updates, why it ended, speed, host
    eval.jsonl                   validation BLEU per evaluation (train.eval_bleu_every_steps)
    logs/                        TensorBoard (train/ and validation/)

Running the same command again after a crash resumes from ``backup/`` exactly: at the saved
update, with the step counter, learning rate, Adam moments and dropout RNG state restored and
the input stream continuing with the batch after the last one trained on (the stream is a
deterministic function of the seeds, and the batches consumed are skipped). A backup of
step 0 is written before training starts, so a run can be resumed from the moment it has
written anything. After a finished run it does nothing but rewrite the outputs (raise
``train.train_steps`` to continue training).

The run directory is a contract (:mod:`~tf_transformer.training.rundir`): a config that
differs from its ``config.yaml`` in anything but cadence, budget and location fields, or a
different vocabulary, is refused before anything is written (``allow_config_change=True``
overrides on purpose). The directory is checked for write access and free space first,
and the ``.partial-*`` leftovers of killed writes are removed.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import shutil
import time
import types
from pathlib import Path
from typing import Any, Callable, Optional, Union

import keras
import numpy as np
import tensorflow as tf

from tf_transformer.compat import continuing_stream
from tf_transformer.config import Config, ConfigError
from tf_transformer.errors import ClusterError, DataError, UserError
from tf_transformer.io import (
    MODEL_FILE,
    Heartbeat,
    atomic_copy,
    atomic_write,
    remove_stale_partials,
    save_model,
    say,
    write_run_config,
)
from tf_transformer.model import count_parameters
from tf_transformer.training import callbacks as cb
from tf_transformer.training import rundir
from tf_transformer.training.precision import AUTO, resolve_mixed_precision
from tf_transformer.training.progress import FirstUpdateHeartbeat, resolve_verbose
from tf_transformer.training.sittings import SittingLog
from tf_transformer.training.strategy import (
    TaskInfo,
    describe,
    distribute,
    gather_from_replicas,
    is_default,
    is_multiworker,
    resolve_strategy,
    steps_per_replica,
    task_info,
)
from tf_transformer.training.trainer import TrainingModel, accumulation_steps_for, build_training_model

DatasetSource = Union[None, bool, tf.data.Dataset, Callable[[tf.distribute.InputContext], tf.data.Dataset]]


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` did and wrote."""

    model: Any  # the trained Transformer
    config: Config  # resolved
    model_dir: Path
    model_path: Optional[Path]
    config_path: Optional[Path]
    vocab_path: Optional[Path]
    checkpoints: list  # paths, oldest first
    backup_dir: Path
    log_dir: Optional[Path]
    history: dict  # metric -> list per epoch (loss, perplexity, accuracy, val_*, learning_rate)
    start_step: int
    final_step: int
    accumulation_steps: int
    train_seconds: float  # time inside training batches (no validation, no tracing of the first update)
    target_tokens: float  # real target tokens in those batches
    stopped_early: Optional[str] = None  # "nan", "max_minutes", "early_stopping", "SIGTERM", "SIGINT" or None
    strategy: str = ""
    training_model: Any = None  # the compiled TrainingModel (optimizer state, evaluate())
    evaluations: list = dataclasses.field(default_factory=list)  # eval.jsonl rows (val_bleu per evaluation)
    best_step: Optional[int] = None  # step of the best evaluation (train.best_metric)

    @property
    def tokens_per_second(self) -> float:
        return self.target_tokens / self.train_seconds if self.train_seconds > 0 else float("nan")

    def summary(self) -> str:
        """One line: steps, speed, last validation numbers, and the files written."""
        parts = [f"trained steps {self.start_step}->{self.final_step}"]
        if self.train_seconds > 0:
            parts.append(f"{self.tokens_per_second:,.0f} target tokens/s")
        for key in ("val_loss", "val_perplexity", "val_accuracy"):
            if self.history.get(key):
                parts.append(f"{key} {self.history[key][-1]:.4g}")
        if self.evaluations:
            best = next(r for r in self.evaluations if r["step"] == self.best_step)
            mean = next((k for k in best if k.startswith(("val_bleu_mean", "val_loss_mean"))), None)
            parts.append(f"val_bleu {self.evaluations[-1]['val_bleu']:.2f} (best {best['val_bleu']:.2f} "
                         f"at step {self.best_step}" + (f", {mean} {best[mean]:.2f})" if mean else ")"))
        if self.stopped_early:
            parts.append(f"stopped early ({self.stopped_early})")
        wrote = []
        if self.model_path:
            wrote.append(f"model {self.model_path}")
        if self.checkpoints:
            wrote.append(f"{len(self.checkpoints)} checkpoints in {self.checkpoints[-1].parent}")
        if self.config_path:
            wrote.append(f"config {self.config_path}")
        if self.vocab_path:
            wrote.append(f"vocab {self.vocab_path}")
        if self.log_dir:
            wrote.append(f"TensorBoard logs {self.log_dir}")
        wrote.append(f"backup {self.backup_dir}")
        return "; ".join(parts) + "; wrote " + ", ".join(wrote)


class _Throughput(keras.callbacks.Callback):
    """Time spent in training batches and real target tokens processed, skipping the first
    ``skip`` batches of every fit call (tracing/compilation)."""

    def __init__(self, read_tokens: Callable[[], float], skip: int):
        super().__init__()
        self.read_tokens = read_tokens
        self.skip = skip
        self.seconds = 0.0
        self.tokens = 0.0

    def on_train_begin(self, logs=None):
        self._n = 0
        self._mark = None

    def on_train_batch_begin(self, batch, logs=None):
        self._t = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self._n += 1
        if self._n > self.skip:
            self.seconds += time.perf_counter() - self._t
        elif self._n == self.skip:
            self._mark = self.read_tokens()

    def on_train_end(self, logs=None):
        if self._mark is not None:
            self.tokens += self.read_tokens() - self._mark


def _tensorboard_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


def _as_dataset_fn(source, split_name: str):
    if callable(source) and not isinstance(source, tf.data.Dataset):
        return source
    if isinstance(source, tf.data.Dataset):
        def fn(context):
            if context.num_replicas_in_sync > 1:
                raise UserError(f"{split_name} data given as one tf.data.Dataset cannot be split over "
                                f"{context.num_replicas_in_sync} replicas; pass a function of the InputContext")
            return source
        return fn
    raise TypeError(f"{split_name} data must be a tf.data.Dataset or a function(InputContext) -> Dataset")


def _copy_vocabulary(tokenizer, model_dir: Path) -> Optional[Path]:
    if tokenizer is None:
        return None
    model_dir.mkdir(parents=True, exist_ok=True)
    target = model_dir / "vocab.model"
    source = getattr(tokenizer, "model_path", None)
    if source and Path(source).resolve() == target.resolve():
        return target
    atomic_write(target, tokenizer.model_proto)
    if source and Path(source).with_suffix(".vocab").is_file():
        atomic_copy(Path(source).with_suffix(".vocab"), model_dir / "vocab.vocab")
    return target


def _plan(start: int, total: int, per_epoch: int) -> list[tuple[int, int, int]]:
    """``fit`` calls as ``(initial_epoch, epochs, updates_per_epoch)``: a short first call
    finishes an epoch interrupted by a restart so later epochs line up with the step count."""
    plan = []
    epoch, offset = divmod(start, per_epoch)
    if start >= total:
        return plan
    if offset:
        plan.append((epoch, epoch + 1, per_epoch - offset))
        epoch += 1
    last = math.ceil(total / per_epoch)
    if epoch < last:
        plan.append((epoch, last, per_epoch))
    return plan


def train(
    config: Config,
    *,
    model_dir: Union[str, Path, None] = None,
    strategy: Union[str, tf.distribute.Strategy, None] = None,
    train_data: DatasetSource = None,
    valid_data: DatasetSource = None,
    tokenizer=None,
    callbacks: tuple = (),
    verbose: Union[str, int] = "auto",
    log: Callable[[str], None] = say,
    allow_config_change: bool = False,
    heartbeat: Optional[Heartbeat] = None,
) -> TrainResult:
    """Train ``config``'s model with the paper's recipe; see the module docstring for files.

    Args:
        config: a :class:`~tf_transformer.config.Config` (``load_config(...)``); not modified.
        model_dir: overrides ``train.model_dir``.
        strategy: a strategy object or name (default ``train.strategy``).
        train_data: ``None`` = ``make_dataset(cfg.data, "train", ...)``; else a function
            ``InputContext -> tf.data.Dataset`` (batched to the per-replica budget) or, for one
            replica, a dataset. Elements ``((source_ids, target_input_ids), target_output_ids)``.
        valid_data: like ``train_data`` for the ``valid`` split; ``False`` = no validation.
        tokenizer: a :class:`~tf_transformer.data.Tokenizer`; default from ``data.vocab_model``
            (built first if that file does not exist).
        callbacks: extra Keras callbacks.
        verbose: ``model.fit``'s verbose (``"auto"``: progress bar).
        log: where progress lines go (default stderr).
        allow_config_change: continue the run in ``model_dir`` although the config differs
            from its ``config.yaml`` in fields that change its meaning (or the vocabulary
            differs); by default that is refused before anything is written.
        heartbeat: the command's :class:`~tf_transformer.io.Heartbeat` (``tft train`` starts
            one before importing TensorFlow); by default one is made here. Until the first
            update it prints ``train: <what is being done>: N s`` after every 5 s without
            output (vocabulary, statistics, model building, backup, the input pipeline's fill
            and the step's tracing).

    Returns:
        :class:`TrainResult` (``.summary()`` is the one-line report).
    """
    beat = heartbeat or Heartbeat("train", log=log)
    try:
        log = beat.say
        beat.phase("checking the run directory and the vocabulary")
        own_splits = [split for split, given in (("train", train_data), ("valid", valid_data)) if given is None]
        target = Path(model_dir if model_dir is not None else config.train.model_dir)
        fresh = not target.exists()
        try:
            run = _setup(config, model_dir, strategy, tokenizer, bool(own_splits), log, allow_config_change,
                         own_splits)
            beat.phase("counting the training data")
            train_fn, valid_fn, validation_steps = _data(run, train_data, valid_data)
        except UserError:
            if fresh and target.is_dir():  # made by this call (and at most a vocabulary built into it)
                shutil.rmtree(target, ignore_errors=True)
            raise
        beat.phase("building the model and restoring its backup")
        trainer, backup, start_step = _resume(run)
        if start_step > run.cfg.train.train_steps:  # before anything of the run is rewritten
            raise UserError(f"{run.model_dir} is at step {start_step}, past train.train_steps="
                            f"{run.cfg.train.train_steps}: nothing to train, and the run is left as it is (its "
                            f"model: {run.model_dir / MODEL_FILE}); raise train.train_steps to train further")
        _announce(run, trainer, backup, start_step)
        if start_step and start_step == run.cfg.train.train_steps:
            run.log(f"train: {run.model_dir} is at train.train_steps={start_step}: nothing to train; its final files "
                    "are written again (raise train.train_steps to train further)")
        beat.phase("writing the run's inputs" + ("" if start_step else " and the step-0 backup"))
        vocab_copy = _write_inputs(run)
        if start_step == 0:  # every worker (each into its own directory), as the later backups
            backup.set_model(trainer)
            backup.save()  # step 0: resumable from the first thing written
        sitting = SittingLog(run.model_dir) if run.info.is_chief else None
        if sitting is not None:
            sitting.start(start_step, describe(run.strategy), run.strategy.num_replicas_in_sync)
        steps = None
        try:
            steps = _callbacks(run, trainer, backup, start_step, callbacks, beat)
            history, stopped = _fit(run, trainer, steps, train_fn, valid_fn, validation_steps, start_step, verbose)
            beat.phase("writing the final checkpoint, backup and model")
            result = _save(run, trainer, steps, history, stopped, start_step, vocab_copy)
        except BaseException as e:
            if sitting is not None:
                # a second Ctrl-C (the first asked for a clean stop) ends the sitting at once: still
                # an interruption, not an error
                why = "SIGINT" if isinstance(e, KeyboardInterrupt) else f"error ({type(e).__name__})"
                _end_sitting(sitting, trainer, steps, why, run.log)
            raise
        if sitting is not None:
            reached = result.final_step >= run.cfg.train.train_steps
            _end_sitting(sitting, trainer, steps, stopped or ("train_steps" if reached else "error (unknown)"), run.log)
        return result
    finally:
        beat.close()


def _end_sitting(sitting: SittingLog, trainer: TrainingModel, steps: Optional["_Callbacks"], ended_by: str,
                 log: Callable[[str], None]) -> None:
    """Complete the sitting's line; a failure to write it is logged, never raised over what
    ended the sitting (the run's own files are written by then, or the error is on its way)."""
    try:
        sitting.end(cb.current_step(trainer), ended_by, steps.throughput.seconds if steps is not None else 0.0)
    except Exception as e:  # e.g. a full disk: the training result stands
        log(f"train: could not record the end of this sitting in {sitting.path}: {e}")


@dataclasses.dataclass
class _Run:
    """What the steps of :func:`train` share."""

    cfg: Config  # resolved (a copy of the caller's)
    model_dir: Path
    own_dir: Path  # model_dir on the chief, a scratch directory under it on other workers
    strategy: Any
    info: TaskInfo
    multiworker: bool
    tokenizer: Any
    k: int  # micro-batches per update
    log: Callable[[str], None]


@dataclasses.dataclass
class _Callbacks:
    checkpoint: cb.TimedCheckpoint
    backup: cb.ResumableBackup
    throughput: _Throughput
    budget: Optional[cb.WallClockBudget]
    signals: Optional[cb.StopOnSignal]
    evaluator: Any  # ValidationBLEU or None (train.eval_bleu_every_steps)
    log_dir: Optional[Path]
    all: list


def _setup(config: Config, model_dir, strategy, tokenizer, need_tokenizer: bool, log,
           allow_config_change: bool = False, own_splits=()) -> _Run:
    """Copy and resolve the config (model directory, vocabulary, strategy), check the run
    directory (room, write access, the contract with a run already there), seed Keras.
    ``own_splits``: the splits read from the config's data, whose files are checked to be
    given and found before a vocabulary is built from them."""
    from tf_transformer.data import resolve_vocabulary
    from tf_transformer.data.sources import split_file_pairs

    cfg = copy.deepcopy(config)
    if model_dir is not None:
        cfg.train.model_dir = str(model_dir)
    model_dir = Path(cfg.train.model_dir)
    strategy = resolve_strategy(strategy, cfg.train.strategy)
    info = task_info(strategy)
    multiworker = is_multiworker(strategy)
    if multiworker and cfg.train.max_minutes:
        raise ConfigError("train.max_minutes cannot be used with the multiworker strategy: each worker's "
                          "clock would stop it at a different step; set train.train_steps instead")
    own_dir = model_dir if info.is_chief else model_dir / "workers" / info.name
    cfg.validate(require_vocab=False)
    if own_splits:  # our batches: each replica's share of the budget holds a pair of max_length (said before any file)
        from tf_transformer.data.batching import per_replica_budget

        per_replica_budget(cfg.data, types.SimpleNamespace(num_replicas_in_sync=strategy.num_replicas_in_sync))
    if cfg.data.source in ("text", "multi30k"):
        for split in own_splits:  # a missing valid_source said now, not after a vocabulary is built
            split_file_pairs(cfg.data, split)
    if info.is_chief:
        rundir.check_room(cfg, model_dir)
    if tokenizer is not None or need_tokenizer:
        tokenizer = resolve_vocabulary(cfg, model_dir / "vocab.model", tokenizer=tokenizer,
                                       build_missing=info.is_chief, log=log, who="train")
    cfg.validate(require_vocab=True)
    rundir.resolve_pipelines_for(cfg, model_dir)
    changed = rundir.check_contract(cfg, model_dir, tokenizer, allow_change=allow_config_change)
    if changed:
        log("train: continuing " + str(model_dir) + " under a changed configuration on purpose: "
            + "; ".join(f"{f}: {a} -> {b}" for f, a, b in changed))
    for path in remove_stale_partials(own_dir, depth=3):
        log(f"train: removed {path}, left by a write that was killed")
    k = accumulation_steps_for(cfg.train.tokens_per_update, cfg.data.tokens_per_batch)
    if cfg.train.tokens_per_update and k * cfg.data.tokens_per_batch != cfg.train.tokens_per_update:
        log(f"train: note: train.tokens_per_update={cfg.train.tokens_per_update:,} is not a multiple of "
            f"data.tokens_per_batch={cfg.data.tokens_per_batch:,}: {k} micro-batch(es) per update, "
            f"{k * cfg.data.tokens_per_batch:,} tokens (the nearest multiple)")
    keras.utils.set_random_seed(cfg.train.seed)
    return _Run(cfg, model_dir, own_dir, strategy, info, multiworker, tokenizer, k, log)


def _data(run: _Run, train_data, valid_data):
    """``(train_fn, valid_fn or None, validation_steps)``; the steps are counted once when not
    configured, so that Keras knows the length (progress bar, no "ran out of data") and every
    worker runs the same number."""
    from tf_transformer import data as data_api

    cfg, multiworker = run.cfg, run.multiworker
    if train_data is None:
        _check_usable_pairs(run)

        def train_fn(context, skip=0):
            return data_api.make_dataset(cfg.data, "train", run.tokenizer, training=True, input_context=context,
                                         verbose=context.input_pipeline_id == 0 and not skip, skip=skip)
    else:
        user_fn = _as_dataset_fn(train_data, "train")

        def train_fn(context, skip=0):
            dataset = user_fn(context)
            return dataset.skip(skip) if skip else dataset

    def ours(repeat: bool):
        def fn(context):
            return data_api.make_dataset(cfg.data, "valid", run.tokenizer, training=False, input_context=context,
                                         repeat=repeat, verbose=False)
        return fn

    validation_steps = cfg.train.validation_steps
    replicas = run.strategy.num_replicas_in_sync
    if valid_data is None:
        valid_fn = ours(repeat=multiworker)
        if run.info.is_chief and (cfg.data.stats_pass or cfg.data.source == "prepared"):
            stats = data_api.dataset_statistics(cfg.data, "valid", run.tokenizer)
            run.log(stats.summary() + ("" if not stats.kept or stats.kept == stats.pairs else
                                       " (the validation loss is over the kept pairs)"))
        if validation_steps is None:
            validation_steps = steps_per_replica(ours(repeat=False), replicas)
            if not validation_steps:
                from tf_transformer.data.sources import describe

                raise DataError(f"{describe(cfg.data, 'valid')}: no validation pairs (the validation loss, BLEU "
                                "and early stopping need some); give a validation split with pairs in it")
    elif valid_data is False:
        valid_fn = None
    else:
        valid_fn = _as_dataset_fn(valid_data, "valid")
        if validation_steps is None:
            if multiworker:
                raise ConfigError("with the multiworker strategy and your own validation data, set "
                                  "train.validation_steps (every worker must run the same number of steps)")
            validation_steps = steps_per_replica(valid_fn, replicas)
            if not validation_steps:
                raise DataError("valid_data: the validation dataset is empty (pass valid_data=False for none)")
    return train_fn, valid_fn, validation_steps


def _check_usable_pairs(run: _Run) -> None:
    """A training split without a single usable pair is a data error before the model is
    built (with ``data.stats_pass`` off, the first batch is looked for instead)."""
    from tf_transformer import data as data_api
    from tf_transformer.data import sources

    cfg = run.cfg.data
    if cfg.stats_pass:
        stats = data_api.dataset_statistics(cfg, "train", run.tokenizer)
        kept = stats.kept
    else:
        first = data_api.make_dataset(cfg, "train", run.tokenizer, training=False, repeat=False, verbose=False)
        kept = int(first.take(1).reduce(0, lambda n, _: n + 1))
        stats = None
    if not kept:
        detail = (f" ({stats.pairs:,} read: {stats.dropped_empty:,} empty, {stats.dropped_too_long:,} longer than "
                  f"data.max_length={cfg.max_length} tokens)") if stats is not None else ""
        raise DataError(f"{sources.describe(cfg, 'train')}: no usable training pairs{detail}; both sides must "
                        f"have tokens and fit data.max_length")


def _stream(train_fn, batches: int):
    """``train_fn`` positioned after the first ``batches`` micro-batches of the run: the
    stream is deterministic, so skipping what was consumed continues it exactly. Each of a
    worker's replicas dequeues one batch of that worker's pipeline per micro-batch."""
    def fn(context):
        per_pipeline = batches * max(1, context.num_replicas_in_sync // max(1, context.num_input_pipelines))
        return train_fn(context, skip=per_pipeline)
    return fn


def _resume(run: _Run) -> tuple[TrainingModel, cb.ResumableBackup, int]:
    """Build the model under the strategy and restore the backup; refuse to start from step 0
    over another run's outputs."""
    with run.strategy.scope():
        trainer = build_training_model(run.cfg)
    replicas = run.strategy.num_replicas_in_sync
    backup = cb.ResumableBackup(run.own_dir / "backup", run.cfg.train.backup_every_steps, run.k,
                                keep_previous=run.multiworker, replicas=replicas)
    step = _common_backup_step(run, backup) if run.multiworker else None
    start_step = backup.restore(trainer, step=step) or 0
    note = replica_change_note(backup.restored_replicas, replicas) if start_step else None
    if note:
        run.log(note)
    model_dir = run.model_dir
    if start_step == 0 and run.info.is_chief:
        old = cb.list_checkpoints(model_dir / "checkpoints")
        if old or (model_dir / MODEL_FILE).exists():
            what = f"{len(old)} checkpoint(s) in {model_dir / 'checkpoints'}" if old else str(model_dir / MODEL_FILE)
            raise UserError(f"{model_dir} already holds {what} but no backup to resume from "
                            f"({backup.weights_path}); training from step 0 would mix or overwrite another "
                            "run: use a new model directory or remove the old files")
    return trainer, backup, start_step


def replica_change_note(saved: Optional[int], now: int) -> Optional[str]:
    """The log line for a resume on another number of replicas than the backup was written
    on (``None`` when the same, or not recorded: backups written before the count was)."""
    if not saved or saved == now:
        return None
    return (f"train: note: this run's backup was written by {saved} replica(s) and this process has {now}: "
            f"the data is re-cut into {now} token-budget batch(es) per micro-batch, so training continues "
            f"from about the same place in the data but not with the batches a {saved}-replica run would "
            f"have had (an exact resume needs {saved} replica(s))")


def _common_backup_step(run: _Run, backup: cb.ResumableBackup) -> Optional[int]:
    """The update every worker resumes at: the newest one whose backup all workers hold.

    Workers write their backups one after another, so a kill can leave one worker's newest
    backup an update ahead of another's; each keeps its previous backup too, and all resume
    at the newest step they share (resuming at different steps would desynchronise the
    replicas and hang the collectives). The workers exchange their steps with one
    collective sum, so all of them take the same decision, errors included. ``None``: no
    worker has a backup (a new run)."""
    try:
        saved = sorted(backup.saved_steps())[-2:]
        mine, problem = [1] + [-1] * (2 - len(saved)) + saved, None
    except UserError as e:  # the others must not wait for this worker at the gather
        mine, problem = [0, -1, -1], e
    rows = gather_from_replicas(run.strategy, mine)
    if problem is not None:
        raise problem
    if not rows[:, 0].all():
        raise UserError(f"{backup.backup_dir}: another worker could not read its backups (its log says why); "
                        "every worker must resume from the same update")
    held = [set(int(v) for v in row[1:] if v >= 0) for row in rows]
    if not any(held):
        return None
    common = set.intersection(*held)
    if not common:
        listed = "; ".join(f"replica {i}: {sorted(h) or 'none'}" for i, h in enumerate(held))
        raise UserError(f"{backup.backup_dir}: the workers hold backups of no common update ({listed}); every "
                        "worker must resume from the same update: start a new run in another model directory")
    step = max(common)
    if any(step != max(h) for h in held):
        run.log(f"train: the workers' newest backups differ ({', '.join(str(max(h)) for h in held)}): every "
                f"worker resumes at update {step}, the newest that all hold")
    return step


def _announce(run: _Run, trainer: TrainingModel, backup: cb.ResumableBackup, start_step: int) -> None:
    cfg = run.cfg
    run.log(f"train: {cfg.name or 'config'}: {describe(run.strategy)}; "
            f"{count_parameters(trainer.transformer):,} parameters; "
            f"{cfg.data.tokens_per_batch:,} tokens per batch x {run.k} micro-batch(es) per update; "
            + (f"resuming at step {start_step} from {backup.restored_path}" if start_step else "starting at step 0")
            + f"; training to step {cfg.train.train_steps}")
    if cfg.train.mixed_precision == AUTO:  # say what auto chose (the model was built under it)
        policy, why = resolve_mixed_precision(AUTO)
        run.log(f"train: {policy or 'float32'} ({why}; train.mixed_precision=float32 or mixed_bfloat16 to choose)")
    if cfg.train.jit_compile and not is_default(run.strategy):
        run.log("train: note: Keras turns XLA (train.jit_compile) off under a tf.distribute strategy")


def _write_inputs(run: _Run) -> Optional[Path]:
    """On the chief: the vocabulary copy and the resolved ``config.yaml``; returns the copy."""
    if not run.info.is_chief:
        return None
    vocab_copy = None
    if run.tokenizer is not None:
        vocab_copy = _copy_vocabulary(run.tokenizer, run.model_dir)
        run.cfg.data.vocab_model = str(vocab_copy)
    write_run_config(run.cfg, run.model_dir / "config.yaml")
    return vocab_copy


def _callbacks(run: _Run, trainer: TrainingModel, backup: cb.ResumableBackup, start_step: int,
               extra: tuple, beat: Heartbeat) -> _Callbacks:
    cfg, k, log = run.cfg, run.k, run.log
    checkpoint = cb.TimedCheckpoint(run.model_dir / "checkpoints", cfg.train.checkpoint_every_minutes,
                                    cfg.train.keep_checkpoints, k, enabled=run.info.is_chief, log=log)
    throughput = _Throughput(trainer.target_tokens_seen, skip=k)
    budget = cb.WallClockBudget(cfg.train.max_minutes, k, log=log) if cfg.train.max_minutes else None
    log_dir = (run.model_dir / "logs") if run.info.is_chief else None
    all_callbacks = [cb.StopAtStep(cfg.train.train_steps, start_step, k), keras.callbacks.TerminateOnNaN(),
                     checkpoint, backup, throughput]
    if budget:
        all_callbacks.append(budget)
    # one worker of several cannot stop alone (the others would wait in their collectives)
    signals = None if is_multiworker(run.strategy) else cb.StopOnSignal(k, log=log, save_now=backup.save)
    if signals is not None:
        all_callbacks.append(signals)
    evaluator = _validation_bleu(run, trainer.transformer, log_dir, checkpoint)
    if evaluator is not None:
        evaluator.restore(start_step)
        all_callbacks.append(evaluator)  # before TensorBoard: it adds val_bleu to the epoch logs
    if log_dir is not None:
        if _tensorboard_available():
            all_callbacks.append(cb.UpdateTensorBoard(log_dir, cfg.train.tensorboard_every_steps, k))
        else:
            log("train: note: the tensorboard package is not installed: no TensorBoard logs "
                "(pip install tensorboard)")
            log_dir = None
    if run.info.is_chief:
        skipped = f"skipping the input of the {start_step:,} updates already trained on, " if start_step else ""
        all_callbacks.append(FirstUpdateHeartbeat(heartbeat=beat, what=f"{skipped}input pipeline filling its "
                                                  "first chunk or buffer, training step being traced"))
    all_callbacks.extend(extra)
    return _Callbacks(checkpoint, backup, throughput, budget, signals, evaluator, log_dir, all_callbacks)


def _fit(run: _Run, trainer: TrainingModel, steps: _Callbacks, train_fn, valid_fn, validation_steps,
         start_step: int, verbose) -> tuple[dict, Optional[str]]:
    """The ``fit`` calls of :func:`_plan`; returns the history and why training stopped early."""
    valid_ds = distribute(run.strategy, valid_fn) if valid_fn is not None else None
    history: dict[str, list] = {}
    stopped = None
    plan = _plan(start_step, run.cfg.train.train_steps, run.cfg.train.steps_per_epoch)
    verbose, lines = resolve_verbose(verbose, run.cfg.train, enabled=run.info.is_chief,
                                     accumulation_steps=run.k)
    evaluator = steps.evaluator
    if evaluator is not None and evaluator.stopped:
        run.log(f"train: early stopping had already ended this run at step {start_step} (best "
                f"{run.cfg.train.best_metric} at step {evaluator.best_step}): nothing to train")
        plan, stopped = [], "early_stopping"
    # One iterator for every fit call, positioned once after the batches consumed so far: a
    # resume in the middle of an epoch makes two calls (the first finishes that epoch), and a
    # new iterator for the second would replay the stream from its start a second time.
    train_ds = (continuing_stream(distribute(run.strategy, _stream(train_fn, cb.current_step(trainer) * run.k)))
                if plan else None)
    for initial_epoch, epochs, updates in plan:
        try:
            h = trainer.fit(train_ds, epochs=epochs, initial_epoch=initial_epoch, steps_per_epoch=updates * run.k,
                            validation_data=valid_ds, validation_steps=validation_steps, shuffle=False,
                            callbacks=steps.all + lines, verbose=verbose)
        except tf.errors.DataLossError as e:  # a damaged file read in the middle of training
            raise _damaged_data(run.cfg, e, run.log) from None
        except tf.errors.UnavailableError as e:
            if not run.multiworker:
                raise
            detail = " ".join(re.sub(r"\{\{.*?\}\}", "", str(getattr(e, "message", e))).split())  # TF's node names
            raise ClusterError(f"a worker of the cluster stopped or cannot be reached ({detail[:300]}); rerun every "
                               "worker with the same command to continue from the last backup") from None
        for key, values in h.history.items():
            history.setdefault(key, []).extend(float(np.asarray(v).reshape(-1)[0]) for v in values)
        if steps.budget is not None and steps.budget.stopped:
            stopped = "max_minutes"
        if steps.signals is not None and steps.signals.received:
            stopped = steps.signals.received
        if evaluator is not None and evaluator.stopped:
            stopped = "early_stopping"
        if history.get("loss") and not np.isfinite(history["loss"][-1]):
            stopped = "nan"
        if stopped:
            break
    return history, stopped


def _damaged_data(cfg: Config, error, log=None) -> DataError:
    """TensorFlow's ``DataLossError`` (a corrupted or cut record or gzip stream, found when read)
    as a data error naming the data and what to do. TensorFlow's message names no file: for a
    prepared corpus the shards are read again to find the damaged one."""
    from tf_transformer.data.prepared import damaged_shard, data_loss_detail
    from tf_transformer.data.sources import describe

    detail = data_loss_detail(error)
    if cfg.data.source == "prepared":
        if log is not None:
            log("train: a training shard is damaged; reading every shard to find which")
        found = damaged_shard(cfg.data, "train")
        where = f"shard {found[0]} is damaged ({found[1]})" if found else f"a shard is damaged ({detail})"
        return DataError(f"data.prepared_dir={cfg.data.prepared_dir}: {where}; prepare the corpus again (tft "
                         "prepare) or restore its files, then rerun to continue from the backup")
    return DataError(f"{describe(cfg.data, 'train')}: a data file is damaged ({detail}); repair or replace it, "
                     "then rerun to continue from the backup")


def float32_copy(transformer):
    """``transformer`` as ``model.keras`` keeps it: computing in float32. Under mixed precision the
    variables are float32 already, but the layers' policy (``mixed_bfloat16`` / ``mixed_float16``)
    is saved with the model and a loaded model would decode in half precision: slower where the
    CPU emulates it, and unlike the averaged models (built in float32) and what the decoding was
    tuned and tested with. A float32 model is returned as it is; otherwise a float32 copy with
    the same weights."""
    if transformer.dtype_policy.name == "float32":
        return transformer
    from tf_transformer.model import Transformer

    copied = Transformer.from_config({**transformer.get_config(), "dtype": "float32"})
    copied.build()
    copied.set_weights(transformer.get_weights())
    return copied


def _save(run: _Run, trainer: TrainingModel, steps: _Callbacks, history: dict, stopped: Optional[str],
          start_step: int, vocab_copy: Optional[Path]) -> TrainResult:
    """Final checkpoint and backup (unless the loss went NaN), ``model.keras`` and
    ``config.yaml`` on the chief; the result."""
    final_step = cb.current_step(trainer)
    if stopped != "nan":
        steps.checkpoint.set_model(trainer)
        steps.checkpoint.finish()
        steps.backup.set_model(trainer)
        steps.backup.save()
    model_path = config_path = None
    if run.info.is_chief:
        model_path = save_model(float32_copy(trainer.transformer), run.model_dir / MODEL_FILE)
        config_path = write_run_config(run.cfg, run.model_dir / "config.yaml")
    return TrainResult(
        model=trainer.transformer, config=run.cfg, model_dir=run.model_dir, model_path=model_path,
        config_path=config_path, vocab_path=vocab_copy,
        checkpoints=[p for _, p in cb.list_checkpoints(run.model_dir / "checkpoints")],
        backup_dir=steps.backup.weights_path.parent, log_dir=steps.log_dir, history=history, start_step=start_step,
        final_step=final_step, accumulation_steps=run.k, train_seconds=steps.throughput.seconds,
        target_tokens=steps.throughput.tokens, stopped_early=stopped, strategy=describe(run.strategy),
        training_model=trainer, evaluations=list(steps.evaluator.rows) if steps.evaluator else [],
        best_step=steps.evaluator.best_step if steps.evaluator else None)


def _validation_bleu(run: _Run, transformer, log_dir, checkpoint):
    """The :class:`ValidationBLEU` callback for ``train.eval_bleu_every_steps`` (or None)."""
    cfg = run.cfg
    t = cfg.train
    if not t.eval_bleu_every_steps:
        return None
    if run.tokenizer is None:
        raise ConfigError("train.eval_bleu_every_steps needs a vocabulary to detokenize the outputs: pass "
                          "tokenizer= or set data.vocab_model")
    from tf_transformer.data import read_parallel_text
    from tf_transformer.training.validation_bleu import ValidationBLEU

    sources, references = read_parallel_text(cfg.data, "valid")
    if not any(s.strip() for s in sources):
        from tf_transformer.data.sources import describe

        raise DataError(f"{describe(cfg.data, 'valid')}: no validation sentences to compute BLEU on "
                        f"(train.eval_bleu_every_steps={t.eval_bleu_every_steps}); give a validation split with "
                        "pairs in it, or set train.eval_bleu_every_steps: null")
    return ValidationBLEU(
        transformer, run.tokenizer, sources, references, every_steps=t.eval_bleu_every_steps,
        beam_size=t.eval_beam_size, alpha=cfg.decode.alpha, max_extra_length=cfg.decode.max_extra_length,
        batch_size=cfg.decode.batch_size, stop_rule=cfg.decode.stop_rule, max_sentences=t.eval_max_sentences,
        metric=t.best_metric, window=t.best_metric_window,
        patience=t.early_stopping_patience, keep_best=t.keep_best, best_dir=run.model_dir / "best",
        log_path=run.model_dir / "eval.jsonl", checkpoint=checkpoint, tensorboard_dir=log_dir,
        enabled=run.info.is_chief, log=run.log)
