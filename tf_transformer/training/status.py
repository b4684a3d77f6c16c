"""Where a run stands, read from its directory alone (no TensorFlow, no model): ``tft status``.

:func:`run_status` gathers what a run directory holds: its config, the update of its newest
backup (what a resumed run starts from) and that backup's age, the evaluations of
``eval.jsonl`` (latest and best validation score, evaluations since the best against the
early-stopping patience), the checkpoints and best weights kept, the final model, and the
sittings of ``sittings.jsonl``. :func:`run_state` turns that into one sentence: training now,
finished (the update limit, early stopping), stopped and resumable (time budget, a signal,
an error), or cut off without a recorded end (killed), with what to do next.

Whether a sitting without a recorded end is still training can be told only on the machine
it ran on (its process id is checked); elsewhere the age of the newest backup is given.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import time
from pathlib import Path
from typing import Optional, Union

from tf_transformer.errors import UserError
from tf_transformer.io import CONFIG_FILE, MODEL_FILE, list_step_files, read_eval_log
from tf_transformer.training.sittings import (
    describe_sittings,
    ended_by_words,
    process_start,
    read_sittings,
    stamp_seconds,
)

__all__ = ["describe_status", "run_state", "run_status"]

def _process_alive(pid: int, started: Optional[int] = None) -> bool:
    """Whether process ``pid`` runs on this machine; with ``started`` (its recorded start,
    :func:`~tf_transformer.training.sittings.process_start`), whether it is that same process
    and not a later one given the same pid."""
    if started is not None:
        now = process_start(pid)
        if now is not None or os.path.isdir("/proc/self"):  # /proc readable: it answers alone
            return now == started
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OSError:
        return False
    return True


def run_status(model_dir: Union[str, os.PathLike], now: Optional[float] = None) -> dict:
    """What ``model_dir`` holds, as a dict (see the module docstring); raises
    :class:`~tf_transformer.errors.UserError` when it is not a run directory."""
    import yaml

    run = Path(model_dir)
    config_path = run / CONFIG_FILE
    if not config_path.is_file():
        what = "does not exist" if not run.exists() else f"has no {CONFIG_FILE}"
        raise UserError(f"{run} {what}: not a run directory written by tft train (expected {config_path})")
    try:
        config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise UserError(f"{config_path}: not readable YAML ({str(e).splitlines()[0]})") from None
    now = time.time() if now is None else now
    train, model = config.get("train") or {}, config.get("model") or {}
    backup_step = backup_age = None
    metadata = run / "backup" / "training_metadata.json"
    if metadata.is_file():
        try:
            backup_step = int(json.loads(metadata.read_text(encoding="utf-8"))["step"])
            backup_age = now - metadata.stat().st_mtime
        except (ValueError, KeyError, TypeError, OSError):
            backup_step = None
    evaluations = read_eval_log(run / "eval.jsonl")
    model_path = run / MODEL_FILE
    return {
        "run": str(run), "name": config.get("name"),
        "model": {k: model.get(k) for k in ("d_model", "num_layers", "num_heads", "d_ff", "dropout")},
        "train_steps": train.get("train_steps"), "max_minutes": train.get("max_minutes"),
        "patience": train.get("early_stopping_patience"),
        "best_metric": train.get("best_metric") or "val_bleu", "best_metric_window": train.get("best_metric_window"),
        "backup_step": backup_step, "backup_age_seconds": backup_age,
        "evaluations": evaluations,
        "checkpoints": [step for step, _ in list_step_files(run / "checkpoints", "ckpt")],
        "best": [step for step, _ in list_step_files(run / "best", "best")],
        "model_written": model_path.is_file(),
        "model_age_seconds": now - model_path.stat().st_mtime if model_path.is_file() else None,
        "sittings": read_sittings(run),
        "now": now,
    }


def _ago(seconds: Optional[float]) -> str:
    if seconds is None:
        return "at an unknown time"
    if seconds < 90:
        return f"{seconds:.0f} s ago"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def evaluations_since_best(evaluations: list[dict]) -> Optional[int]:
    """Evaluations after the best one (what early stopping's patience counts), from the
    ``best_step`` the latest ``eval.jsonl`` row carries; ``None`` without it."""
    best_step = evaluations[-1].get("best_step") if evaluations else None
    if best_step is None:
        return None
    return sum(1 for r in evaluations if r["step"] > best_step)


def pace(evaluations: list[dict], last: int = 5) -> Optional[float]:
    """Updates per second of training clock over the last ``last`` evaluation intervals
    (validation included), or ``None`` with fewer than two evaluations."""
    rows = [r for r in evaluations if r.get("minutes") is not None][-(last + 1):]
    if len(rows) < 2:
        return None
    updates, minutes = rows[-1]["step"] - rows[0]["step"], rows[-1]["minutes"] - rows[0]["minutes"]
    return updates / (minutes * 60.0) if updates > 0 and minutes > 0 else None


def _duration(seconds: float) -> str:
    if seconds < 30:
        return "a minute or less"
    minutes = round(seconds / 60.0)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


def _minutes_trained(status: dict) -> str:
    """The run's training minutes in words: the training clock of its last evaluation (carried
    across sittings by the backups, so a sitting that was cut off counts up to the backup the
    next one resumed from), else the sum of the sittings' recorded training times."""
    row = next((r for r in reversed(status["evaluations"]) if r.get("minutes") is not None), None)
    if row is not None:
        return f"{row['minutes']:.1f} training minutes (the clock at update {row['step']:,}'s evaluation)"
    return f"{sum(s.get('train_seconds') or 0.0 for s in status['sittings']) / 60.0:.1f} training minutes"


def _outlook(status: dict, sitting: dict) -> str:
    """Where an open sitting is heading at the pace of the last evaluations: the update limit,
    or, when ``train.max_minutes`` ends the sitting first, when and near which update it will.
    The budget counts from the start of the sitting's training loop, a little after the
    sitting's recorded start, so its end is given as "about"."""
    step, total, budget = status["backup_step"], status["train_steps"], status.get("max_minutes")
    started = stamp_seconds(sitting.get("started"))
    age = status.get("backup_age_seconds") or 0.0  # the run has trained on since its newest backup
    rate = pace(status["evaluations"])
    head = f"; {rate:.2f} updates/s over the last evaluations" if rate else ""
    first = sitting.get("start_step")
    if not rate and started is not None and first is not None and step is not None and step > first:
        # no evaluations to time: the sitting's own pace, from its start to its newest backup
        # (start-up included, so a little slow)
        seconds = (status.get("now") or time.time()) - age - started
        if seconds > 0:
            rate = (step - first) / seconds
            head = f"; {rate:.2f} updates/s over this sitting so far"
    if not rate or not total or step is None or step >= total:
        return ""
    to_limit = (total - step) / rate - age
    if budget and started is not None:
        end = started + float(budget) * 60.0
        left = end - (status.get("now") or time.time())
        if left <= 0:
            return f"{head}; its time budget (train.max_minutes={budget:g}) is spent: it stops at its next update"
        if left < to_limit:
            near = step + rate * (left + age)
            clock = datetime.datetime.fromtimestamp(end, datetime.timezone.utc)
            return (f"{head}; the time budget (train.max_minutes={budget:g}) ends this sitting at about "
                    f"{clock:%H:%M} UTC, in about {_duration(left)}, near update {int(round(near, -2)):,} at that "
                    f"pace (unless early stopping ends it first)")
    return (f"{head}, update {total:,} in about {_duration(max(to_limit, 0.0))} at that pace (unless early "
            f"stopping or a time budget ends it first)")


def run_state(status: dict, node: Optional[str] = None, alive=_process_alive) -> str:
    """One sentence: what the run is doing or why it stopped, and what to do next."""
    node = platform.node() if node is None else node
    step, total = status["backup_step"], status["train_steps"]
    at = f"update {step:,}" if step is not None else "no backup yet"
    of = f" of {total:,}" if total else ""
    rerun = "rerun the training command to continue from it"
    sittings = status["sittings"]
    if sittings and sittings[-1].get("ended") is None:
        last = sittings[-1]
        where, pid = last.get("node"), last.get("pid")
        if where == node and pid is not None:
            if alive(int(pid), last.get("process_start")):
                return (f"training now (sitting {last['sitting']}, pid {pid}, since {last['started']}): newest backup "
                        f"{at}{of}, written {_ago(status['backup_age_seconds'])}{_outlook(status, last)}")
            return (f"cut off: sitting {last['sitting']}'s process (pid {pid}) is gone without recording an end "
                    f"(killed?); newest backup {at}{of}: {rerun}")
        return (f"sitting {last['sitting']} has no recorded end (training on {where or 'another machine'} now, or "
                f"killed): newest backup {at}{of}, written {_ago(status['backup_age_seconds'])}")
    ended_by = sittings[-1].get("ended_by") if sittings else None
    if ended_by == "train_steps" or (step is not None and total and step >= total):
        return f"finished: {at}{of}, the update limit (raise train.train_steps to train on)"
    if ended_by == "early_stopping":
        return f"finished by early stopping at {at}{of}"
    if ended_by == "nan":
        return (f"stopped: the loss became non-finite (no backup of that update was written; newest backup "
                f"{at}{of}); lower the learning rate or check the data before continuing")
    if ended_by == "max_minutes" and status.get("max_minutes"):
        return (f"stopped by {ended_by_words(ended_by)} at {at}{of} after {len(sittings)} sitting"
                f"{'s' if len(sittings) != 1 else ''} and {_minutes_trained(status)}: {rerun} (train.max_minutes="
                f"{status['max_minutes']:g} budgets each sitting afresh: a rerun trains up to that long again)")
    if ended_by in {f"error ({name})" for name in ("UserError", "ConfigError", "DataError", "WriteError",
                                                   "DamagedFileError")}:
        return (f"stopped by {ended_by_words(ended_by)} at {at}{of}, a problem with the run's inputs or files that "
                f"a rerun alone meets again: fix what the error said (the training command printed it), then {rerun}")
    if ended_by is not None:
        return f"stopped by {ended_by_words(ended_by)} at {at}{of}: {rerun}"
    if step is None:
        return "not started: no backup written yet"
    since, patience = evaluations_since_best(status["evaluations"]), status["patience"]
    if patience and since is not None and since >= patience:
        return f"finished by early stopping at {at}{of} ({since} evaluations since the best; no sittings recorded)"
    return (f"newest backup {at}{of}, written {_ago(status['backup_age_seconds'])}; no sittings recorded (a run "
            f"from before they were), so whether it is training now is not known; if it is not, {rerun}")


def _best_kept(status: dict) -> int:
    """The update of the best weights in ``best/``: the latest evaluation's ``best_step`` when its
    file is kept (with ``train.keep_best`` > 1 the newest file need not be the best)."""
    evaluations = status.get("evaluations") or []
    best_step = evaluations[-1].get("best_step") if evaluations else None
    return best_step if best_step in status["best"] else status["best"][-1]


def describe_status(status: dict, **state_kwargs) -> str:
    """``tft status``'s text for one run: a few labelled lines (the state from ``status["state"]``
    when the caller has worked it out already, else from :func:`run_state`)."""
    m = status["model"]
    shape = ", ".join(f"{k} {v}" for k, v in m.items() if v is not None)
    state = status.get("state") or run_state(status, **state_kwargs)
    lines = [f"{status['run']}: {status['name'] or 'config'} ({shape})", f"  state: {state}"]
    evaluations = status["evaluations"]
    if evaluations:
        last = evaluations[-1]
        metric = status["best_metric"]
        window = status.get("best_metric_window") or 1
        best_step = last.get("best_step")
        best_row = next((r for r in evaluations if r.get("step") == best_step), None)
        since = evaluations_since_best(evaluations)
        watched = f"{metric} (mean of the last {window})" if window > 1 else metric
        text = (f"  validation: {len(evaluations)} evaluations, the latest at update {last['step']:,}: "
                f"val_bleu {last['val_bleu']:.2f}")
        if last.get("val_loss") is not None:
            text += f", val_loss {last['val_loss']:.3f}"
        if best_row is not None and last.get("best") is not None:
            text += (f"; best {watched} {last['best']:.4g} at update {best_step:,}, {since} evaluation"
                     f"{'s' if since != 1 else ''} since"
                     + (f" (early stopping after {status['patience']})" if status["patience"] else ""))
        lines.append(text)
    kept = status["checkpoints"]
    if kept:
        lines.append(f"  checkpoints: {len(kept)} kept, updates {kept[0]:,}-{kept[-1]:,}"
                     + (f"; best weights of update {_best_kept(status):,} in best/" if status["best"] else ""))
    if status["backup_step"] is not None:
        lines.append(f"  backup: update {status['backup_step']:,} (where a rerun resumes), written "
                     f"{_ago(status['backup_age_seconds'])}")
    if status["model_written"]:
        lines.append(f"  model: {MODEL_FILE} written {_ago(status['model_age_seconds'])}")
    lines.append(f"  sittings: {describe_sittings(status['sittings'])}")
    return "\n".join(lines)
