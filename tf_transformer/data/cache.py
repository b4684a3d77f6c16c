"""What the input side remembers between runs, and how it reports long passes.

* :func:`disk_cache_get` / :func:`disk_cache_put`: small JSON records (line counts of text
  files, statistics of a split) in ``data.stats_cache_dir`` (default ``$TFT_CACHE_DIR``,
  else ``$XDG_CACHE_HOME/tf-transformer``, else ``~/.cache/tf-transformer``), one file per
  key: ``<kind>-<sha256 of the key>.json``. A key holds everything the record depends on
  (each file's resolved path, size and modification time; the vocabulary's hash; the
  settings that change the result), so a changed file or setting gives a new key and the
  old record is never read again. Records are written atomically; an unreadable one is
  ignored and rewritten. ``data.stats_cache: false`` switches the disk cache off.
* :class:`Progress`: one line every few seconds (``data.PROGRESS_SECONDS``) while a pass
  over a corpus runs, with the share done and an estimate of the time left.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Optional

from tf_transformer.io import atomic_write, say

PROGRESS_SECONDS = 4.0
_VERSION = 1  # bump when a record's meaning changes


def default_cache_dir() -> Path:
    if os.environ.get("TFT_CACHE_DIR"):
        return Path(os.environ["TFT_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(base).expanduser() / "tf-transformer"


def cache_dir(data_config) -> Optional[Path]:
    """The statistics cache folder of a data section, or ``None`` when switched off."""
    cfg = getattr(data_config, "data", data_config)
    if not getattr(cfg, "stats_cache", True):
        return None
    if getattr(cfg, "stats_cache_dir", None):
        return Path(cfg.stats_cache_dir).expanduser()
    return default_cache_dir()


def file_identity(path) -> list:
    """``[resolved path, size, mtime_ns]`` of a file: what a cache key holds for it."""
    path = Path(path)
    st = path.stat()
    return [str(path.resolve()), int(st.st_size), int(st.st_mtime_ns)]


def _record_path(folder: Path, kind: str, key: Any) -> tuple[Path, str]:
    text = json.dumps([_VERSION, kind, key], sort_keys=True, default=str)
    return folder / f"{kind}-{hashlib.sha256(text.encode()).hexdigest()[:32]}.json", text


def disk_cache_get(folder, kind: str, key: Any) -> Optional[dict]:
    """The record stored under ``(kind, key)``, or ``None``."""
    if folder is None:
        return None
    path, text = _record_path(Path(folder), kind, key)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("key") != text:
        return None
    return record.get("value")


def disk_cache_put(folder, kind: str, key: Any, value: dict) -> Optional[Path]:
    """Store ``value`` (JSON-serialisable) under ``(kind, key)``; a folder that cannot be
    written is skipped (the cache is an optimisation)."""
    if folder is None:
        return None
    path, text = _record_path(Path(folder), kind, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps({"key": text, "value": value}, sort_keys=True))
    except OSError:
        return None
    return path


class Progress:
    """Reports a long pass: ``update(done)`` prints ``what: 41% (1,234 of 3,000 units), 12 s,
    about 17 s left`` at most every :data:`PROGRESS_SECONDS`, starting after the first
    interval (short passes print nothing); ``done()`` prints the total when anything was
    printed before."""

    def __init__(self, what: str, total: Optional[float], unit: str, log: Callable[[str], None] = say,
                 every: Optional[float] = None):
        self.what, self.total, self.unit, self.log = what, total, unit, log
        self.every = PROGRESS_SECONDS if every is None else every
        self.start = self.last = time.monotonic()
        self.printed = False
        self.count = 0.0

    def update(self, done: float) -> None:
        self.count = done
        now = time.monotonic()
        if now - self.last < self.every:
            return
        self.last = now
        self.printed = True
        elapsed = now - self.start
        if self.total:
            share = min(1.0, done / self.total)
            left = f", about {elapsed * (1 - share) / share:,.0f} s left" if share > 0 else ""
            self.log(f"{self.what}: {share:.0%} ({done:,.0f} of {self.total:,.0f} {self.unit}), "
                     f"{elapsed:,.0f} s{left}")
        else:
            self.log(f"{self.what}: {done:,.0f} {self.unit}, {elapsed:,.0f} s")

    def done(self) -> None:
        if self.printed:
            self.log(f"{self.what}: done in {time.monotonic() - self.start:,.1f} s")
