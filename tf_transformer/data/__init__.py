"""Input side of the recipe (paper section 5.1): the shared SentencePiece vocabulary,
in-graph tokenization, token-budget batches, and the text / Multi30k / TFDS sources.

::

    from tf_transformer.data import Tokenizer, make_dataset, read_parallel_text
    tok = Tokenizer(cfg.data.vocab_model)
    ds = make_dataset(cfg.data, "train", tok, training=True)
    ds = make_dataset((sources, targets), tokenizer=tok, tokens_per_batch=2048)   # own pairs, no config
    # ((source_ids [B,S], target_input_ids [B,T]), target_output_ids [B,T]), int32, 0 = pad
    sources, targets = read_parallel_text(cfg.data, "test")

Sharded corpora: each ``data.<split>_source``/``_target`` is a path, a glob or a list;
``prepare`` (``tft prepare``) writes tokenized, shuffled TFRecord shards that
``data.source: prepared`` streams. Ids: pad 0, unk 1, bos 2, eos 3 (see ``tokenizer``).
Names are imported on first use, so ``import tf_transformer.data`` (and ``tft build-vocab``)
does not load TensorFlow.
"""

from __future__ import annotations

from tf_transformer._lazy import lazy_exports

_EXPORTS = {
    "Tokenizer": "tokenizer",
    "build_vocab": "tokenizer",
    "resolve_vocabulary": "tokenizer",
    "PAD_ID": "tokenizer",
    "UNK_ID": "tokenizer",
    "BOS_ID": "tokenizer",
    "EOS_ID": "tokenizer",
    "make_dataset": "pairs",
    "pairs_config": "pairs",
    "dataset_statistics": "batching",
    "batch_statistics": "batching",
    "DataStats": "batching",
    "read_parallel_text": "sources",
    "split_files": "sources",
    "split_file_pairs": "sources",
    "prepare": "prepared",
}

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "DataStats",
    "Tokenizer",
    "batch_statistics",
    "build_vocab",
    "dataset_statistics",
    "make_dataset",
    "pairs_config",
    "prepare",
    "read_parallel_text",
    "resolve_vocabulary",
    "split_file_pairs",
    "split_files",
]

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
