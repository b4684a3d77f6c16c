"""The 18 rows of the paper's Table 3, scaled from the paper's base model to a small one.

The paper's rows are the presets ``table3/A1`` ... ``table3/E`` (each a change of the
``base`` preset). :func:`row_config` applies the same change to any base config, scaled to
its size, by these rules (``P`` = the paper's base: N=6, d_model=512, h=8, d_k=d_v=64,
d_ff=2048; ``S`` = the small base, e.g. ``multi30k_small``: N=3, d_model=256, h=4,
d_k=d_v=64, d_ff=1024):

* **A** (heads at constant computation): ``h = max(1, round(h_S * h_row / h_P))`` and
  ``d_k = d_v = d_model_S / h``, so ``h * d_k = d_model`` as in the paper. The paper's
  ``h = 1, 4, 16, 32`` (1/8, 1/2, 2, 4 times base) become ``1, 2, 8, 16`` for ``h_S = 4``
  (row A1 stays the single-head model).
* **B** (smaller keys only): ``d_k = round(d_k_S * d_k_row / d_k_P)``; ``d_v`` and ``h``
  unchanged (16 and 32 at ``d_k_S = 64``).
* **C** (size): ``N``, ``d_model`` and ``d_ff`` scaled by the paper's ratio to its base,
  rounded, at least 1: ``N = 2, 4, 8`` of 6 becomes ``1, 2, 4`` of 3; ``d_model = 256, 1024``
  of 512 (with ``d_k = d_v = 32, 128`` of 64) becomes ``d_model = 128, 512`` with
  ``d_k = d_v = 32, 128`` (heads unchanged); ``d_ff = 1024, 4096`` of 2048 becomes
  ``512, 2048``.
* **D** (regularization): the paper's values as they are: ``P_drop = 0.0, 0.2``,
  ``eps_ls = 0.0, 0.2``.
* **E**: learned positional embeddings (``model.max_length`` rows) instead of sinusoids.

``base`` is the small config unchanged: the reference row.
"""

from __future__ import annotations

import copy
import dataclasses
from functools import lru_cache
from typing import Optional

from tf_transformer.config import Config, ConfigError, load_config
from tf_transformer.errors import UserError
from tf_transformer.paper import CHANGES, TABLE3

#: Table 3 rows in the paper's order; "base" is the unchanged reference.
TABLE3_ROWS = ("A1", "A2", "A3", "A4", "B1", "B2", "C1", "C2", "C3", "C4", "C5", "C6", "C7",
               "D1", "D2", "D3", "D4", "E")
ROWS = ("base",) + TABLE3_ROWS

_SCALED = ("num_layers", "d_model", "d_ff", "key_dim", "value_dim")
_LITERAL_MODEL = ("dropout", "position_encoding")
_MODEL_FIELDS = ("num_heads",) + _SCALED + _LITERAL_MODEL


def preset_name(row: str) -> str:
    """``"A1"`` -> ``"table3/A1"``; ``"base"`` -> ``"base"``."""
    return "base" if row == "base" else f"table3/{row}"


def parse_rows(text: str) -> list[str]:
    """``"A1,C,E"`` -> ``["A1", "C1", ..., "C7", "E"]``; ``"all"`` -> every row. A group
    letter selects all its rows. Order of the paper, duplicates removed."""
    chosen = set()
    for item in (t.strip() for t in str(text).split(",")):
        if not item:
            continue
        key = item.upper() if item.lower() != "base" else "base"
        if item.lower() == "all":
            chosen.update(ROWS)
        elif key in ROWS:
            chosen.add(key)
        elif len(key) == 1 and any(r.startswith(key) for r in TABLE3_ROWS):
            chosen.update(r for r in TABLE3_ROWS if r.startswith(key))
        else:
            raise UserError(f"--rows: {item!r} is not a Table 3 row; expected 'all', a group letter "
                            f"(A, B, C, D, E) or one of: {', '.join(ROWS)}")
    if not chosen:
        raise UserError("--rows is empty; e.g. --rows A1,A3,C1,C2,D1,E or --rows all")
    return [r for r in ROWS if r in chosen]


def _resolved_model(cfg: Config):
    return cfg.model.resolved()


@lru_cache(maxsize=None)
def paper_change(row: str) -> dict:
    """The paper's change of ``row`` from its base, read from the presets:
    ``{"model": {field: value}, "train": {field: value}}`` (``key_dim``/``value_dim`` resolved)."""
    if row == "base":
        return {"model": {}, "train": {}}
    if row not in TABLE3_ROWS:
        raise UserError(f"{row!r} is not a Table 3 row ({', '.join(TABLE3_ROWS)})")
    base = load_config("base")
    cfg = load_config(preset_name(row))
    bm, rm = _resolved_model(base), _resolved_model(cfg)
    model = {f: getattr(rm, f) for f in _MODEL_FIELDS if getattr(rm, f) != getattr(bm, f)}
    train = {}
    if cfg.train.label_smoothing != base.train.label_smoothing:
        train["label_smoothing"] = cfg.train.label_smoothing
    return {"model": model, "train": train}


def _scale(small: int, paper_row: int, paper_base: int) -> int:
    return max(1, int(round(small * paper_row / paper_base)))


def scaled_change(row: str, base_config: Config) -> dict:
    """``row``'s change scaled to ``base_config`` (rules in the module docstring):
    ``{"model": {...}, "train": {...}}`` of the fields to set."""
    change = paper_change(row)
    if row == "base":
        return {"model": {}, "train": {}}
    paper = _resolved_model(load_config("base"))
    small = _resolved_model(base_config)
    out: dict = {}
    pm = change["model"]
    if row.startswith("A"):
        heads = max(1, int(round(small.num_heads * pm["num_heads"] / paper.num_heads)))
        if small.d_model % heads:
            raise ConfigError(
                f"row {row}: {heads} heads do not divide model.d_model={small.d_model} of the base config "
                "(Table 3 row A keeps h * d_k = d_model)")
        out.update(num_heads=heads, key_dim=small.d_model // heads, value_dim=small.d_model // heads)
    for field, value in pm.items():
        if field in out:  # row A: heads and d_k = d_v = d_model / h are set above
            continue
        if field in _SCALED:
            out[field] = _scale(getattr(small, field), value, getattr(paper, field))
        else:
            out[field] = value
    return {"model": out, "train": dict(change["train"])}


def row_config(row: str, base_config: Config) -> Config:
    """A copy of ``base_config`` with ``row``'s scaled change applied (validated; named
    ``<base name>+<row>``)."""
    cfg = copy.deepcopy(base_config)
    change = scaled_change(row, base_config)
    if change["model"]:
        # key/value dims made explicit, so that only the row decides whether they change
        model = cfg.model.resolved()
        cfg.model = dataclasses.replace(model, **change["model"])
    if change["train"]:
        cfg.train = dataclasses.replace(cfg.train, **change["train"])
    cfg.name = f"{base_config.name or 'config'}+{row}"
    try:
        cfg.validate(require_vocab=False)
    except ConfigError as e:
        raise ConfigError(f"Table 3 row {row} applied to {base_config.name}: {e}") from None
    return cfg


def same_as_earlier(rows, base_config: Config) -> dict:
    """``{row: earlier_row}`` for each of ``rows`` whose scaled config equals an earlier one's (in
    the given order): rounding to a small base can map two of the paper's rows onto one model
    (``N = 2`` and ``4`` of 6 both become ``N = 1`` of 2), or a row onto ``base`` itself."""
    seen: dict = {}
    same = {}
    for row in rows:
        cfg = row_config(row, base_config)
        key = repr((dataclasses.asdict(cfg.model.resolved()), dataclasses.asdict(cfg.train)))
        if key in seen:
            same[row] = seen[key]
        else:
            seen[key] = row
    return same


def describe_change(row: str, base_config: Optional[Config] = None) -> str:
    """Our (scaled) change in the paper's notation, e.g. ``"h=1, d_k=d_v=256"``."""
    if row == "base":
        return "small base"
    change = scaled_change(row, base_config) if base_config is not None else paper_change(row)
    m, t = change["model"], change["train"]
    parts = []
    if "num_heads" in m:
        parts.append(f"h={m['num_heads']}")
    if "num_layers" in m:
        parts.append(f"N={m['num_layers']}")
    if "d_model" in m:
        parts.append(f"d_model={m['d_model']}")
    if "key_dim" in m and "value_dim" in m and m["key_dim"] == m["value_dim"]:
        parts.append(f"d_k=d_v={m['key_dim']}")
    else:
        if "key_dim" in m:
            parts.append(f"d_k={m['key_dim']}")
        if "value_dim" in m:
            parts.append(f"d_v={m['value_dim']}")
    if "d_ff" in m:
        parts.append(f"d_ff={m['d_ff']}")
    if "dropout" in m:
        parts.append(f"P_drop={m['dropout']:g}")
    if "label_smoothing" in t:
        parts.append(f"eps_ls={t['label_smoothing']:g}")
    if "position_encoding" in m:
        parts.append(f"{m['position_encoding']} positions")
    return ", ".join(parts)


def paper_figures(row: str) -> dict:
    """``{"change", "ppl", "bleu", "params"}`` of the paper for ``row`` (params ``None``
    where the paper leaves it blank: equal to base's)."""
    name = preset_name(row)
    ppl, bleu, params = TABLE3[name]
    return {"change": CHANGES[name] if row != "base" else "base", "ppl": ppl, "bleu": bleu, "params": params}
