"""Files of a run: atomic writes, loading a saved Transformer, a run's ``config.yaml``, and the
one-line progress messages the library prints.

Every file the package writes goes through :func:`atomic_path` (or :func:`atomic_write`):
written under a temporary name beside its destination and renamed over it, so a process
killed while writing leaves the previous file intact and never a half-written one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path
from typing import Iterator, Union

from tf_transformer.errors import UserError

#: Names of the files in a run directory (``tft train --model-dir``).
MODEL_FILE = "model.keras"
CONFIG_FILE = "config.yaml"


def say(msg: str) -> None:
    """Print one progress line to stderr (the library's default ``log``)."""
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def atomic_path(path: Union[str, os.PathLike]) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write to; on success it replaces ``path``
    (file or directory), on an error it is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".partial-{os.getpid()}-{path.name}")
    _remove(tmp)
    try:
        yield tmp
        if tmp.is_dir() and path.is_dir():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        _remove(tmp)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def atomic_write(path: Union[str, os.PathLike], data: Union[str, bytes]) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically; returns ``path``."""
    with atomic_path(path) as tmp:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
    return Path(path)


def load_model(path: Union[str, os.PathLike]):
    """Load a ``.keras`` Transformer (no optimizer) with a clear error for bad paths."""
    path = str(path)
    if not os.path.exists(path):
        raise UserError(f"model {path}: no such file (expected a .keras model written by tft train/average)")
    import keras

    import tf_transformer.model  # noqa: F401  (registers the classes)

    try:
        model = keras.saving.load_model(path, compile=False)
    except Exception as e:  # noqa: BLE001 (keras raises ValueError, OSError, zipfile errors...)
        raise UserError(f"model {path}: cannot load it as a Keras model ({type(e).__name__}: {e})") from None
    for attr in ("encode", "decode_step", "init_cache", "vocab_size"):
        if not hasattr(model, attr):
            raise UserError(f"model {path}: {type(model).__name__} is not a tf_transformer Transformer")
    return model


def save_model(model, path: Union[str, os.PathLike]) -> Path:
    """``model.save(path)`` atomically (``.keras``)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        model.save(str(tmp))
    return path


def save_weights(layer, path: Union[str, os.PathLike]) -> Path:
    """``layer.save_weights(path)`` atomically (``.weights.h5``)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        layer.save_weights(str(tmp), overwrite=True)
    return path


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
