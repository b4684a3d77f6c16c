"""``tft translate --resume``: an output file written chunk by chunk, with a progress record
beside it, so that a long translation (a corpus to back-translate) that is interrupted goes on
from its last finished chunk instead of from the start.

The record, ``OUTPUT.progress.json``, is rewritten atomically after each chunk is written and
synced: how many input lines are done, how many bytes of the output hold them, and what the
run is (the input file, the model and vocabulary files, the decoding settings). A rerun of the
same command cuts the output back to that many bytes (dropping whatever an interrupted write
left after it), skips those input lines and appends. A rerun whose input, model or settings
differ is refused, naming what changed, rather than mixing two runs' translations in one
file. A finished run keeps its record (``finished: true``), so rerunning it again says so and
does nothing. A gzip output (``.gz``) is written as one gzip member per chunk, so that a cut
at a chunk's end leaves a readable file.
"""

from __future__ import annotations

import gzip
import json
import os

from tf_transformer.errors import UserError

#: The progress record's name: the output's, plus this.
SUFFIX = ".progress.json"


def identity(path: str) -> dict:
    """What a file is, cheaply: its absolute path, size and modification time; for a folder (a
    CTranslate2 export), those of the files in it."""
    path = os.path.abspath(path)
    if os.path.isdir(path):
        return {"path": path, "files": {name: identity(os.path.join(path, name))["stat"]
                                        for name in sorted(os.listdir(path))
                                        if os.path.isfile(os.path.join(path, name))}}
    st = os.stat(path)
    return {"path": path, "stat": [st.st_size, st.st_mtime_ns]}


class ResumableOutput:
    """Chunks of output text appended to ``path`` with a progress record (see the module
    docstring). ``run``: what the run is (a JSON-able dict; compared on resume); ``total``:
    the input's line count. After construction, :attr:`done` input lines are already written
    (0 for a new run) and :attr:`finished` says whether there is nothing left."""

    def __init__(self, path: str, run: dict, total: int):
        self.path = path
        self.record = path + SUFFIX
        self.run = run
        self.total = int(total)
        self.done = 0
        self.bytes = 0
        self.finished = False
        try:
            if os.path.exists(self.record):
                self._resume()
            else:
                self._start()
        except OSError as e:
            raise UserError(f"--output {path}: cannot write it ({e.strerror})") from None

    def _start(self) -> None:
        if os.path.exists(self.path):
            raise UserError(f"--output {self.path} exists and has no progress record ({self.record}): it was not "
                            "written by tft translate --resume. Remove it or give another --output; --resume then "
                            "starts it and keeps its progress")
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "wb"):
            pass
        self._save()

    def _resume(self) -> None:
        try:
            with open(self.record, encoding="utf-8") as f:
                saved = json.load(f)
            done, size, run = int(saved["done"]), int(saved["bytes"]), saved["run"]
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{self.record}: not a progress record of tft translate --resume ({e}); remove it and "
                            f"{self.path} to start again") from None
        changed = [key for key in sorted(set(run) | set(self.run)) if run.get(key) != self.run.get(key)]
        if changed:
            shown = "; ".join(f"{key}: {_short(run.get(key))} then, {_short(self.run.get(key))} now"
                              for key in changed)
            raise UserError(f"--resume: {self.path} was begun by another run ({shown}). Its translations would "
                            "not match the rest: rerun the command that began it, or give another --output")
        have = os.path.getsize(self.path) if os.path.exists(self.path) else -1
        if have < size:
            what = "is missing" if have < 0 else f"has {have:,} bytes"
            raise UserError(f"--resume: {self.path} {what}, but its progress record says {size:,} were written: "
                            f"it was changed since; remove it and {self.record} to start again")
        with open(self.path, "r+b" if have >= 0 else "wb") as f:  # drop what an interrupted chunk left
            f.truncate(size)
        self.done, self.bytes = done, size
        self.finished = done >= self.total

    def append(self, text: str, done: int) -> None:
        """Write ``text`` (the translations of the input lines up to ``done``), sync it, then
        record the progress."""
        data = text.encode("utf-8")
        if self.path.endswith(".gz"):
            data = gzip.compress(data, mtime=0)  # a member of its own: a cut after it is a valid file
        try:
            with open(self.path, "ab") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            self.bytes += len(data)
            self.done = int(done)
            self.finished = self.done >= self.total
            self._save()
        except OSError as e:
            raise UserError(f"--output {self.path}: cannot write it ({e.strerror})") from None

    def _save(self) -> None:
        from tf_transformer.io import atomic_write

        record = {"done": self.done, "total": self.total, "bytes": self.bytes, "finished": self.finished,
                  "run": self.run}
        atomic_write(self.record, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode("utf-8"))


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."
