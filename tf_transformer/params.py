"""Parameter counts of presets beside the paper's Table 3 column (behind ``tft params``).

Each model is really built (its weights created) and its weights counted; nothing is
estimated. The paper does not say how it counted; see the README's "Parameter counts".
"""

from __future__ import annotations

import dataclasses

from tf_transformer.config import list_presets, load_config
from tf_transformer.paper import CHANGES, TABLE3


def count_preset(name: str, vocab_size: int = 37000) -> int:
    """Parameters of preset ``name`` with a shared vocabulary of ``vocab_size``."""
    import keras

    from tf_transformer.model import Transformer, count_parameters

    cfg = load_config(name)
    model_cfg = dataclasses.replace(cfg.model, vocab_size=vocab_size)
    keras.backend.clear_session()
    model = Transformer.from_config_section(model_cfg)
    model.build()
    return count_parameters(model)


def table(names=None, vocab_size: int = 37000):
    """Rows ``(name, change, ours_millions, paper_millions, ours - base, paper - base)``."""
    names = names or [n for n in list_presets() if n in TABLE3]
    counts = {n: count_preset(n, vocab_size) for n in dict.fromkeys(["base"] + list(names))}
    base_ours, base_paper = counts["base"] / 1e6, TABLE3["base"][2]
    rows = []
    for n in names:
        ours = counts[n] / 1e6
        paper = TABLE3[n][2]
        rows.append((n, CHANGES[n], ours, paper, ours - base_ours,
                     None if paper is None else paper - base_paper))
    return rows


def format_table(rows, vocab_size: int) -> str:
    lines = [f"Parameters at a shared vocabulary of {vocab_size:,} (M = millions)", "",
             "| preset | change | ours (M) | paper (M) | ours - base | paper - base |",
             "|---|---|---:|---:|---:|---:|"]
    for n, change, ours, paper, d_ours, d_paper in rows:
        p = "" if paper is None else f"{paper}"
        dp = "" if d_paper is None else f"{d_paper:+d}"
        lines.append(f"| {n} | {change} | {ours:.1f} | {p} | {d_ours:+.1f} | {dp} |")
    return "\n".join(lines)
