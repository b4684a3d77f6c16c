"""Token-budget batches of sentence pairs, built in the ``tf.data`` graph.

``make_dataset`` turns a split into batches for ``model.fit``::

    ((source_ids [B, S], target_input_ids [B, T]), target_output_ids [B, T])   # int32, 0 = pad
    target_input  = BOS y_1 ... y_n        (decoder input, shifted right)
    target_output = y_1 ... y_n EOS        (labels)
    source        = x_1 ... x_m            (no BOS/EOS on the encoder side)

Steps, all graph ops (no per-example Python):

1. raw string pairs (``sources.pair_dataset``), sharded per input pipeline when an
   ``input_context`` is given (multi-worker training);
2. tokenize 512 pairs at a time with ``tensorflow_text.SentencepieceTokenizer`` (invalid
   UTF-8 replaced first when ``data.invalid_utf8: replace``);
3. drop empty pairs (either side without tokens) and over-long pairs (source longer than
   ``data.max_length`` tokens or target longer than ``max_length - 1``, so that
   ``BOS + y`` and ``y + EOS`` fit in ``max_length``);
4. ``data.cache: true``: keep the tokenized pairs in memory after the first pass (small
   corpora such as Multi30k; later epochs skip steps 1-3);
5. training only: shuffle with ``seed`` (``data.shuffle_buffer`` pairs; a new order every
   epoch, the same sequence of orders for the same seed) and repeat forever (a Keras
   "epoch" is ``train.steps_per_epoch`` updates);
6. group into buckets by (source length, target length): both sides of a batch have
   similar lengths. Bucket upper bounds are 2, 4, ..., 64 tokens, then 10% wider each up
   to ``max_length`` (``data.bucket_width: k`` gives k, 2k, 3k, ... instead). A bucket
   whose longest source or target may have ``L`` tokens emits batches of
   ``budget // L`` rows, so each side of a batch has at most ``budget`` slots, padding
   included; short sentences give the most rows. Two-dimensional buckets keep the
   padding low on *both* sides (one-dimensional buckets by ``max(src, tgt)`` waste
   about 12% of the source slots on Multi30k). Their cost: pairs wait in partly filled
   buckets, delayed but not lost (tools/bench/input_pipeline.py measures how many);
7. pad with 0 to the longest row of the batch, split the target into input and label,
   prefetch.

``budget`` is ``data.tokens_per_batch`` (the paper: 25,000 over all replicas) divided by
``input_context.num_replicas_in_sync`` when an input context is given (each replica
gets its share). Evaluation (``training=False``) reads the split once, in file order,
without shuffling, and uses a few coarse one-dimensional buckets by ``max(src, tgt)``
(8 tokens, then 25% wider each), so that a pass ends with few partial batches (10
batches for Multi30k's 1,014 validation pairs at 4,096 tokens).

Before building the pipeline, ``make_dataset`` runs one counting pass over the split
(``data.stats_pass``, also :func:`dataset_statistics`) and prints a one-line summary
of pairs read, kept and dropped by reason to stderr.
"""

from __future__ import annotations

import dataclasses
import hashlib
import sys
from dataclasses import dataclass

from tf_transformer.config import ConfigError
from tf_transformer.data import sources
from tf_transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tf_transformer.errors import DataError

_TOKENIZE_BATCH = 512
_STATS_BATCH = 2048


def bucket_bounds(max_length: int, bucket_width: int = 0) -> list[int]:
    """Inclusive upper bounds of the length buckets, ascending, the last one ``max_length``."""
    if max_length < 1:
        raise ConfigError(f"data.max_length={max_length} must be > 0")
    if bucket_width > 0:
        bounds = list(range(bucket_width, max_length, bucket_width))
    else:
        bounds = list(range(2, min(64, max_length), 2))
        x = bounds[-1] if bounds else 1
        while True:
            x = max(x + 1, int(x * 1.1))
            if x >= max_length:
                break
            bounds.append(x)
    bounds.append(max_length)
    return bounds


def eval_bucket_bounds(max_length: int) -> list[int]:
    """Coarse 1-D buckets for one evaluation pass: 8 tokens, then 25% wider each."""
    bounds = []
    x = 8
    while x < max_length:
        bounds.append(x)
        x = max(x + 1, int(x * 1.25))
    return bounds + [max_length]


def bucket_rows(bounds: list[int], budget: int) -> list[list[int]]:
    """``rows[i][j]``: batch rows for source bucket ``i`` and target bucket ``j``."""
    return [[max(1, budget // max(a, b)) for b in bounds] for a in bounds]


def per_replica_budget(data_config, input_context=None) -> int:
    cfg = sources.data_section(data_config)
    budget = cfg.tokens_per_batch
    if input_context is not None:
        budget //= max(1, int(input_context.num_replicas_in_sync))
        if budget < cfg.max_length:
            raise ConfigError(
                f"data.tokens_per_batch={cfg.tokens_per_batch} over "
                f"{input_context.num_replicas_in_sync} replicas leaves {budget} per replica, "
                f"less than data.max_length={cfg.max_length}"
            )
    return budget


# ---------------------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------------------


@dataclass
class DataStats:
    """What reading a split kept and dropped. Token counts are of the kept pairs, with the
    target counted as ``len(y) + 1`` (the length of the decoder input and of the labels)."""

    split: str
    origin: str
    pairs: int
    kept: int | None = None
    dropped_empty: int | None = None
    dropped_too_long: int | None = None
    invalid_utf8_replaced: int = 0
    source_tokens: int | None = None
    target_tokens: int | None = None
    max_source_length: int | None = None
    max_target_length: int | None = None
    max_length: int = 0
    shard: str | None = None  # "i/n" for a sharded input pipeline

    def summary(self) -> str:
        where = f"data {self.split}"
        if self.shard:
            where += f" shard {self.shard}"
        text = f"{where}: read {self.pairs:,} pairs from {self.origin}"
        if self.kept is None:
            text += "; empty and over-long pairs are dropped but not counted (data.stats_pass=false)"
        else:
            text += (
                f"; kept {self.kept:,}; dropped {self.dropped_empty:,} empty, "
                f"{self.dropped_too_long:,} longer than {self.max_length} tokens"
            )
        if self.invalid_utf8_replaced:
            text += f"; {self.invalid_utf8_replaced:,} lines with invalid UTF-8 replaced (U+FFFD)"
        if self.kept is not None:
            text += f"; {self.source_tokens:,} source + {self.target_tokens:,} target tokens kept"
        return text

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


_STATS_CACHE: dict = {}


def _shard(ds, input_context):
    if input_context is not None and input_context.num_input_pipelines > 1:
        return ds.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    return ds


def _tokenize_pairs(tokenizer, replace_invalid: bool):
    """Batched graph function: string pairs -> (ragged source ids, ragged BOS+y+EOS)."""
    import tensorflow as tf

    def fn(src, tgt):
        if replace_invalid:
            src = tf.strings.unicode_transcode(src, "UTF-8", "UTF-8", errors="replace")
            tgt = tf.strings.unicode_transcode(tgt, "UTF-8", "UTF-8", errors="replace")
        s = tokenizer.tokenize(src)
        y = tokenizer.tokenize(tgt)
        n = tf.shape(src, out_type=tf.int64)[0]
        bos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], tf.constant(BOS_ID, tf.int32)))
        eos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], tf.constant(EOS_ID, tf.int32)))
        return s, tf.concat([bos, y, eos], axis=1)

    return fn


def _keep_mask(src_len, tgt_full_len, max_length):
    """Which pairs survive: both sides non-empty, both within ``max_length``."""
    import tensorflow as tf

    nonempty = (src_len > 0) & (tgt_full_len > 2)
    fits = (src_len <= max_length) & (tgt_full_len - 1 <= max_length)
    return nonempty, tf.logical_and(nonempty, fits)


def _stats_key(cfg, split, tokenizer, input_context):
    fields = dataclasses.asdict(cfg)
    relevant = {k: fields[k] for k in fields if not k.startswith(("shuffle", "seed", "tokens_per", "bucket"))}
    files = []
    if cfg.source != "tfds":
        for p in sources.split_files(cfg, split):
            st = p.stat()
            files.append((str(p.resolve()), st.st_size, st.st_mtime_ns))
    shard = None
    if input_context is not None:
        shard = (input_context.input_pipeline_id, input_context.num_input_pipelines)
    digest = hashlib.sha256(tokenizer.model_proto).hexdigest()
    return repr((sorted(relevant.items()), split, files, digest, shard))


def dataset_statistics(data_config, split: str, tokenizer, input_context=None) -> DataStats:
    """Count pairs read, kept, dropped (empty / over-long) and lines with invalid UTF-8.

    One pass over the split in the graph (tokenizing in batches; it grows with the corpus:
    set ``data.stats_pass: false`` to skip it on large corpora). Results
    are cached for the process. With ``data.invalid_utf8: error`` a TFDS example with
    invalid UTF-8 raises :class:`DataError` (text files are checked before, with line
    numbers).
    """
    import tensorflow as tf

    cfg = sources.data_section(data_config)
    key = _stats_key(cfg, split, tokenizer, input_context)
    if key in _STATS_CACHE:
        return dataclasses.replace(_STATS_CACHE[key])
    pairs_ds, _, _ = sources.pair_dataset(cfg, split)
    pairs_ds = _shard(pairs_ds, input_context)
    tokenize = _tokenize_pairs(tokenizer, replace_invalid=cfg.invalid_utf8 == "replace")
    max_length = cfg.max_length

    def count(src, tgt):
        bad_src = tf.strings.unicode_transcode(src, "UTF-8", "UTF-8", errors="replace") != src
        bad_tgt = tf.strings.unicode_transcode(tgt, "UTF-8", "UTF-8", errors="replace") != tgt
        s, t = tokenize(src, tgt)
        s_len = tf.cast(s.row_lengths(), tf.int64)
        t_len = tf.cast(t.row_lengths(), tf.int64) - 1  # len(y) + 1
        nonempty, keep = _keep_mask(s_len, t_len + 1, max_length)

        def total(x):
            return tf.reduce_sum(tf.cast(x, tf.int64))

        zero = tf.zeros_like(s_len)
        sums = tf.stack([
            tf.size(src, out_type=tf.int64),
            total(bad_src) + total(bad_tgt),
            total(tf.logical_not(nonempty)),
            total(nonempty & tf.logical_not(keep)),
            total(keep),
            total(tf.where(keep, s_len, zero)),
            total(tf.where(keep, t_len, zero)),
        ])
        maxes = tf.stack([
            tf.reduce_max(tf.where(keep, s_len, zero)),
            tf.reduce_max(tf.where(keep, t_len, zero)),
        ])
        return sums, maxes

    ds = pairs_ds.batch(_STATS_BATCH).map(count, num_parallel_calls=tf.data.AUTOTUNE)
    init = (tf.zeros([7], tf.int64), tf.zeros([2], tf.int64))
    sums, maxes = ds.reduce(init, lambda acc, x: (acc[0] + x[0], tf.maximum(acc[1], x[1])))
    sums = [int(v) for v in sums.numpy()]
    maxes = [int(v) for v in maxes.numpy()]
    n, invalid, empty, too_long, kept, s_tok, t_tok = sums
    if invalid and cfg.invalid_utf8 == "error":  # only TFDS gets here: files were scanned
        raise DataError(
            f"{sources.describe(cfg, split)}: {invalid:,} texts are not valid UTF-8; "
            "set data.invalid_utf8=replace to replace bad bytes with U+FFFD"
        )
    shard = None
    if input_context is not None and input_context.num_input_pipelines > 1:
        shard = f"{input_context.input_pipeline_id}/{input_context.num_input_pipelines}"
    stats = DataStats(
        split=split,
        origin=sources.describe(cfg, split),
        pairs=n,
        kept=kept,
        dropped_empty=empty,
        dropped_too_long=too_long,
        invalid_utf8_replaced=invalid,
        source_tokens=s_tok,
        target_tokens=t_tok,
        max_source_length=maxes[0],
        max_target_length=maxes[1],
        max_length=max_length,
        shard=shard,
    )
    _STATS_CACHE[key] = stats
    return dataclasses.replace(stats)


# ---------------------------------------------------------------------------------------
# The training / evaluation pipeline
# ---------------------------------------------------------------------------------------


def make_dataset(
    data_config,
    split: str,
    tokenizer,
    training: bool = True,
    input_context=None,
    seed: int | None = None,
    repeat: bool | None = None,
    verbose: bool = True,
    skip: int = 0,
):
    """Token-budget batches ``((source_ids, target_input_ids), target_output_ids)``.

    Args:
        data_config: ``cfg.data`` (a ``DataConfig``) or the whole ``Config``.
        split: ``"train"``, ``"valid"`` or ``"test"``.
        tokenizer: a :class:`~tf_transformer.data.Tokenizer`.
        training: shuffle (with ``seed``) and, unless ``repeat=False``, repeat forever.
            ``False``: one pass in file order.
        input_context: a ``tf.distribute.InputContext`` (from
            ``strategy.distribute_datasets_from_function``): read shard
            ``input_pipeline_id`` of ``num_input_pipelines`` and batch to the
            per-replica budget ``tokens_per_batch // num_replicas_in_sync``.
        seed: shuffle seed; ``None`` = ``data.seed``. The same seed gives the same batches.
        repeat: repeat forever; ``None`` = ``training``.
        verbose: print the one-line reading summary to stderr.
        skip: leave out the first ``skip`` batches (before padding): the same stream from
            batch ``skip`` on. Resuming a run skips the batches it has trained on.

    Returns:
        a ``tf.data.Dataset`` of int32 tensors, shapes ``[B, S]``, ``[B, T]``, ``[B, T]``;
        each side of a batch has at most ``budget`` slots (``B * S <= budget``,
        ``B * T <= budget``).
    """
    import tensorflow as tf

    cfg = sources.data_section(data_config)
    if split not in sources.SPLITS:
        raise DataError(f"split {split!r} is not one of {', '.join(sources.SPLITS)}")
    seed = cfg.seed if seed is None else int(seed)
    repeat = training if repeat is None else repeat
    budget = per_replica_budget(cfg, input_context)
    if training:
        bounds = bucket_bounds(cfg.max_length, cfg.bucket_width)
        rows = bucket_rows(bounds, budget)
    else:
        bounds = eval_bucket_bounds(cfg.max_length)
        rows = [[max(1, budget // b) for b in bounds]]
    nb = len(bounds)

    pairs, n_pairs, replaced = sources.pair_dataset(cfg, split, shuffle_files=training, seed=seed)
    if cfg.stats_pass:
        stats = dataset_statistics(cfg, split, tokenizer, input_context)
    else:
        stats = DataStats(split, sources.describe(cfg, split), n_pairs,
                          invalid_utf8_replaced=replaced or 0, max_length=cfg.max_length)
    if verbose:
        print(stats.summary(), file=sys.stderr, flush=True)

    pairs = _shard(pairs, input_context)
    tokenize = _tokenize_pairs(tokenizer, replace_invalid=cfg.invalid_utf8 == "replace")
    bounds_t = tf.constant(bounds, tf.int64)
    rows_t = tf.constant(rows, tf.int64)
    max_length = cfg.max_length

    def tokenize_and_filter(src, tgt):
        s, t = tokenize(src, tgt)
        s_len = tf.cast(s.row_lengths(), tf.int64)
        t_len = tf.cast(t.row_lengths(), tf.int64) - 1  # length of BOS+y and of y+EOS
        _, keep = _keep_mask(s_len, t_len + 1, max_length)
        s = tf.ragged.boolean_mask(s, keep)
        t = tf.ragged.boolean_mask(t, keep)
        s_len = tf.boolean_mask(s_len, keep)
        t_len = tf.boolean_mask(t_len, keep)
        if training:  # 2-D buckets: (source length, target length)
            s_bucket = tf.searchsorted(bounds_t, s_len, side="left", out_type=tf.int64)
            t_bucket = tf.searchsorted(bounds_t, t_len, side="left", out_type=tf.int64)
            return s, t, s_bucket * nb + t_bucket
        # evaluation: few 1-D buckets by the longer side, so few partial batches
        return s, t, tf.searchsorted(bounds_t, tf.maximum(s_len, t_len), side="left", out_type=tf.int64)

    ds = pairs.batch(_TOKENIZE_BATCH)
    ds = ds.map(tokenize_and_filter, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.unbatch()
    if cfg.cache:
        ds = ds.cache()  # tokenized pairs, kept in memory after the first pass
    if training:
        ds = ds.shuffle(cfg.shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()

    def window_size(key):
        return tf.gather(tf.reshape(rows_t, [-1]), key)

    def to_batches(key, window):
        # unbatched rows are (rank-0-ragged) RaggedTensors: batch them ragged, pad once per batch
        return window.ragged_batch(window_size(key))

    ds = ds.group_by_window(lambda s, t, k: k, to_batches, window_size_func=window_size)
    if skip:
        ds = ds.skip(int(skip))

    def split_target(src, tgt_full, key):
        src = src.to_tensor(PAD_ID)
        tgt_full = tgt_full.to_tensor(PAD_ID)
        tgt_in = tgt_full[:, :-1]
        tgt_in = tf.where(tgt_in == EOS_ID, tf.zeros_like(tgt_in), tgt_in)  # EOS of shorter rows
        return (src, tgt_in), tgt_full[:, 1:]

    ds = ds.map(split_target, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.OFF
        if input_context is not None
        else tf.data.experimental.AutoShardPolicy.DATA
    )
    return ds.with_options(options)


def batch_statistics(batches) -> dict:
    """Padding efficiency and tokens per batch of an iterable of NumPy batches
    ``((src, tgt_in), tgt_out)``: used by tests and ``tools/bench/input_pipeline.py``."""
    import numpy as np

    src_real = src_slots = tgt_real = tgt_slots = 0
    per_batch_src, per_batch_tgt, rows = [], [], []
    for (src, tgt_in), tgt_out in batches:
        src, tgt_out = np.asarray(src), np.asarray(tgt_out)
        s_real = int((src != PAD_ID).sum())
        t_real = int((tgt_out != PAD_ID).sum())
        src_real += s_real
        tgt_real += t_real
        src_slots += src.size
        tgt_slots += tgt_out.size
        per_batch_src.append(s_real)
        per_batch_tgt.append(t_real)
        rows.append(src.shape[0])
    if not rows:
        raise ValueError("no batches")
    return {
        "batches": len(rows),
        "pairs": int(sum(rows)),
        "source_tokens": src_real,
        "target_tokens": tgt_real,
        "source_efficiency": src_real / src_slots,
        "target_efficiency": tgt_real / tgt_slots,
        "efficiency": (src_real + tgt_real) / (src_slots + tgt_slots),
        "source_tokens_per_batch": (min(per_batch_src), float(np.mean(per_batch_src)), max(per_batch_src)),
        "target_tokens_per_batch": (min(per_batch_tgt), float(np.mean(per_batch_tgt)), max(per_batch_tgt)),
        "rows_per_batch": (min(rows), float(np.mean(rows)), max(rows)),
    }
