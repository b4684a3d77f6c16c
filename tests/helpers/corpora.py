"""Tiny parallel corpora written to disk for end-to-end tests of the real data pipeline."""

from pathlib import Path

import numpy as np

WORDS_EN = ["a", "man", "dog", "runs", "the", "woman", "sees", "red", "ball", "on", "grass", "child"]
WORDS_DE = ["ein", "mann", "hund", "läuft", "der", "frau", "sieht", "rot", "ball", "auf", "gras", "kind"]


def write_tiny_parallel_corpus(directory, sizes=(("train", 300), ("valid", 20)), seed=0) -> Path:
    """``<split>.en`` / ``<split>.de`` files of 3-7 random words, word-for-word translations."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in sizes:
        idx = [rng.integers(0, len(WORDS_EN), size=rng.integers(3, 8)) for _ in range(n)]
        (directory / f"{split}.en").write_text("\n".join(" ".join(WORDS_EN[i] for i in s) for s in idx) + "\n")
        (directory / f"{split}.de").write_text("\n".join(" ".join(WORDS_DE[i] for i in s) for s in idx) + "\n")
    return directory


#: the bundled Multi30k's files, ``<split>.<lang>``
BUNDLED_FILES = [f"{split}.{lang}" for split in ("train", "val", "test2016") for lang in ("en", "de")]


def bundled_lines(name: str) -> list[str]:
    """The lines of the bundled Multi30k file ``name`` (``"train.de"``, ...), newlines removed."""
    import gzip

    from tf_transformer.data.sources import bundled_multi30k_dir

    with gzip.open(bundled_multi30k_dir() / f"{name}.gz", "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
