"""Files of a run: atomic writes, loading a saved Transformer, a run's ``config.yaml``, and the
one-line progress messages the library prints.

Every file the package writes goes through :func:`atomic_path` (or :func:`atomic_write`):
written under a temporary name beside its destination (``.partial-<pid>-<name>``), flushed
to disk and renamed over it, so a process killed while writing leaves the previous file
intact and never a half-written one (:func:`remove_stale_partials` clears the leftovers of
killed writes on the next start). An ``OSError`` while writing becomes a one-line
:class:`~tf_transformer.errors.WriteError` naming the path and the errno. Files read back
are checked: :func:`check_complete` (truncated ``.keras``/``.h5``) and :func:`check_finite`.
:class:`Heartbeat` keeps a long command from going silent.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

from tf_transformer.errors import DamagedFileError, UserError, WriteError

#: Names of the files in a run directory (``tft train --model-dir``).
MODEL_FILE = "model.keras"
CONFIG_FILE = "config.yaml"


def say(msg: str) -> None:
    """Print one progress line to stderr (the library's default ``log``)."""
    print(msg, file=sys.stderr, flush=True)


class _NotRetracing:
    """Drops TensorFlow's "N out of the last M calls to <function ...> triggered tf.function
    retracing" warnings: TensorFlow counts traces by the function's code, which every new Keras
    model's train and evaluation functions share, so a process that builds one model after
    another (an ablation row, a tuning trial) trips it although each function is traced once."""

    def filter(self, record) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


@contextlib.contextmanager
def one_model_after_another() -> Iterator[None]:
    """Inside it, TensorFlow's retracing warning (see :class:`_NotRetracing`) is not printed."""
    import logging

    logger, quiet = logging.getLogger("tensorflow"), _NotRetracing()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


class Heartbeat:
    """A line ``"<who>: <phase>: N s"`` whenever ``every`` seconds pass without output while a
    phase is running, so that a long step (importing TensorFlow, building the model, filling
    the input pipeline, tracing the training step) never leaves the terminal silent. While
    the silence goes on, the wait before the next line doubles, up to ``max_every`` seconds
    (lines at 5, 15, 35, 75, 135, 195, ... s): a minutes-long step writes a few lines to a
    log, not one every 5 s. Any output, or a new phase, starts again at ``every``.

    Lines written through :meth:`say` count as output (they reset the silence clock).
    :meth:`phase` names what is being done now (``N`` counts from its start), :meth:`pause`
    stops the lines until the next phase, :meth:`close` (or leaving a ``with`` block) ends
    the background thread (a later :meth:`phase` starts another). Nothing is printed when every
    phase is quicker than ``every``."""

    def __init__(self, who: str, log: Optional[Callable[[str], None]] = None, every: float = 5.0,
                 max_every: float = 60.0):
        self.who = who
        self.every = float(every)
        self.max_every = max(self.every, float(max_every))
        self._gap = self.every
        self._log = log or say
        self._cond = threading.Condition()
        self._phase: Optional[str] = None
        self._phase_start = self._last = time.monotonic()
        self._closed = False
        self._thread: Optional[threading.Thread] = None

    def say(self, line: str) -> None:
        """Print ``line`` through the heartbeat's log (and restart the silence clock)."""
        with self._cond:
            self._last, self._gap = time.monotonic(), self.every
            self._log(line)
            self._cond.notify()  # the beat may be waiting out a longer gap

    def phase(self, name: str) -> None:
        """From now on the work is ``name`` (e.g. ``"building the model"``)."""
        with self._cond:
            self._phase, self._phase_start, self._gap = name, time.monotonic(), self.every
            if self._thread is None:  # the first phase (or the first after close) starts the thread
                self._closed = False
                self._thread = threading.Thread(target=self._beat, name=f"tft-heartbeat-{self.who}", daemon=True)
                self._thread.start()
            self._cond.notify()

    def pause(self) -> None:
        """No lines until the next :meth:`phase` (output of its own follows, e.g. progress lines)."""
        with self._cond:
            self._phase = None
            self._cond.notify()

    @contextlib.contextmanager
    def writing_to(self, log: Callable[[str], None]) -> Iterator[None]:
        """Send the heartbeat's lines to ``log`` inside the block (e.g. the real stderr while
        file descriptor 2 is being filtered)."""
        with self._cond:
            saved, self._log = self._log, log
        try:
            yield
        finally:
            with self._cond:
                self._log = saved

    def close(self) -> None:
        with self._cond:
            self._closed, self._phase = True, None
            self._cond.notify()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def __enter__(self) -> "Heartbeat":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _beat(self) -> None:
        with self._cond:
            while not self._closed:
                if self._phase is None:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                due = self._last + self._gap - now
                if due > 0:
                    self._cond.wait(due)
                    continue
                self._log(f"{self.who}: {self._phase}: {now - self._phase_start:.0f} s")
                self._last, self._gap = now, min(2 * self._gap, self.max_every)


#: Prefix of the temporary names :func:`atomic_path` writes under (``.partial-<pid>-<name>``).
PARTIAL_PREFIX = ".partial-"


def write_error(error: OSError, path) -> WriteError:
    """``error`` as a one-line :class:`WriteError` naming ``path`` (or the error's own file)."""
    where = getattr(error, "filename", None) or path
    if Path(where).name.startswith(PARTIAL_PREFIX):  # our temporary name: the user knows the destination
        where = path
    code = getattr(error, "errno", None)
    return WriteError.at(where, code, getattr(error, "strerror", None) or str(error))


@contextlib.contextmanager
def atomic_path(path: Union[str, os.PathLike], expected_bytes: int = 0) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write to; on success it is flushed to disk
    (fsync) and renamed over ``path`` (file or directory), on an error it is removed and
    ``path`` is left as it was.

    ``expected_bytes``: refuse (``ENOSPC``) before writing when the file system has less free
    space. Any ``OSError`` becomes a :class:`~tf_transformer.errors.WriteError` naming the path.
    """
    path = Path(path)
    tmp = path.with_name(f"{PARTIAL_PREFIX}{os.getpid()}-{path.name}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        check_free_space(path.parent, expected_bytes)
        _remove(tmp)
    except OSError as e:
        raise write_error(e, path.parent) from None
    try:
        yield tmp
        _fsync_tree(tmp)
        if tmp.is_dir() and path.is_dir():
            shutil.rmtree(path)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as e:
        raise write_error(e, path) from None
    finally:
        try:
            _remove(tmp)
        except OSError:
            pass


def check_free_space(directory: Union[str, os.PathLike], needed_bytes: int, what: str = "") -> None:
    """Raise a ``ENOSPC`` :class:`WriteError` when ``directory``'s file system has less than
    ``needed_bytes`` free."""
    if needed_bytes <= 0:
        return
    free = shutil.disk_usage(directory).free
    if free < needed_bytes:
        raise WriteError.at(directory, errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: {free / 2**20:,.1f} MiB free, "
                         f"{needed_bytes / 2**20:,.1f} MiB needed{' for ' + what if what else ''}")


def check_writable(directory: Union[str, os.PathLike], needed_bytes: int = 0, what: str = "") -> Path:
    """Create ``directory`` if needed and prove it writable (a probe file is written and
    removed) with at least ``needed_bytes`` free; a :class:`WriteError` otherwise."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f"{PARTIAL_PREFIX}{os.getpid()}-probe"
        with open(probe, "wb") as f:
            f.write(b"0")
        probe.unlink()
    except OSError as e:
        raise write_error(e, directory) from None
    check_free_space(directory, needed_bytes, what)
    return directory


def remove_stale_partials(directory: Union[str, os.PathLike], depth: int = 2) -> list[Path]:
    """Remove the ``.partial-<pid>-*`` leftovers of killed writes under ``directory`` (down
    to ``depth`` levels) whose process is gone; returns what was removed."""
    directory = Path(directory)
    removed = []
    if not directory.is_dir():
        return removed
    for entry in directory.iterdir():
        if entry.name.startswith(PARTIAL_PREFIX):
            pid = entry.name[len(PARTIAL_PREFIX):].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                try:
                    _remove(entry)
                    removed.append(entry)
                except OSError as e:
                    raise write_error(e, entry) from None
        elif depth > 1 and entry.is_dir() and not entry.is_symlink():
            removed += remove_stale_partials(entry, depth - 1)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # a leftover of an earlier process that had our pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_tree(path: Path) -> None:
    if path.is_dir():
        for root, _, files in os.walk(path):
            for name in files:
                _fsync_file(Path(root) / name)
            _fsync_dir(Path(root))
    elif path.exists():
        _fsync_file(path)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # not supported here (some file systems)
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def atomic_write(path: Union[str, os.PathLike], data: Union[str, bytes]) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically; returns ``path``."""
    raw = data if isinstance(data, bytes) else data.encode("utf-8")
    with atomic_path(path, expected_bytes=len(raw)) as tmp:
        tmp.write_bytes(raw)
    return Path(path)


def atomic_copy(source: Union[str, os.PathLike], path: Union[str, os.PathLike]) -> Path:
    """Copy the file ``source`` to ``path`` atomically."""
    with atomic_path(path, expected_bytes=os.path.getsize(source)) as tmp:
        shutil.copyfile(source, tmp)
    return Path(path)


# ---------------------------------------------------------------------------------------
# Checking saved files
# ---------------------------------------------------------------------------------------


def check_complete(path: Union[str, os.PathLike], what: str = "file") -> None:
    """Raise :class:`DamagedFileError` unless ``path`` is a complete ``.keras`` archive or
    ``.h5`` file (truncated by a killed copy, a full disk or byte damage)."""
    path = Path(path)
    name = path.name
    try:
        if name.endswith(".keras"):
            import zipfile

            with zipfile.ZipFile(path) as z:
                bad = z.testzip()
            if bad is not None:
                raise DamagedFileError(f"{what} {path}: truncated or damaged (member {bad} fails its CRC check)")
        elif name.endswith(".h5"):
            import h5py

            with h5py.File(path, "r") as f:
                f.visit(lambda _: None)  # HDF5 checks the end of file against its superblock
    except DamagedFileError:
        raise
    except FileNotFoundError:
        raise DamagedFileError(f"{what} {path}: no such file") from None
    except Exception as e:  # noqa: BLE001 (zipfile/h5py raise several types)
        raise DamagedFileError(f"{what} {path}: truncated or damaged ({type(e).__name__}: {e})") from None


def check_finite(variables, path, what: str = "file") -> None:
    """Raise :class:`DamagedFileError` naming ``path`` and the first variable holding NaN or
    infinity (``variables``: Keras variables just loaded from ``path``)."""
    import numpy as np

    for v in variables:
        value = np.asarray(v.numpy() if hasattr(v, "numpy") else v)
        if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
            bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
            name = getattr(v, "path", None) or getattr(v, "name", "a weight")
            raise DamagedFileError(f"{what} {path}: damaged: {name} holds {bad:,} non-finite value(s) (NaN or inf)")


def state_bytes(obj) -> int:
    """Bytes of the weights of ``obj`` (a layer or model; with its optimizer's state)."""
    import numpy as np

    variables = list(getattr(obj, "weights", []))
    optimizer = getattr(obj, "optimizer", None)
    if optimizer is not None:
        variables += list(optimizer.variables)
    total = 0
    for v in variables:
        total += int(np.prod(v.shape)) * np.dtype(getattr(v, "dtype", "float32")).itemsize
    return total


def load_model(path: Union[str, os.PathLike]):
    """Load a ``.keras`` Transformer (no optimizer) with a clear error for bad paths. A saved
    training wrapper (``TrainingModel``, what ``ModelCheckpoint`` writes during ``model.fit`` of
    one, or a tuner's best model) gives the Transformer inside it."""
    path = str(path)
    if not os.path.exists(path):
        raise UserError(f"model {path}: no such file (expected a .keras model written by tft train/average)")
    check_complete(path, "model")
    import keras

    import tf_transformer.model  # noqa: F401  (registers the classes)

    try:
        model = keras.saving.load_model(path, compile=False)
    except Exception as e:  # noqa: BLE001 (keras raises ValueError, OSError, zipfile errors...)
        raise UserError(f"model {path}: cannot load it as a Keras model ({type(e).__name__}: {e})") from None
    inner = getattr(model, "transformer", None)
    if inner is not None and all(hasattr(inner, a) for a in ("encode", "decode_step", "init_cache")):
        model = inner  # the training wrapper: its Transformer is the model
    for attr in ("encode", "decode_step", "init_cache", "vocab_size"):
        if not hasattr(model, attr):
            raise UserError(f"model {path}: {type(model).__name__} is not a tf_transformer Transformer")
    check_finite(model.weights, path, "model")
    return model


def save_model(model, path: Union[str, os.PathLike]) -> Path:
    """``model.save(path)`` atomically (``.keras``)."""
    path = Path(path)
    with atomic_path(path, expected_bytes=state_bytes(model) + 2**20) as tmp:
        model.save(str(tmp))
    return path


def save_weights(layer, path: Union[str, os.PathLike]) -> Path:
    """``layer.save_weights(path)`` atomically (``.weights.h5``)."""
    path = Path(path)
    with atomic_path(path, expected_bytes=state_bytes(layer) + 2**20) as tmp:
        layer.save_weights(str(tmp), overwrite=True)
    return path


def load_weights(layer, path: Union[str, os.PathLike], what: str = "checkpoint") -> None:
    """``layer.load_weights(path)`` after checking the file is complete, then check that every
    weight loaded is finite; :class:`DamagedFileError` / :class:`UserError` name the file."""
    check_complete(path, what)
    try:
        layer.load_weights(str(path))
    except Exception as e:  # noqa: BLE001 (shape/structure mismatch: keras raises several types)
        # Keras' message lists every layer it could not load, over several lines: its first line
        # and first example say enough
        lines = [line.strip() for line in str(e).splitlines() if line.strip() and not line.startswith("[<")]
        detail = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines[0] if lines else "")
        raise UserError(f"{what} {path}: cannot load it into the model ({type(e).__name__}: {detail}); was it "
                        "written by a model of another architecture (the run's config.yaml changed)?") from None
    variables = list(layer.weights)
    optimizer = getattr(layer, "optimizer", None)
    if optimizer is not None:
        variables += list(optimizer.variables)
    check_finite(variables, path, what)


def read_run_config(model_dir: Union[str, os.PathLike]):
    """The resolved config a training run wrote to ``model_dir/config.yaml``."""
    from tf_transformer.config import load_config

    path = Path(model_dir) / CONFIG_FILE
    if not path.is_file():
        raise UserError(f"{path} does not exist: the model directory must be one written by tft train")
    return load_config(str(path), require_vocab=True)


def write_run_config(cfg, path: Union[str, os.PathLike]) -> Path:
    """Write ``cfg`` (resolved) as YAML that :func:`read_run_config` reads back."""
    import yaml

    raw = {"name": cfg.name, **cfg.to_dict()} if cfg.name else cfg.to_dict()
    return atomic_write(path, "# resolved configuration written by tft train\n" + yaml.safe_dump(raw, sort_keys=False))


def list_step_files(directory, prefix: str) -> list[tuple[int, Path]]:
    """``[(step, path), ...]`` of the ``<prefix>-<step>.weights.h5`` files in ``directory``
    (``ckpt``: the checkpoints, ``best``: the best evaluations' weights), oldest first; ``[]``
    when the directory does not exist. Here (not in the training package) so that tools and
    ``tft status`` can list a run's files without Keras."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    pattern = re.compile(rf"^{re.escape(prefix)}-(\d+)\.weights\.h5$")
    found = []
    for p in directory.iterdir():
        m = pattern.match(p.name)
        if m and p.is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def read_eval_log(path) -> list[dict]:
    """The rows of an ``eval.jsonl`` file (oldest first); a torn last line is ignored. Here
    (not in the training package) so that tools can read a run's log without Keras."""
    path = Path(path)
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a write interrupted by a kill: everything after it is suspect
    return rows
