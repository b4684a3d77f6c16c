"""A tiny model and vocabulary for tests and for checking the benchmark script.

``make_tiny_assets(directory)`` writes ``tiny_spm.model`` (a SentencePiece BPE vocabulary
of 48 pieces over a toy English-like corpus) and ``tiny.keras`` (a 1+1-layer Transformer
with d_model 32, trained for a few seconds to *copy* its input) and returns their paths.
Its "translations" are imperfect copies of varied lengths: enough to exercise batching,
EOS handling, length limits, BLEU and export with real, non-trivial outputs. Files
already in ``directory`` are reused, so a test session trains it once.

tests/conftest.py makes :func:`session_tiny_assets` and :func:`load_tiny` the fixtures
``assets`` (``(model_path, vocab_path)``) and ``tiny`` (``(model, tokenizer)``) of every test
module. This module does not import pytest (tools/bench/decode_throughput.py --tiny uses it).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

WORDS = [
    "a", "dog", "cat", "man", "woman", "boy", "girl", "runs", "sits", "walks", "plays",
    "in", "on", "the", "park", "street", "with", "red", "blue", "ball", "water", "grass",
]


def toy_sentences(n: int = 400, seed: int = 0) -> list:
    """``n`` random sentences of 2-9 words from a 22-word vocabulary, ending in a period."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) + "." for _ in range(n)]


def make_tiny_assets(directory, vocab_size: int = 48, d_model: int = 32, max_length: int = 64,
                     train_sentences: int = 1000, epochs: int = 5, seed: int = 1):
    """Write (or reuse) a tiny copy model and its vocabulary; returns ``(model_path, vocab_path)``."""
    directory = Path(directory)
    model_path, vocab_path = directory / "tiny.keras", directory / "tiny_spm.model"
    if model_path.exists() and vocab_path.exists():
        return str(model_path), str(vocab_path)

    import keras
    import numpy as np

    from tf_transformer.data.tokenizer import (
        BOS_ID,
        EOS_ID,
        Tokenizer,
        train_sentencepiece,
    )
    from tf_transformer.model import Transformer

    directory.mkdir(parents=True, exist_ok=True)
    proto = train_sentencepiece(iter(toy_sentences()), vocab_size, "bpe", 1.0)
    tok = Tokenizer(proto)
    ids = tok.encode(toy_sentences(train_sentences, seed=seed + 2))
    width = max(map(len, ids)) + 1
    src = np.zeros((len(ids), width), "int32")
    tgt_in = np.zeros_like(src)
    tgt_out = np.zeros_like(src)
    for i, s in enumerate(ids):
        src[i, : len(s)] = s
        tgt_in[i, 0] = BOS_ID
        tgt_in[i, 1: len(s) + 1] = s
        tgt_out[i, : len(s)] = s
        tgt_out[i, len(s)] = EOS_ID
    keras.utils.set_random_seed(seed)
    model = Transformer(vocab_size=vocab_size, d_model=d_model, num_layers=1, num_heads=2, d_ff=2 * d_model,
                        dropout=0.0, max_length=max_length)
    model.compile(optimizer=keras.optimizers.Adam(3e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0))
    model.fit((src, tgt_in), tgt_out, batch_size=64, epochs=epochs, verbose=0, shuffle=True)
    tmp_model = directory / f"tiny.{os.getpid()}.keras"
    model.save(os.fspath(tmp_model))
    vocab_tmp = directory / f"tiny_spm.{os.getpid()}.model"
    vocab_tmp.write_bytes(proto)
    os.replace(vocab_tmp, vocab_path)
    os.replace(tmp_model, model_path)
    return str(model_path), str(vocab_path)



#: The session's copy, in pytest's base temporary directory: every test module that asks shares it.
SESSION_DIR = "tft_tiny_copy_model"


def session_tiny_assets(tmp_path_factory):
    """:func:`make_tiny_assets` of the test session (trained by the first module that asks);
    ``tmp_path_factory``: pytest's fixture. Returns ``(model_path, vocab_path)``."""
    return make_tiny_assets(tmp_path_factory.getbasetemp() / SESSION_DIR)


def load_tiny(assets):
    """``(model, tokenizer)`` from the paths :func:`make_tiny_assets` returns, the tokenizer
    checked against the model."""
    from tf_transformer.decoding.translator import load_tokenizer
    from tf_transformer.io import load_model

    model = load_model(assets[0])
    return model, load_tokenizer(assets[1], model)
