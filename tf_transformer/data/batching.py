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
   buckets; a bucket that receives less than two batches' worth of pairs per epoch would
   hold them for epochs and fill with the copies of later epochs, so the counting pass
   counts pairs by length and :func:`bucket_plan` lets such buckets share coarser ones
   (by the longer side; see :class:`BucketPlan`). Without counts (``data.stats_pass:
   false``, prepared corpora) every bucket keeps its own batches;
7. pad with 0 to the longest row of the batch, split the target into input and label,
   prefetch.

``data.batching: sorted_chunks`` replaces steps 5-6 for training on large corpora: the
pairs are cut into chunks of ``data.shuffle_buffer`` pairs (per pipeline), each chunk is
sorted by (1-D bucket of the longer side, target length, random tie-break) and cut into
batches by one vectorised graph function per chunk, run in parallel over chunks; the
chunk's batches come out in random order and are taken in turn from 4 consecutive
chunks (no buffer to fill first). Steps 5-6 cost tens of microseconds per *pair* in one thread per pipeline;
this costs that per *batch*, so one pipeline's serial work no longer bounds throughput.
The first 16 chunks are 1/16 of the size, so training starts after a sixteenth of a
chunk is tokenized.

``data.batching: source_sorted`` uses the same chunks but batches them as fairseq does: each
chunk is sorted by exact source length, then target length (random tie-break), and cut
greedily, a batch taking pairs while ``rows * (its longest side)`` stays within the budget.
Sources of a batch share one length (or neighbouring ones), target lengths run through the
range that follows in the sorted order. On Multi30k at 8,192 tokens with the whole corpus in
one chunk (``parallel_pipelines: 1``, ``shuffle_buffer: 29000``): 440 pairs and 6,642 target
tokens per batch, 99% of source and 82% of target slots real, where 2-D buckets give 522
pairs, 7,770 target tokens and 96-97% on both sides (tools/bench/input_pipeline.py).

``budget`` is ``data.tokens_per_batch`` (the paper: 25,000 over all replicas) divided by
``input_context.num_replicas_in_sync`` when an input context is given (each replica
gets its share). Evaluation (``training=False``) reads the split once, in file order,
without shuffling, and uses a few coarse one-dimensional buckets by ``max(src, tgt)``
(8 tokens, then 25% wider each), so that a pass ends with few partial batches (10
batches for Multi30k's 1,014 validation pairs at 4,096 tokens).

Before building the pipeline, ``make_dataset`` runs one counting pass over the split
(``data.stats_pass``, also :func:`dataset_statistics`) and prints a one-line summary
of pairs read, kept and dropped by reason to stderr. The pass runs once per corpus: its
result is cached on disk (keyed by the files, the vocabulary and ``max_length``), and a
prepared corpus answers from its manifest.

Scaling with cores: training runs ``data.parallel_pipelines`` copies of steps 1-7 side by
side (default one per core), pipeline ``j`` on its share of the split (whole files when
there are enough, else every ``k``-th pair of the files in one shuffled order, the same for
all) with its own shuffle seed ``seed + 7919 * j``; their
batches are taken in turn (``choose_from_datasets``, deterministic) and each pipeline runs
ahead in its own thread, so the serial stages (unbatch, shuffle, bucketing) run ``k`` at a
time. Under several workers the split is first divided among them (by file, when the split
has at least as many file pairs or TFDS shards as workers), then among the pipelines.
The order of the batches is a function of ``(seed, pipelines, workers)`` (``tft train``
writes the resolved pipeline count into the run's config.yaml, so a resumed run keeps it);
a resumed run skips the batches it has trained on from the combined, deterministic stream.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tf_transformer.config import ConfigError
from tf_transformer.data import prepared, sources
from tf_transformer.data.cache import Progress, cache_dir, disk_cache_get, disk_cache_put, file_identity
from tf_transformer.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tf_transformer.errors import DataError
from tf_transformer.io import say

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


@dataclass
class BucketPlan:
    """Which batch each training pair's 2-D bucket feeds, sized to the corpus.

    ``key[i * nb + j]`` is the window key of source bucket ``i`` and target bucket ``j``;
    ``rows[key]`` the rows of its batches. A bucket that receives at least two batches' worth of
    pairs per epoch (per input pipeline) keeps its own key; a sparser one would hold its pairs
    for several epochs and, its window filling with the copies of later epochs, put the same
    pair into one batch several times. Sparse buckets therefore share a one-dimensional bucket
    by the longer side's bound (whose batches have the same rows, ``budget // max(bounds)``;
    only the shorter side pads more), and such buckets still too sparse to receive two batches'
    worth per epoch are joined with the next longer ones until they do (rows of the longest
    joined bound). (Joining sparse buckets within a target bucket instead, over source
    lengths, kept the target side tighter but gave batches of a long source's rows with short
    targets: a fifth fewer target tokens per batch on Multi30k.)"""

    key: list
    rows: list
    shared_pairs: int = 0  # pairs per epoch (all pipelines) moved out of their own 2-D bucket
    pairs: int = 0

    def describe(self) -> str:
        if not self.shared_pairs:
            return ""
        return (f"{self.shared_pairs:,} of {self.pairs:,} pairs ({100 * self.shared_pairs / max(1, self.pairs):.1f}%) "
                "are in (source, target) length buckets that fill less than two batches per epoch: they share coarser "
                "buckets, so that every pair is trained on about once per epoch")


#: A training bucket keeps its own key when it receives this many batches' worth of pairs per
#: epoch and pipeline: with one, a pipeline's share of a bucket (every k-th pair of the split)
#: falls below a batch by chance often enough to leave pairs waiting for a later epoch.
_FILLS = 2


def bucket_plan(bounds: list[int], budget: int, length_pairs=None, shares: int = 1) -> BucketPlan:
    """The :class:`BucketPlan` of 2-D training buckets for kept pairs counted by ``length_pairs``
    (``[[source length, len(y) + 1, count], ...]`` of the whole split, read by ``shares``
    pipelines together); without counts every bucket keeps its own key."""
    nb = len(bounds)
    rows2d = bucket_rows(bounds, budget)
    key = list(range(nb * nb))
    rows = [r for row in rows2d for r in row]
    if not length_pairs:
        return BucketPlan(key, rows)
    counts = np.zeros((nb, nb), np.float64)
    bounds_a = np.asarray(bounds)
    for s_len, t_len, n in length_pairs:
        counts[np.searchsorted(bounds_a, s_len, side="left"), np.searchsorted(bounds_a, t_len, side="left")] += n
    per_epoch = counts / max(1, shares)

    sparse = [(i, j) for i in range(nb) for j in range(nb) if 0 < per_epoch[i, j] < _FILLS * rows2d[i][j]]
    longer = np.zeros(nb, np.float64)  # sparse buckets' pairs per epoch by the longer side's bucket
    for i, j in sparse:
        longer[max(i, j)] += per_epoch[i, j]
    groups, run, waiting = [], [], 0.0  # runs of consecutive longer-side buckets, shortest first
    for k in np.flatnonzero(longer):
        run.append(int(k))
        waiting += longer[k]
        if waiting >= _FILLS * max(1, budget // bounds[k]):
            groups.append(run)
            run, waiting = [], 0.0
    if run:  # too few for a run of their own: with the longest run (or alone, if there is none)
        if groups:
            groups[-1].extend(run)
        else:
            groups.append(run)
    group_of = {k: g for g, members in enumerate(groups) for k in members}
    for members in groups:
        rows.append(max(1, budget // bounds[max(members)]))
    for i, j in sparse:
        key[i * nb + j] = nb * nb + group_of[max(i, j)]
    shared = int(round(sum(counts[c] for c in sparse)))
    return BucketPlan(key, rows, shared_pairs=shared, pairs=int(counts.sum()))


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
    # kept pairs by (source length, len(y) + 1): [[s, t, count], ...] (the counting pass's; not
    # known for prepared corpora or without data.stats_pass); sizes the training buckets
    length_pairs: list | None = None

    def summary(self) -> str:
        where = f"data {self.split}"
        if self.shard:
            where += f" shard {self.shard}"
        text = f"{where}: read {self.pairs:,} pair{'' if self.pairs == 1 else 's'} from {self.origin}"
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


def resolve_pipelines(data_config) -> int:
    """``data.parallel_pipelines``, 0 resolved to one per CPU core this process may run on
    (its affinity mask, so ``taskset`` and CPU sets count; at most 16)."""
    cfg = sources.data_section(data_config)
    return cfg.parallel_pipelines or max(1, min(16, usable_cores()))


def usable_cores() -> int:
    """CPU cores this process may run on: its affinity mask where the OS has one."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _worker_shard(input_context) -> tuple[int, int]:
    if input_context is not None and input_context.num_input_pipelines > 1:
        return input_context.input_pipeline_id, input_context.num_input_pipelines
    return 0, 1


def _with_bos_eos(s, y):
    """``(source ids, BOS + y + EOS)`` of ragged id batches."""
    import tensorflow as tf

    n = y.nrows(out_type=tf.int64)
    bos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], tf.constant(BOS_ID, tf.int32)))
    eos = tf.RaggedTensor.from_tensor(tf.fill([n, 1], tf.constant(EOS_ID, tf.int32)))
    return s, tf.concat([bos, y, eos], axis=1)


#: A text of more than this many characters per token of ``max_length`` is over-long without
#: tokenizing it (SentencePiece pieces hold 16 characters at most by default; only a run of
#: whitespace, which normalisation folds into one, could pack more into a token).
_CHARS_PER_TOKEN = 256


def _tokenize_pairs(tokenizer, replace_invalid: bool, max_length: int):
    """Batched graph function: string pairs -> (ragged source ids, ragged BOS+y+EOS).

    A text longer than ``_CHARS_PER_TOKEN * (max_length + 1)`` characters is not tokenized: it
    becomes ``max_length + 2`` ``<unk>`` ids, so the pair is dropped (and counted) as over-long
    like any other, without a ragged row of its true length (one 2-million-character line made
    the batch's masking allocate 2,000 x 2,000,001 ids)."""
    import tensorflow as tf

    cap = _CHARS_PER_TOKEN * (max_length + 1)
    over_length = max_length + 2

    def tokenize(text):
        over = tf.strings.length(text, unit="UTF8_CHAR") > cap
        ids = tokenizer.tokenize(tf.where(over, "", text))
        filler = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(over, tf.int64)) * over_length], tf.constant(UNK_ID, ids.dtype)),
            tf.where(over, tf.constant(over_length, tf.int64), tf.constant(0, tf.int64)))
        return tf.concat([ids, filler], axis=1)

    def fn(src, tgt):
        if replace_invalid:
            src = tf.strings.unicode_transcode(src, "UTF-8", "UTF-8", errors="replace")
            tgt = tf.strings.unicode_transcode(tgt, "UTF-8", "UTF-8", errors="replace")
        return _with_bos_eos(tokenize(src), tokenize(tgt))

    return fn


def token_batches(cfg, split: str, tokenizer, shuffle_files: bool = False, seed: int = 0, shards=()):
    """Batches of ``(source ids, BOS + y + EOS)`` (ragged int32) of a split's share: the
    source's pairs tokenized in the graph, or a prepared split's records. ``shards`` are
    ``(index, count)`` levels (worker, then pipeline): whole files where there are enough
    of them, else every ``count``-th pair."""
    import tensorflow as tf

    if cfg.source == "prepared":
        return prepared.token_dataset(cfg, split, shuffle_files, seed, shards).map(
            _with_bos_eos, num_parallel_calls=tf.data.AUTOTUNE)
    part, parts = 0, 1
    line_shards = []
    for index, count in shards:  # combine the levels that can go by file
        if count <= 1:
            continue
        if not line_shards and sources.num_parts(cfg, split) >= parts * count:
            part, parts = part + parts * index, parts * count
        else:
            line_shards.append((index, count))
    pairs, _, _ = sources.pair_dataset(cfg, split, shuffle_files=shuffle_files, seed=seed, part=part, parts=parts)
    for index, count in line_shards:
        pairs = pairs.shard(count, index)
    tokenize = _tokenize_pairs(tokenizer, replace_invalid=cfg.invalid_utf8 == "replace", max_length=cfg.max_length)
    return pairs.batch(_TOKENIZE_BATCH).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)


def _keep_mask(src_len, tgt_full_len, max_length):
    """Which pairs survive: both sides non-empty, both within ``max_length``."""
    import tensorflow as tf

    nonempty = (src_len > 0) & (tgt_full_len > 2)
    fits = (src_len <= max_length) & (tgt_full_len - 1 <= max_length)
    return nonempty, tf.logical_and(nonempty, fits)


def _stats_key(cfg, split, tokenizer) -> dict:
    """What a split's statistics depend on: its files (path, size, mtime) or TFDS split, the
    vocabulary, and the settings that change what is kept."""
    key = {"split": split, "source": cfg.source, "max_length": cfg.max_length, "invalid_utf8": cfg.invalid_utf8,
           "vocabulary": hashlib.sha256(tokenizer.model_proto).hexdigest(), "format": 2}
    if cfg.source == "tfds":
        key.update(tfds=[cfg.tfds_name, cfg.tfds_data_dir, sources.describe(cfg, split),
                         str(sources.tfds_builder(cfg).data_dir)])
    elif cfg.source == "prepared":
        key.update(prepared=file_identity(Path(cfg.prepared_dir).expanduser() / prepared.MANIFEST))
    else:
        key.update(files=[[file_identity(a), file_identity(b)] for a, b in sources.split_file_pairs(cfg, split)],
                   langs=[cfg.source_lang, cfg.target_lang])
    return key


def dataset_statistics(data_config, split: str, tokenizer, input_context=None, log=None) -> DataStats:
    """Count pairs read, kept, dropped (empty / over-long) and lines with invalid UTF-8.

    One pass over the whole split in the graph (tokenizing in batches, on all cores), with a
    progress line every few seconds; a prepared split answers from its manifest without a
    pass. Results are cached for the process and on disk (``data.stats_cache_dir``, see
    :mod:`~tf_transformer.data.cache`), keyed by the files (path, size, modification time),
    the vocabulary, ``max_length`` and ``invalid_utf8``: a second run, a resumed run or
    another worker over the same corpus reads them back at once. With
    ``data.invalid_utf8: error`` a TFDS example with invalid UTF-8 raises
    :class:`DataError` (text files are checked before, with line numbers). ``input_context``
    is accepted for compatibility: the statistics are those of the whole split.
    """
    import tensorflow as tf

    del input_context
    log = log or say
    cfg = sources.data_section(data_config)
    origin = sources.describe(cfg, split)
    if cfg.source == "prepared":
        prepared.check_vocabulary(cfg, tokenizer)
        counts = prepared.split_statistics(cfg, split, cfg.max_length)
        return DataStats(split=split, origin=origin, max_length=cfg.max_length, **counts)
    key = _stats_key(cfg, split, tokenizer)
    memo = repr(sorted(key.items()))
    if memo in _STATS_CACHE:
        return dataclasses.replace(_STATS_CACHE[memo])
    folder = cache_dir(cfg)
    stored = disk_cache_get(folder, "stats", key)
    if stored is not None:
        stats = DataStats(**stored)
        _STATS_CACHE[memo] = stats
        return dataclasses.replace(stats)
    pairs_ds, n_pairs, _ = sources.pair_dataset(cfg, split)
    tokenize = _tokenize_pairs(tokenizer, replace_invalid=cfg.invalid_utf8 == "replace", max_length=cfg.max_length)
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
        cell = tf.boolean_mask(s_len * width + t_len, keep)  # kept pairs by (source length, len(y) + 1)
        return sums, maxes, tf.math.bincount(cell, minlength=width * width, maxlength=width * width,
                                             dtype=tf.int64)

    width = max_length + 1
    ds = pairs_ds.batch(_STATS_BATCH).map(count, num_parallel_calls=tf.data.AUTOTUNE).prefetch(4)
    sums, maxes, cells = np.zeros(7, np.int64), np.zeros(2, np.int64), np.zeros(width * width, np.int64)
    progress = Progress(f"data {split}: counting pairs and tokens of {origin} (once; cached)", n_pairs, "pairs", log)
    for part_sums, part_maxes, part_cells in ds.as_numpy_iterator():
        sums += part_sums
        maxes = np.maximum(maxes, part_maxes)
        cells += part_cells
        progress.update(int(sums[0]))
    progress.done()
    n, invalid, empty, too_long, kept, s_tok, t_tok = (int(v) for v in sums)
    if invalid and cfg.invalid_utf8 == "error":  # only TFDS gets here: files were scanned
        raise DataError(
            f"{origin}: {invalid:,} texts are not valid UTF-8; "
            "set data.invalid_utf8=replace to replace bad bytes with U+FFFD"
        )
    stats = DataStats(
        split=split, origin=origin, pairs=n, kept=kept, dropped_empty=empty, dropped_too_long=too_long,
        invalid_utf8_replaced=invalid, source_tokens=s_tok, target_tokens=t_tok,
        max_source_length=int(maxes[0]), max_target_length=int(maxes[1]), max_length=max_length,
        length_pairs=[[int(i // width), int(i % width), int(cells[i])] for i in np.flatnonzero(cells)])
    _STATS_CACHE[memo] = stats
    disk_cache_put(folder, "stats", key, stats.as_dict())
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
        training: shuffle (with ``seed``) and, unless ``repeat=False``, repeat forever;
            ``data.parallel_pipelines`` pipelines build batches side by side.
            ``False``: one pass in file order, one pipeline.
        input_context: a ``tf.distribute.InputContext`` (from
            ``strategy.distribute_datasets_from_function``): read shard
            ``input_pipeline_id`` of ``num_input_pipelines`` (whole files when the split
            has enough of them) and batch to the per-replica budget
            ``tokens_per_batch // num_replicas_in_sync``.
        seed: shuffle seed; ``None`` = ``data.seed``. The same seed (and the same number of
            pipelines) gives the same batches.
        repeat: repeat forever; ``None`` = ``training``.
        verbose: print the one-line reading summary to stderr.
        skip: leave out the first ``skip`` batches (before padding): the same stream from
            batch ``skip`` on. Resuming a run skips the batches it has trained on.

    Returns:
        a ``tf.data.Dataset`` of int32 tensors, shapes ``[B, S]``, ``[B, T]``, ``[B, T]``;
        each side of a batch has at most ``budget`` slots (``B * S <= budget``,
        ``B * T <= budget``). With ``data.service`` set, the batches are produced by the
        tf.data service's workers (see :func:`distribute_with_service`).
    """
    import tensorflow as tf

    cfg = sources.data_section(data_config)
    if split not in sources.SPLITS:
        raise DataError(f"split {split!r} is not one of {', '.join(sources.SPLITS)}")
    cfg.validate()  # a DataConfig built or changed in Python has not been through a config file's checks
    seed = cfg.seed if seed is None else int(seed)
    repeat = training if repeat is None else repeat
    budget = per_replica_budget(cfg, input_context)
    stats = _reading_summary(cfg, split, tokenizer)
    if verbose:
        say(stats.summary())
    worker = _worker_shard(input_context)
    pipelines = resolve_pipelines(cfg) if training else 1
    plan = None
    if training and cfg.batching == "buckets":
        plan = bucket_plan(bucket_bounds(cfg.max_length, cfg.bucket_width), budget, stats.length_pairs,
                           shares=pipelines * worker[1])
        if verbose and plan.describe():
            say(f"data {split}: {plan.describe()}")
    streams = [
        _pipeline(cfg, split, tokenizer, budget, training, repeat, seed, shards=(worker, (j, pipelines)),
                  shuffle_buffer=max(1, cfg.shuffle_buffer // pipelines), pipeline=j, plan=plan)
        for j in range(pipelines)
    ]
    if pipelines == 1:
        ds = streams[0]
    else:  # round-robin over the pipelines, each running ahead in its own thread
        order = tf.data.Dataset.range(pipelines).repeat()
        ds = tf.data.Dataset.choose_from_datasets([s.prefetch(2) for s in streams], order,
                                                  stop_on_empty_dataset=False)
    if skip:  # the combined order is deterministic, so this is the same stream from batch `skip` on
        ds = ds.skip(int(skip))
    ds = ds.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = True
    if not training:
        # Evaluation streams (validation, test; repeated or not) get no autotuning thread:
        # Keras makes a new validation iterator at every evaluation and deletes the old one,
        # and the deletion waits for the old iterator's autotuning thread, which stalled
        # training by 15-30 s at about every second epoch end.
        options.autotune.enabled = False
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.OFF
        if input_context is not None
        else tf.data.experimental.AutoShardPolicy.DATA
    )
    ds = ds.with_options(options)
    if cfg.service:
        ds = distribute_with_service(ds, cfg, split)
    return ds


def _reading_summary(cfg, split, tokenizer) -> DataStats:
    if cfg.stats_pass or cfg.source == "prepared":
        return dataset_statistics(cfg, split, tokenizer)
    if cfg.source == "tfds":
        n_pairs, replaced = sources.tfds_num_examples(cfg, split), 0
    else:
        _, counts, replaced = sources.check_split_files(cfg, split)
        n_pairs = sum(counts)
    return DataStats(split, sources.describe(cfg, split), n_pairs, invalid_utf8_replaced=replaced or 0,
                     max_length=cfg.max_length)


def _pipeline(cfg, split, tokenizer, budget, training, repeat, seed, shards, shuffle_buffer, pipeline, plan=None):
    """One pipeline's batches: read and tokenize its share, filter, (cache,) shuffle, repeat,
    bucket (training: by ``plan``, a :class:`BucketPlan`), pad. ``seed`` and ``pipeline`` fix
    its order."""
    import tensorflow as tf

    if training:
        bounds = bucket_bounds(cfg.max_length, cfg.bucket_width)
        plan = plan or bucket_plan(bounds, budget)
        keys_t, rows_t = tf.constant(plan.key, tf.int64), tf.constant(plan.rows, tf.int64)
    else:
        bounds = eval_bucket_bounds(cfg.max_length)
        rows_t = tf.constant([max(1, budget // b) for b in bounds], tf.int64)
    nb = len(bounds)
    own_seed = seed + 7919 * pipeline  # pipeline 0 (the only one when there is one) uses the seed itself
    # the file order is shuffled with the common seed: pipelines (and workers) that take every
    # k-th pair of one stream must all see that stream in one order, or their shares overlap
    ds = token_batches(cfg, split, tokenizer, shuffle_files=training, seed=seed, shards=shards)
    bounds_t = tf.constant(bounds, tf.int64)
    max_length = cfg.max_length

    sorted_chunks = training and cfg.batching in ("sorted_chunks", "source_sorted")

    def filter_and_key(s, t):
        s_len = tf.cast(s.row_lengths(), tf.int64)
        t_len = tf.cast(t.row_lengths(), tf.int64) - 1  # length of BOS+y and of y+EOS
        _, keep = _keep_mask(s_len, t_len + 1, max_length)
        s = tf.ragged.boolean_mask(s, keep)
        t = tf.ragged.boolean_mask(t, keep)
        s_len = tf.boolean_mask(s_len, keep)
        t_len = tf.boolean_mask(t_len, keep)
        if sorted_chunks:  # keyed per chunk, by _sorted_chunks
            return s, t
        if training:  # 2-D buckets: (source length, target length)
            s_bucket = tf.searchsorted(bounds_t, s_len, side="left", out_type=tf.int64)
            t_bucket = tf.searchsorted(bounds_t, t_len, side="left", out_type=tf.int64)
            return s, t, tf.gather(keys_t, s_bucket * nb + t_bucket)
        # evaluation: few 1-D buckets by the longer side, so few partial batches
        return s, t, tf.searchsorted(bounds_t, tf.maximum(s_len, t_len), side="left", out_type=tf.int64)

    ds = ds.map(filter_and_key, num_parallel_calls=tf.data.AUTOTUNE)
    if sorted_chunks:
        ds = _sorted_chunks(ds, bounds, budget, shuffle_buffer, own_seed, cfg.cache, repeat, max_length,
                            by_source=cfg.batching == "source_sorted")
        return ds.map(_split_target, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.unbatch()
    if cfg.cache:
        ds = ds.cache()  # tokenized pairs, kept in memory after the first pass
    if training:
        ds = ds.shuffle(shuffle_buffer, seed=own_seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()

    def window_size(key):
        return tf.gather(rows_t, key)

    def to_batches(key, window):
        # unbatched rows are (rank-0-ragged) RaggedTensors: batch them ragged, pad once per batch
        return window.ragged_batch(window_size(key))

    ds = ds.group_by_window(lambda s, t, k: k, to_batches, window_size_func=window_size)
    return ds.map(lambda s, t, k: _split_target(s, t), num_parallel_calls=tf.data.AUTOTUNE)


def _split_target(src, tgt_full):
    """Pad a ragged batch with 0 and split ``BOS y EOS`` into decoder input and labels."""
    import tensorflow as tf

    src = src.to_tensor(PAD_ID)
    tgt_full = tgt_full.to_tensor(PAD_ID)
    tgt_in = tgt_full[:, :-1]
    tgt_in = tf.where(tgt_in == EOS_ID, tf.zeros_like(tgt_in), tgt_in)  # EOS of shorter rows
    return (src, tgt_in), tgt_full[:, 1:]


_CHUNKS_MIXED = 4  # sorted_chunks: batches are taken in turn from this many consecutive chunks
_RAMP = 16  # sorted_chunks: the first _RAMP chunks hold 1/_RAMP of a chunk's pairs each


def _sorted_chunks(ds, bounds, budget, chunk_pairs, seed, cache, repeat, max_length, by_source=False):
    """``data.batching: sorted_chunks``: ragged batches ``(source, BOS y EOS)`` from ``ds``
    (tokenized, filtered pairs in groups of up to 512), with no per-pair serial stage.

    Consecutive pairs are gathered into chunks of about ``chunk_pairs`` (``shuffle_buffer``
    of this pipeline). One graph function per chunk, run in parallel over chunks, sorts it
    by (1-D bucket of ``max(len(source), len(BOS y))``, target length, random tie-break),
    cuts each bucket into batches of ``budget // bound`` rows (so either side of a batch
    has at most ``budget`` slots, padding included) and puts the chunk's batches in random
    order; batches are then taken in turn from 4 consecutive chunks. Randomness is
    stateless, keyed by ``(seed, chunk number)``: the same seed gives the same batches, and
    each epoch (later chunk numbers) a new grouping. Every pair of a chunk is in exactly
    one batch; the price is one partial batch per bucket per chunk. The first 16 chunks of
    the stream hold 1/16 of a chunk each, so the first batch waits for that many pairs to be
    read and tokenized, not for a whole chunk.

    ``by_source`` (``data.batching: source_sorted``): the chunk is sorted by the exact source
    length, then target length (random tie-break), with no length buckets, and cut greedily in
    that order: a batch takes pairs while ``rows * max(longest source, longest BOS y)`` stays
    within ``budget``. A batch thus holds one source length (or neighbouring ones) and the
    target lengths that follow it in order, and batch sizes follow the lengths exactly rather
    than a bucket's bound. This is how fairseq batches translation data (``batch_by_size`` over
    indices sorted by source, then target length); the cut is a sequential loop over the
    chunk's pairs (``tf.scan``), still one graph function per chunk."""
    import tensorflow as tf

    bounds_t = tf.constant(bounds, tf.int64)
    rows_t = tf.constant([max(1, budget // b) for b in bounds], tf.int64)
    if cache:
        ds = ds.cache()  # tokenized pairs in groups, kept in memory after the first pass
    if repeat:
        ds = ds.repeat()
    full = max(1, -(-chunk_pairs // _TOKENIZE_BATCH))  # groups of up to _TOKENIZE_BATCH pairs per chunk
    small = max(1, full // _RAMP)
    ramp = 0 if small == full else _RAMP  # the first `ramp` chunks of the stream: `small` groups each
    ramp_groups = ramp * small

    def chunk_of(i, pair):  # group i -> its chunk number; groups arrive in order, so one window is open
        return tf.where(i < ramp_groups, i // small, ramp + (i - ramp_groups) // full)

    def groups_in(chunk):
        return tf.where(chunk < ramp, tf.constant(small, tf.int64), tf.constant(full, tf.int64))

    def gather(chunk, window):
        return window.map(lambda i, pair: pair).ragged_batch(full).map(lambda s, t: (chunk, (s, t)))

    ds = ds.enumerate().group_by_window(chunk_of, gather, window_size_func=groups_in)
    width = max_length + 2

    def cut(index, pairs):
        s, t = pairs[0].merge_dims(0, 1), pairs[1].merge_dims(0, 1)
        s_len = tf.cast(s.row_lengths(), tf.int64)
        t_len = tf.cast(t.row_lengths(), tf.int64) - 1  # length of BOS+y and of y+EOS
        n = tf.size(s_len, out_type=tf.int64)
        draw = tf.stack([tf.constant(seed, tf.int64), 2 * index])
        ties = tf.random.stateless_uniform([n], seed=draw, minval=0, maxval=1 << 20, dtype=tf.int64)
        if by_source:
            order = tf.argsort((s_len * width + t_len) * (1 << 20) + ties, stable=True)
            batch = _greedy_batches(tf.gather(tf.maximum(s_len, t_len), order), budget)
            count = tf.reduce_max(tf.concat([batch, tf.constant([-1], tf.int64)], 0)) + 1
        else:
            bucket = tf.searchsorted(bounds_t, tf.maximum(s_len, t_len), side="left", out_type=tf.int64)
            order = tf.argsort((bucket * width + t_len) * (1 << 20) + ties, stable=True)
            bucket = tf.gather(bucket, order)
            position = tf.range(n, dtype=tf.int64) - tf.searchsorted(bucket, bucket, side="left",
                                                                     out_type=tf.int64)
            starts = tf.cast(tf.equal(position % tf.gather(rows_t, bucket), 0), tf.int64)
            batch = tf.cumsum(starts) - 1
            count = tf.reduce_sum(starts)
        s_batches = tf.RaggedTensor.from_value_rowids(tf.gather(s, order), batch, nrows=count)
        t_batches = tf.RaggedTensor.from_value_rowids(tf.gather(t, order), batch, nrows=count)
        shuffled = tf.argsort(tf.random.stateless_uniform([count], seed=draw + tf.constant([0, 1], tf.int64)))
        return tf.gather(s_batches, shuffled), tf.gather(t_batches, shuffled)

    ds = ds.map(cut, num_parallel_calls=tf.data.AUTOTUNE)
    # mix neighbouring chunks by taking their (already permuted) batches in turn: unlike a
    # shuffle buffer of batches, this yields as soon as the first chunk is cut
    return ds.interleave(lambda s, t: tf.data.Dataset.from_tensor_slices((s, t)), cycle_length=_CHUNKS_MIXED,
                         block_length=1)


def _greedy_batches(longest, budget: int):
    """Batch number of each pair, in the given order, when batches are cut greedily: a pair
    joins the current batch while ``rows * max(longest of the batch)`` stays within
    ``budget``, else it opens the next one (a pair longer than ``budget`` alone is one batch)."""
    import tensorflow as tf

    budget = tf.constant(budget, tf.int64)

    def step(state, length):
        batch, rows, widest = state[0], state[1], state[2]
        wider = tf.maximum(widest, length)
        fits = tf.logical_or(tf.equal(rows, 0), (rows + 1) * wider <= budget)
        return tf.where(fits, tf.stack([batch, rows + 1, wider]), tf.stack([batch + 1, tf.ones_like(rows), length]))

    start = tf.constant([0, 0, 0], tf.int64)
    return tf.scan(step, longest, initializer=start)[:, 0]


#: the dispatcher's cheapest call (tensorflow/core/data/service/dispatcher.proto): an empty request
_DISPATCHER_PING = "/tensorflow.data.DispatcherService/GetVersion"


@functools.lru_cache(maxsize=None)
def check_dispatcher(address: str, timeout: float = 10.0) -> None:
    """A tf.data service dispatcher answers at ``address`` (``[protocol://]host:port``), or a
    :class:`DataError` says what answers instead: nothing (no listener), a gRPC server that is
    not a dispatcher (a tf.data worker's address, say), or a program that does not speak gRPC.
    TensorFlow itself waits for any of these without a word, forever. Checked once per address
    and process: a TCP connection, then the dispatcher's ``GetVersion`` call."""
    import socket

    where = address.split("://", 1)[-1]
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise DataError(f"data.service={address!r}: expected a dispatcher address [grpc://]host:port")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise DataError(f"data.service={address}: no tf.data service dispatcher answers at {host}:{port} "
                        f"({e.strerror or e}); start one (tf.data.experimental.service.DispatchServer) or unset "
                        "data.service") from None
    try:
        import grpc  # a dependency of TensorFlow's
    except ImportError:  # pragma: no cover - TensorFlow installs it
        return
    channel = grpc.insecure_channel(where)
    try:
        channel.unary_unary(_DISPATCHER_PING, request_serializer=bytes, response_deserializer=bytes)(
            b"", timeout=timeout)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNIMPLEMENTED:
            what = "a gRPC server that is not a tf.data service dispatcher (a tf.data worker's address?)"
        else:
            what = (f"a program that does not answer as a tf.data service dispatcher within {timeout:g} s "
                    f"(gRPC: {e.code().name}: {e.details()})")
        raise DataError(f"data.service={address}: {host}:{port} is {what}; data.service must name the "
                        "dispatcher (the DispatchServer's target)") from None
    finally:
        channel.close()


def distribute_with_service(ds, data_config, split: str):
    """``ds`` produced by the tf.data service at ``data.service`` (a dispatcher address).

    ``data.service_mode``: ``distributed_epoch`` (the default) splits the files among the
    service's workers, so each pair is read by one of them once per epoch;
    ``parallel_epochs`` has every worker produce the whole dataset (use it with one worker,
    or with sources that cannot be split). ``data.service_job`` names a shared job:
    consumers that give the same name (the replicas of a multi-host run) share one stream
    of batches instead of each getting its own.
    """
    import tensorflow as tf

    cfg = sources.data_section(data_config)
    check_dispatcher(cfg.service)
    mode = (tf.data.experimental.service.ShardingPolicy.DYNAMIC if cfg.service_mode == "distributed_epoch"
            else tf.data.experimental.service.ShardingPolicy.OFF)
    return ds.apply(tf.data.experimental.service.distribute(
        processing_mode=mode, service=cfg.service,
        job_name=f"{cfg.service_job}-{split}" if cfg.service_job else None))


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
