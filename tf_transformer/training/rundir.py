"""The run directory as a contract: what a resumed run may change, and the checks made
before anything is written.

A run directory is one training run. Running ``train`` again on it continues that run, so
the new resolved config must mean the same run as the ``config.yaml`` it holds, and the
vocabulary must be the one its weights were trained with (compared by SHA-256 of the
SentencePiece model, not by path). Fields in :data:`MAY_DIFFER` cannot change what a
resumed run computes and may differ; any other difference is refused before the model is
built or a file written, with one message listing every field as ``field: old -> new``.
``allow_change=True`` continues the run under the new values on purpose.

:func:`check_room` proves the directory writable and with room for two checkpoints, a
backup and the final model (estimated from the config, before the model is built).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from tf_transformer.errors import ConfigError

#: Fields a resumed run may change: how long it runs, how often it saves, where it is and
#: what gets printed or decoded afterwards. Everything else changes the run's meaning.
MAY_DIFFER = frozenset({
    "name",  # the preset/file name the config came from
    "train.train_steps", "train.max_minutes",  # how long (raise train_steps to continue a finished run)
    "train.checkpoint_every_minutes", "train.keep_checkpoints", "train.backup_every_steps",  # save cadence
    "train.average_last",  # read by tft average only
    "train.model_dir", "data.vocab_model",  # locations (the vocabulary is compared by checksum)
    "data.stats_pass", "data.cache", "data.tfds_data_dir", "data.tfds_download",  # logging / speed / where
    "data.stats_cache", "data.stats_cache_dir",  # where the corpus statistics are cached
    "train.log_every_steps", "train.tensorboard_every_steps",  # what gets printed and logged
    "train.strategy",  # resolved to the machine at hand; the exact stream needs the same replica count
})
#: Whole sections that may differ (decoding settings are not used by training; its
#: validation BLEU has its own train.eval_* fields).
MAY_DIFFER_SECTIONS = frozenset({"decode"})


class RunContractError(ConfigError):
    """Resuming ``model_dir`` under a config that differs in fields outside :data:`MAY_DIFFER`."""

    def __init__(self, model_dir, differences: list, override: str = "allow_config_change=True"):
        self.model_dir = Path(model_dir)
        self.differences = list(differences)
        listed = "; ".join(f"{field}: {old} -> {new}" for field, old, new in self.differences)
        super().__init__(
            f"{self.model_dir} holds a run with another configuration ({self.model_dir / 'config.yaml'}); "
            f"continuing it would mix two runs: {listed}. Start a new run in another model directory, or "
            f"continue this one under the new values on purpose with {override}")


def vocabulary_digest(model_proto: bytes) -> str:
    return hashlib.sha256(model_proto).hexdigest()


def flatten_fields(raw: dict, prefix: str = "") -> dict:
    """``{"train": {"seed": 1}}`` -> ``{"train.seed": 1}``: nested mappings as dotted field names."""
    out = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            out.update(flatten_fields(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


#: What :func:`changed_fields` reports for a field that one side does not have.
UNSET = "(unset)"


def changed_fields(old: dict, new: dict, missing=UNSET) -> list[tuple[str, object, object]]:
    """``[(field, old value, new value), ...]``, sorted, of the dotted fields (:func:`flatten_fields`)
    in which two nested mappings differ. A field one side lacks counts as ``None`` there (a
    field added with a ``None`` default changes nothing) and is shown as ``missing``."""
    old, new = flatten_fields(old), flatten_fields(new)
    return [(k, old.get(k, missing), new.get(k, missing)) for k in sorted(set(old) | set(new))
            if old.get(k) != new.get(k)]


def listed(items: list, limit: int = 6) -> str:
    """``items`` joined by ``; ``, the first ``limit`` of them and how many more."""
    return "; ".join(items[:limit]) + (f"; and {len(items) - limit} more" if len(items) > limit else "")


def _show(value) -> str:
    return "null" if value is None else str(value)


def differences(old_cfg, new_cfg) -> list[tuple[str, str, str]]:
    """``[(field, old, new), ...]`` of the fields outside :data:`MAY_DIFFER` that differ."""
    changed = changed_fields({"name": old_cfg.name, **old_cfg.to_dict()}, {"name": new_cfg.name, **new_cfg.to_dict()},
                             missing=None)
    return [(field, _show(a), _show(b)) for field, a, b in changed
            if field not in MAY_DIFFER and field.split(".", 1)[0] not in MAY_DIFFER_SECTIONS]


def pipelines_that_ran(stored) -> int:
    """The pipeline count of a run from its config.yaml's ``data.parallel_pipelines``: a
    config.yaml written before the field existed (missing, or 0) ran one pipeline."""
    return int(stored) if stored else 1


def resolve_pipelines_for(cfg, model_dir) -> None:
    """Fix ``data.parallel_pipelines`` = 0 ("one per core") to a number before the run is
    compared and written: the batch order depends on it, so a run resumed on a machine with
    another core count must keep the count it started with. A run already in ``model_dir``
    keeps its stored count (a run whose config.yaml predates the field had one pipeline)."""
    import yaml

    from tf_transformer.data.batching import resolve_pipelines

    if cfg.data.parallel_pipelines:
        return
    path = Path(model_dir) / "config.yaml"
    if path.is_file():
        try:
            stored = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("data", {}).get(
                "parallel_pipelines")
        except (OSError, yaml.YAMLError, AttributeError):
            stored = None  # check_contract reports an unreadable config.yaml
        cfg.data.parallel_pipelines = pipelines_that_ran(stored)
    else:
        cfg.data.parallel_pipelines = resolve_pipelines(cfg.data)


def _stored_config(model_dir: Path):
    """The config of the run in ``model_dir`` (its pipeline count resolved as it ran), or ``None``."""
    from tf_transformer.config import load_config
    from tf_transformer.errors import UserError

    path = model_dir / "config.yaml"
    if not path.is_file():
        return None
    try:
        old = load_config(str(path), validate=False)
    except UserError as e:
        raise ConfigError(f"{path} (the config of the run in {model_dir}) cannot be read: {e}") from None
    old.data.parallel_pipelines = pipelines_that_ran(old.data.parallel_pipelines)
    return old


def check_contract(cfg, model_dir, tokenizer=None, allow_change: bool = False) -> Optional[list]:
    """Compare ``cfg`` (resolved: vocabulary size filled in) and ``tokenizer``'s vocabulary
    with the run in ``model_dir``; raise :class:`RunContractError` listing the differences
    (unless ``allow_change``). Returns the differences (``None``: no run there yet)."""
    model_dir = Path(model_dir)
    old = _stored_config(model_dir)
    if old is None:
        return None
    found = differences(old, cfg)
    vocab = model_dir / "vocab.model"
    if tokenizer is not None and vocab.is_file():
        before = vocabulary_digest(vocab.read_bytes())
        after = vocabulary_digest(tokenizer.model_proto)
        if before != after:
            source = getattr(tokenizer, "model_path", None) or "the given tokenizer"
            found.append((f"vocabulary (sha256 of {vocab} vs {source})", before[:12], after[:12]))
    if found and not allow_change:
        raise RunContractError(model_dir, found)
    return found


def early_differences(cfg, model_dir) -> Optional[list]:
    """The part of :func:`check_contract` that needs neither TensorFlow nor the vocabulary, for
    a config as read (before training resolves it): ``cfg`` against the ``config.yaml`` in
    ``model_dir``; ``None`` when there is no run there yet. The two values training fills in
    later are not compared here: ``model.vocab_size`` (the vocabulary's size) and a
    ``data.parallel_pipelines`` of 0 (a resumed run keeps its stored count). So every
    difference found here is one that :func:`check_contract` finds too."""
    import copy

    old = _stored_config(Path(model_dir))
    if old is None:
        return None
    new = copy.deepcopy(cfg)
    new.model.vocab_size = old.model.vocab_size
    if not new.data.parallel_pipelines:
        new.data.parallel_pipelines = old.data.parallel_pipelines
    return differences(old, new)


def estimated_parameters(model_cfg) -> int:
    """The Transformer's parameter count from its config (within a few percent; used to
    size disk checks before the model is built)."""
    d, dff, layers = model_cfg.d_model, model_cfg.d_ff, model_cfg.num_layers
    heads = model_cfg.num_heads
    dk = model_cfg.key_dim or d // heads
    dv = model_cfg.value_dim or d // heads
    attention = 2 * d * heads * dk + d * heads * dv + heads * dv * d + 2 * heads * dk + heads * dv + d
    ffn = 2 * d * dff + dff + d
    encoder = layers * (attention + ffn + 4 * d)
    decoder = layers * (2 * attention + ffn + 6 * d)
    table = (model_cfg.vocab_size or 0) * d
    positions = model_cfg.max_length * d if model_cfg.position_encoding == "learned" else 0
    return encoder + decoder + table + positions + 4 * d


def needed_bytes(model_cfg) -> int:
    """Disk a run needs: two checkpoints (weights), a backup (weights and two Adam
    moments) and the final ``model.keras``: six copies of the weights in float32."""
    return 6 * 4 * estimated_parameters(model_cfg)


def check_room(cfg, model_dir) -> None:
    """``model_dir`` exists (created), is writable and has :func:`needed_bytes` free; a
    :class:`~tf_transformer.errors.WriteError` naming the directory otherwise."""
    import dataclasses

    from tf_transformer.io import check_writable

    model_cfg = dataclasses.replace(cfg.model, vocab_size=cfg.model.vocab_size or cfg.data.vocab_size)
    check_writable(model_dir, needed_bytes(model_cfg), "two checkpoints, a backup and the final model")
