"""A run's sittings: one JSON line per ``train`` call on a run directory, in ``sittings.jsonl``.

A long run is often trained in several sittings (after a crash, a preempted machine, the end
of a working session, a raised ``train.train_steps``), sometimes on different machines whose
speeds differ: on a 2-core CPU this package's models train about twice as fast with AVX-512
as with AVX2 alone. Each sitting records when it started and ended, the updates it trained,
why it ended, its speed, and the host it ran on (CPU model, cores, the vector and bfloat16
flags that set its speed, GPUs, TensorFlow version), so a run's figures can be read with the
machine behind them. The line is written when the sitting starts (``ended: null``) and
completed when it ends; a sitting killed outright (SIGKILL, power) keeps ``ended: null``, and
the next sitting's ``start_step`` (the backup it resumed from) shows where it was cut. The
process id, its start time and the machine name (``pid``, ``process_start``, ``node``) let
``tft status`` tell a sitting still training from one that was killed.

``ended_by`` is one of :data:`ENDED_BY`'s keys, or ``"error (TypeName)"``.

This module imports TensorFlow only to describe the host's GPUs when a sitting starts;
tools read the file with :func:`read_sittings` without it.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from pathlib import Path
from typing import Optional, Union

from tf_transformer.io import atomic_write, read_eval_log
from tf_transformer.training.precision import cpu_flags, cpu_model_name

__all__ = [
    "ENDED_BY", "ENDED_BY_FIELD", "FILE", "SittingLog", "describe_sittings", "ended_by_words", "host", "read_sittings",
    "stamp_seconds",
]

FILE = "sittings.jsonl"

#: Why a sitting ended, in words.
ENDED_BY = {
    "train_steps": "the update limit",
    "early_stopping": "early stopping",
    "max_minutes": "the time budget",
    "SIGTERM": "SIGTERM",
    "SIGINT": "SIGINT (Ctrl-C)",
    "nan": "a non-finite loss",
}

#: The config field behind an ending, where one is.
ENDED_BY_FIELD = {"train_steps": "train.train_steps", "max_minutes": "train.max_minutes"}

#: The CPU flags that decide how fast this package trains on a CPU (recorded when present).
SPEED_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_fp16")


#: How a sitting's ``started`` and ``ended`` are written: UTC, to the second.
STAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime(STAMP_FORMAT)


def stamp_seconds(stamp: Optional[str]) -> Optional[float]:
    """A sitting's stamp ("2026-12-05T21:02:20Z") as seconds since the epoch; ``None`` if absent or odd."""
    try:
        when = datetime.datetime.strptime(stamp, STAMP_FORMAT)
    except (TypeError, ValueError):
        return None
    return when.replace(tzinfo=datetime.timezone.utc).timestamp()


def _gpus() -> list[str]:
    try:
        import tensorflow as tf

        names = []
        for device in tf.config.list_physical_devices("GPU"):
            details = tf.config.experimental.get_device_details(device)
            names.append(details.get("device_name") or device.name)
        return names
    except Exception:  # a description of the host must never stop a run
        return []


def process_start(pid: int) -> Optional[int]:
    """When process ``pid`` started, in clock ticks since boot (Linux's ``/proc/PID/stat``,
    field 22), or ``None`` where that cannot be read. With the pid it names one process:
    a later process given the same pid has another start."""
    try:
        with open(f"/proc/{int(pid)}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
        return int(text.rpartition(")")[2].split()[19])  # fields after the command name start at field 3
    except (OSError, ValueError, IndexError):
        return None


def host(cpuinfo: str = "/proc/cpuinfo") -> dict:
    """The machine this process trains on, as recorded with each sitting."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 0
    try:
        import tensorflow as tf

        tf_version = tf.__version__
    except Exception:
        tf_version = None
    flags = cpu_flags(cpuinfo)
    return {"cpu": cpu_model_name(cpuinfo) or platform.processor() or platform.machine(), "cpus": cpus,
            "cpu_flags": [f for f in SPEED_FLAGS if f in flags], "gpus": _gpus(), "tensorflow": tf_version,
            "python": platform.python_version(), "system": platform.system()}


def read_sittings(model_dir: Union[str, os.PathLike]) -> list[dict]:
    """The sittings recorded in ``model_dir`` (oldest first; ``[]`` for a run trained before
    sittings were recorded)."""
    return read_eval_log(Path(model_dir) / FILE)


class SittingLog:
    """Writes ``model_dir``'s sittings: :meth:`start` when training starts, :meth:`end` when it
    stops. Each write rewrites the file atomically (a kill leaves the previous complete file)."""

    def __init__(self, model_dir: Union[str, os.PathLike]):
        self.path = Path(model_dir) / FILE
        self.rows = read_sittings(model_dir)
        self._row: Optional[dict] = None

    def start(self, step: int, strategy: str, replicas: int, host_info: Optional[dict] = None) -> dict:
        self._row = {"sitting": len(self.rows) + 1, "started": _now(), "ended": None, "start_step": int(step),
                     "end_step": None, "ended_by": None, "train_seconds": None, "updates_per_second": None,
                     "strategy": strategy, "replicas": int(replicas), "pid": os.getpid(),
                     "process_start": process_start(os.getpid()), "node": platform.node(),
                     "host": host_info if host_info is not None else host()}
        self.rows.append(self._row)
        self._write()
        return self._row

    def end(self, step: int, ended_by: str, train_seconds: float) -> dict:
        """Complete the sitting started by :meth:`start`: ``train_seconds`` is the time inside
        training batches (validation and the first update's tracing not counted)."""
        if self._row is None:
            raise RuntimeError("SittingLog.end before start")
        row = self._row
        updates = int(step) - row["start_step"]
        row.update(ended=_now(), end_step=int(step), ended_by=ended_by, train_seconds=round(float(train_seconds), 1),
                   updates_per_second=round(updates / train_seconds, 3) if train_seconds > 0 and updates > 0 else None)
        self._write()
        self._row = None
        return row

    def _write(self) -> None:
        atomic_write(self.path, "".join(json.dumps(r) + "\n" for r in self.rows))


def ended_by_words(ended_by: Optional[str], field: bool = True) -> str:
    """``ended_by`` in words; ``None`` (no end recorded) says the process was cut off.

    ``field`` adds the config field behind the ending in brackets ("the time budget
    (train.max_minutes)"); without it the words are short enough for a table cell.
    """
    if ended_by is None:
        return ("no end recorded (the process was killed or is still running)" if field
                else "no end recorded")
    words = ENDED_BY.get(ended_by, ended_by)
    return f"{words} ({ENDED_BY_FIELD[ended_by]})" if field and ended_by in ENDED_BY_FIELD else words


def _clock(stamp: Optional[str]) -> str:
    return stamp.replace("T", " ").replace("Z", " UTC") if stamp else "?"


def _machine(h: dict) -> str:
    parts = [h.get("cpu") or "unknown CPU", f"{h.get('cpus', '?')} CPUs"]
    if h.get("cpu_flags"):
        parts.append(" ".join(h["cpu_flags"]))
    if h.get("gpus"):
        parts.append(", ".join(h["gpus"]))
    return ", ".join(parts)


def describe_sittings(rows: list[dict]) -> str:
    """The sittings in a sentence or two: count, each one's span, updates, speed and host, and
    what ended the last one."""
    if not rows:
        return "No sittings recorded (a run trained before this package recorded them)."
    parts = []
    for r, after in zip(rows, rows[1:] + [None]):
        if r.get("ended"):
            span = f"{_clock(r.get('started'))} to {_clock(r.get('ended'))}"
        elif after is not None:  # a later sitting followed: this one was cut off (killed, lost with its machine)
            span = f"from {_clock(r.get('started'))}, cut off (no recorded end)"
        else:
            span = f"since {_clock(r.get('started'))}, no recorded end"
        if r.get("end_step") is not None:
            updates = f"updates {r['start_step']:,}-{r['end_step']:,}"
        elif after is not None and after.get("start_step") is not None:
            if after["start_step"] > r["start_step"]:
                updates = (f"updates {r['start_step']:,}-{after['start_step']:,} kept (sitting {after['sitting']} "
                           f"resumed from its backup of update {after['start_step']:,}; any updates after that "
                           f"backup were lost)")
            else:
                updates = (f"from update {r['start_step']:,}, nothing kept (sitting {after['sitting']} started "
                           f"again from update {after['start_step']:,})")
        else:
            updates = f"from update {r['start_step']:,}"
        speed = f", {r['updates_per_second']:.2f} updates/s" if r.get("updates_per_second") else ""
        parts.append(f"{r['sitting']}. {span}, {updates}{speed} on {_machine(r.get('host') or {})}")
    last = rows[-1]
    end = (f"Training ended by {ended_by_words(last.get('ended_by'))}." if last.get("ended")
           else "The last sitting has no recorded end: it is still training, or it was killed.")
    return f"{len(rows)} sitting{'s' if len(rows) > 1 else ''}: " + "; ".join(parts) + ". " + end
