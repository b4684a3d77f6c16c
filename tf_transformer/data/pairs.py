"""``make_dataset`` for a config *or* for the user's own sentence pairs.

::

    ds = make_dataset(cfg.data, "train", tok)                                   # a config's split
    ds = make_dataset((["A dog.", ...], ["Ein Hund.", ...]), tokenizer=tok)     # pairs in memory
    ds = make_dataset(("train.en", "train.de"), tokenizer=tok, tokens_per_batch=2048, training=False)

Pairs (two lists of strings, or two parallel text files, .txt or .gz) go through the same
pipeline as a config's text source (checks, the one-line summary, length filtering, token-budget
batches); in-memory pairs are written to a temporary directory first, removed at interpreter
exit. Batching settings not given come from :class:`~tf_transformer.config.DataConfig`'s defaults.
"""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import tempfile
from typing import Any

from tf_transformer.config import ConfigError
from tf_transformer.errors import DataError

__all__ = ["make_dataset", "pairs_config"]

_TEMP_DIRS: list = []


def _cleanup() -> None:
    for d in _TEMP_DIRS:
        shutil.rmtree(d, ignore_errors=True)


def _is_config(data: Any) -> bool:
    return hasattr(data, "tokens_per_batch") or hasattr(data, "data")


def _unknown_fields(fields) -> list:
    """The names among ``fields`` that are no ``DataConfig`` field, sorted."""
    from tf_transformer.config import DataConfig

    return sorted(set(fields) - {f.name for f in dataclasses.fields(DataConfig)})


def pairs_config(pairs, **fields):
    """A text-source ``DataConfig`` whose every split is ``pairs`` (two lists of strings or two
    file paths); ``fields`` are other ``DataConfig`` fields (``tokens_per_batch``, ``max_length``...)."""
    from tf_transformer.config import DataConfig

    if not isinstance(pairs, (tuple, list)) or len(pairs) != 2:
        raise DataError("pairs must be (sources, targets): two lists of sentences or two parallel text files")
    sources, targets = pairs
    if isinstance(sources, (str, os.PathLike)) and isinstance(targets, (str, os.PathLike)):
        paths = [str(sources), str(targets)]
        for p in paths:
            if not os.path.isfile(p):
                raise DataError(f"{p}: no such file (pairs as files: (source_path, target_path))")
    else:
        sources, targets = list(sources), list(targets)
        if len(sources) != len(targets):
            raise DataError(f"pairs: {len(sources)} sources but {len(targets)} targets; they must be parallel")
        bad = next((i for i, s in enumerate(sources + targets) if not isinstance(s, str)), None)
        if bad is not None:
            side, i = ("sources", bad) if bad < len(sources) else ("targets", bad - len(sources))
            raise DataError(f"pairs: {side}[{i}] is {type((sources + targets)[bad]).__name__}, expected str")
        if not _TEMP_DIRS:
            atexit.register(_cleanup)
        directory = tempfile.mkdtemp(prefix="tft-pairs-")
        _TEMP_DIRS.append(directory)
        paths = [os.path.join(directory, "source.txt"), os.path.join(directory, "target.txt")]
        for path, lines in zip(paths, (sources, targets)):
            with open(path, "w", encoding="utf-8") as f:
                # a line break inside a sentence (\n, \r) would split or join its words
                f.writelines(line.replace("\r\n", " ").replace("\n", " ").replace("\r", " ") + "\n"
                             for line in lines)
    unknown = _unknown_fields(fields)
    if unknown:
        raise DataError(f"unknown DataConfig field(s) {', '.join(unknown)}")
    split_files = {f"{s}_{side}": p for s in ("train", "valid", "test") for side, p in zip(("source", "target"), paths)}
    cfg = DataConfig(source="text", **split_files, **fields)
    cfg.validate()
    return cfg


def make_dataset(data, split: str | None = None, tokenizer=None, training: bool = True, input_context=None,
                 seed: int | None = None, repeat: bool | None = None, verbose: bool = True, skip: int = 0,
                 **fields):
    """Token-budget batches ``((source_ids, target_input_ids), target_output_ids)``.

    ``data``: a ``DataConfig`` (or a whole ``Config``) and ``split`` of it (default
    ``"train"``); or ``pairs`` (see the module doc), with batching ``fields`` such as
    ``tokens_per_batch=2048``, ``max_length=64``; pairs are every split at once, and
    ``split`` only names them in the messages (default ``"train"`` for training batches,
    ``"valid"`` for ``training=False``). The other arguments are those of
    :func:`tf_transformer.data.batching.make_dataset`."""
    from tf_transformer.data.batching import make_dataset as from_config

    if tokenizer is None:
        raise DataError("make_dataset needs tokenizer= (a tf_transformer.data.Tokenizer)")
    if _is_config(data):
        if fields:
            unknown = _unknown_fields(fields)
            if unknown:
                raise ConfigError(f"make_dataset: {', '.join(unknown)} "
                                  f"{'is not a data field' if len(unknown) == 1 else 'are not data fields'} "
                                  "(see DataConfig)")
            data = dataclasses.replace(getattr(data, "data", data), **fields)
        return from_config(data, split or "train", tokenizer, training=training, input_context=input_context,
                           seed=seed, repeat=repeat, verbose=verbose, skip=skip)
    if split is None:
        split = "train" if training else "valid"
    return from_config(pairs_config(data, **fields), split, tokenizer, training=training,
                       input_context=input_context, seed=seed, repeat=repeat, verbose=verbose, skip=skip)
