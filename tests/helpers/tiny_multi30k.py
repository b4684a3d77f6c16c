"""A tiny slice of the bundled Multi30k and config overrides for fast tuner/ablation runs.

``tiny_overrides(directory)`` writes the first few hundred training pairs (and a few
validation/test pairs) of the bundled Multi30k as plain text files and returns
``section.field=value`` overrides that point ``multi30k_small`` at them with a small
vocabulary, a d_model 32 model and small batches: a search trial or an ablation row then
takes seconds. Translations are gibberish; only the plumbing is real.
"""

from __future__ import annotations

import gzip
from pathlib import Path


def _head(path: Path, n: int) -> list:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        out = []
        for line in f:
            out.append(line.rstrip("\n"))
            if len(out) == n:
                break
        return out


def tiny_overrides(directory, train: int = 300, valid: int = 30, test: int = 20, d_model: int = 32) -> list:
    """Write ``train``/``valid``/``test`` pairs under ``directory``; return config overrides."""
    from tf_transformer.data.sources import MULTI30K_FILES, bundled_multi30k_dir

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    overrides = []
    for split, n in (("train", train), ("valid", valid), ("test", test)):
        for side, lang in (("source", "en"), ("target", "de")):
            name = MULTI30K_FILES[split]
            path = directory / f"{name}.{lang}"
            path.write_text("\n".join(_head(bundled_multi30k_dir() / f"{name}.{lang}.gz", n)) + "\n",
                            encoding="utf-8")
            overrides.append(f"data.{split}_{side}={path}")
    overrides += [
        "data.source=text", "data.vocab_size=300", "data.tokens_per_batch=400", "data.max_length=40",
        "data.shuffle_buffer=1000", "model.vocab_size=null", f"model.d_model={d_model}", f"model.d_ff={2 * d_model}",
        "model.num_layers=2", "model.max_length=64", "train.warmup_steps=10", "train.strategy=default",
        "decode.batch_size=32",
    ]
    return overrides
