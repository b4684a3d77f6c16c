"""Parameter counts of presets beside the paper's Table 3 column (behind ``tft params``).

Each model is really built (its weights created) and its weights counted; nothing is
estimated. The paper does not say how it counted; see the README's "Parameter counts".
Presets outside Table 3 (``multi30k_small``) and YAML files are counted too, with the
paper's columns left blank.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

from tf_transformer.config import list_presets, load_config
from tf_transformer.paper import CHANGES, TABLE3


def count_preset(name: str, vocab_size: int = 37000) -> int:
    """Parameters of preset (or YAML file) ``name`` with a shared vocabulary of ``vocab_size``."""
    import keras

    from tf_transformer.model import Transformer, count_parameters

    cfg = load_config(name)
    model_cfg = dataclasses.replace(cfg.model, vocab_size=vocab_size)
    keras.backend.clear_session()
    model = Transformer.from_config_section(model_cfg)
    model.build()
    return count_parameters(model)


def _change(name: str, cfg_model=None) -> str:
    if name in CHANGES:
        return CHANGES[name]
    m = cfg_model.resolved()
    return (f"d_model={m.d_model}, N={m.num_layers}, h={m.num_heads}, d_k={m.key_dim}, d_v={m.value_dim}, "
            f"d_ff={m.d_ff}")


def table(names=None, vocab_size: int = 37000, log: Optional[Callable[[str], None]] = None):
    """Rows ``(name, change, ours_millions, paper_millions or None, ours - base, paper - base or None)``.

    ``names``: preset names or YAML paths (default: base, big and every Table 3 row); ``log``
    is told about each model before it is built (building ``big`` takes a while)."""
    names = list(names or [n for n in list_presets() if n in TABLE3])
    for n in names:
        load_config(n)  # every name fails fast, before the first (slow) model is built
    todo = list(dict.fromkeys(["base"] + names))
    counts = {}
    for i, n in enumerate(todo, 1):
        if log is not None:
            log(f"building {n} ({i}/{len(todo)})")
        counts[n] = count_preset(n, vocab_size)
    base_ours, base_paper = counts["base"] / 1e6, TABLE3["base"][2]
    rows = []
    for n in names:
        ours = counts[n] / 1e6
        paper = TABLE3[n][2] if n in TABLE3 else None
        change = _change(n, None if n in CHANGES else load_config(n).model)
        rows.append((n, change, ours, paper, ours - base_ours, None if paper is None else paper - base_paper))
    return rows


def format_table(rows, vocab_size: int) -> str:
    """The rows as a markdown table: in millions, or, when a model has under a million
    parameters (a tiny config's 0.03M would read 0.0), as exact counts."""
    exact = min((r[2] for r in rows), default=1.0) < 1.0
    unit = "parameters" if exact else "M"

    def count(x, sign=""):
        return f"{round(x * 1e6):{sign},}" if exact else f"{x:{sign}.1f}"

    lines = [f"Parameters at a shared vocabulary of {vocab_size:,} ({'exact counts' if exact else 'M = millions'})",
             "", f"| preset | change | ours ({unit}) | paper (M) | ours - base | paper - base |",
             "|---|---|---:|---:|---:|---:|"]
    for n, change, ours, paper, d_ours, d_paper in rows:
        p = "" if paper is None else f"{paper}"
        dp = "" if d_paper is None else f"{d_paper:+d}"
        lines.append(f"| {n} | {change} | {count(ours)} | {p} | {count(d_ours, '+')} | {dp} |")
    return "\n".join(lines)
