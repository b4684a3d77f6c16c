"""Prepared corpora: tokenized, shuffled, sharded TFRecord files and their manifest.

:func:`prepare` (``tft prepare``) reads a config's splits once (text files, globs and lists
of them, the bundled Multi30k or TFDS), tokenizes them in the ``tf.data`` graph with the
run's vocabulary and writes, in one folder::

    manifest.json                       counts, token totals, a length histogram per split,
                                        the vocabulary's SHA-256, the settings, the inputs
    vocab.model                         the vocabulary the ids belong to
    train-00000-of-00016.tfrecord ...   the training pairs, shuffled: every pair goes to a
                                        shard drawn with the seed, then each shard is
                                        shuffled in memory
    valid-00000-of-00001.tfrecord       validation / test pairs in file order (when the
    valid.source.txt, valid.target.txt  config has them) and their text, for BLEU

Each record is a ``tf.train.Example`` with two int64 lists, ``source`` (the source ids)
and ``target`` (the target ids, without BOS/EOS), the tokenizer's ids exactly: training
from the folder (``data.source: prepared``, ``data.prepared_dir``) gives the same ids as
the text path. The records are serialised by graph ops (protobuf wire format written with
string ops), so preparing runs at the speed of the tokenizer, on all cores.

Empty pairs (either side without tokens) are dropped when preparing and counted; pairs
longer than ``data.max_length`` are kept (``max_length`` is a training setting) and the
histogram of ``max(len(x), len(y) + 1)`` lets training count what it drops without reading
the shards again, so ``data.stats_pass`` costs nothing here.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np

from tf_transformer.data import sources
from tf_transformer.data.cache import Progress, file_identity
from tf_transformer.errors import DataError
from tf_transformer.io import atomic_write, say

MANIFEST = "manifest.json"
FORMAT = "tf-transformer prepared corpus"
VERSION = 1
_BATCH = 4096
_PAIRS_PER_SHARD = 100_000


# ---------------------------------------------------------------------------------------
# tf.train.Example in graph ops
# ---------------------------------------------------------------------------------------


def _varints(values):
    """Protobuf base-128 varints of non-negative int64 values (any shape), as byte strings."""
    import tensorflow as tf

    table = tf.constant([bytes([i]) for i in range(256)])
    v = tf.cast(values, tf.int64)
    pieces = []
    present = tf.ones_like(v, tf.bool)
    for _ in range(5):  # values < 2**35
        low = tf.bitwise.bitwise_and(v, 127)
        v = tf.bitwise.right_shift(v, 7)
        more = v > 0
        byte = tf.where(more, tf.bitwise.bitwise_or(low, 128), low)
        pieces.append(tf.where(present, tf.gather(table, byte), ""))
        present = present & more
    return tf.strings.join(pieces)


def _field(tag: bytes, body):
    """A length-delimited field: ``tag``, varint length of ``body``, ``body``."""
    import tensorflow as tf

    return tf.strings.join([tag, _varints(tf.strings.length(body)), body])


def encode_examples(source_ids, target_ids):
    """Serialised ``tf.train.Example`` protos ``{"source": int64 list, "target": int64 list}``,
    one per row of two ragged id tensors (graph ops; parse with :func:`parse_examples`)."""
    import tensorflow as tf

    def entry(name: str, ids):
        packed = tf.strings.reduce_join(ids.with_flat_values(_varints(ids.flat_values)), axis=1)
        feature = _field(b"\x1a", _field(b"\x0a", packed))  # Feature.int64_list(Int64List.value packed)
        key = b"\x0a" + bytes([len(name)]) + name.encode()  # MapEntry.key
        return _field(b"\x0a", tf.strings.join([key, _field(b"\x12", feature)]))  # Features.feature

    features = tf.strings.join([entry("source", source_ids), entry("target", target_ids)])
    return _field(b"\x0a", features)  # Example.features


def parse_examples(serialized):
    """``(source ids, target ids)`` ragged int32 of a batch of serialised records."""
    import tensorflow as tf

    spec = {"source": tf.io.RaggedFeature(tf.int64), "target": tf.io.RaggedFeature(tf.int64)}
    parsed = tf.io.parse_example(serialized, spec)
    return tuple(tf.cast(parsed[k], tf.int32).with_row_splits_dtype(tf.int64) for k in ("source", "target"))


# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------


def read_manifest(folder) -> dict:
    folder = Path(folder).expanduser()
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path} does not exist: data.prepared_dir must be a folder written by "
                        "prepare (tft prepare)") from None
    except (OSError, ValueError) as e:
        raise DataError(f"{path} is not a readable manifest: {e}") from None
    if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise DataError(f"{path}: format {manifest.get('format')!r} version {manifest.get('version')!r} is not "
                        f"{FORMAT!r} version {VERSION}")
    return manifest


def vocabulary_hash(model_proto: bytes) -> str:
    return hashlib.sha256(model_proto).hexdigest()


def _split_entry(cfg, split: str) -> tuple[Path, dict, dict]:
    folder = Path(cfg.prepared_dir).expanduser()
    manifest = read_manifest(folder)
    entry = manifest["splits"].get(split)
    if entry is None:
        raise DataError(f"{folder / MANIFEST} has no {split!r} split (it has {', '.join(manifest['splits'])})")
    return folder, manifest, entry


def check_vocabulary(cfg, tokenizer) -> dict:
    folder = Path(cfg.prepared_dir).expanduser()
    manifest = read_manifest(folder)
    want = manifest["vocabulary"]["sha256"]
    got = vocabulary_hash(tokenizer.model_proto)
    if got != want:
        raise DataError(f"{folder} was prepared with another vocabulary (SHA-256 {want[:12]}..., "
                        f"{folder / 'vocab.model'}) than data.vocab_model ({got[:12]}...); use that file or "
                        "prepare the corpus again with this vocabulary")
    return manifest


def shard_files(cfg, split: str) -> list[str]:
    folder, _, entry = _split_entry(cfg, split)
    files = [str(folder / f["name"]) for f in entry["files"]]
    for f, listed in zip(files, entry["files"]):
        if not Path(f).is_file():
            raise DataError(f"{f} (listed in {folder / MANIFEST}) does not exist")
        size, expected = Path(f).stat().st_size, listed.get("bytes")  # manifests before sizes: unchecked
        if expected is not None and size != expected:
            raise DataError(f"{f} is {size:,} bytes but {folder / MANIFEST} says {expected:,}: the shard was cut "
                            "or changed after tft prepare wrote it; prepare the corpus again (or restore the file)")
    return files


def damaged_shard(cfg, split: str):
    """``(path, what TensorFlow says)`` of the first shard of ``split`` whose records do not
    read back (a bad checksum or a cut record), or ``None``: every record is read, so this is
    for after a ``DataLossError``, whose message names no file."""
    import tensorflow as tf

    for path in shard_files(cfg, split):
        try:
            for _ in tf.data.TFRecordDataset(path).batch(4096):
                pass
        except tf.errors.DataLossError as e:
            return path, data_loss_detail(e)
    return None


def data_loss_detail(error) -> str:
    """The line of a TensorFlow ``DataLossError`` that says what is wrong (``corrupted record
    at 399932``), not its first line (``Graph execution error:``)."""
    import re

    text = re.sub(r"\{\{.*?\}\}|\[\[.*?\]\]|\[Op:\w+\]( name)?", "", str(getattr(error, "message", error)))
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    for line in lines:
        if "record" in line or "Data loss" in line or "gzip" in line.lower() or "zlib" in line.lower():
            return line.rstrip(": ")
    return lines[0] if lines else type(error).__name__


def token_dataset(cfg, split: str, shuffle_files: bool, seed: int, shards=(), interleave: int = 8):
    """Batches of ``(source ids, target ids)`` ragged int32 of a prepared split, file order
    or file-level shuffled; ``shards``: ``(index, count)`` levels, each taking whole files
    when there are enough, else every ``count``-th record."""
    import tensorflow as tf

    files = shard_files(cfg, split)
    by_line = []
    for index, count in shards:
        if count <= 1:
            continue
        if not by_line and len(files) >= count:
            files = files[index::count]
        else:
            by_line.append((index, count))
    names = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_files and len(files) > 1:
        names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = names.interleave(tf.data.TFRecordDataset, cycle_length=max(1, min(len(files), interleave)),
                          block_length=16, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    for index, count in by_line:
        ds = ds.shard(count, index)
    return ds.batch(512).map(parse_examples, num_parallel_calls=tf.data.AUTOTUNE)


def split_statistics(cfg, split: str, max_length: int) -> dict:
    """What a training run with ``max_length`` keeps and drops of a prepared split, from the
    manifest's histogram (no pass over the shards)."""
    _, _, entry = _split_entry(cfg, split)
    h = entry["lengths"]
    m = np.asarray(h["m"], np.int64)
    keep = m <= max_length
    total = int(np.sum(h["count"]))

    def masked(name, fn):
        values = np.asarray(h[name], np.int64)[keep]
        return int(fn(values)) if values.size else 0

    kept = masked("count", np.sum)
    return {
        "pairs": int(entry["pairs_read"]),
        "kept": kept,
        "dropped_empty": int(entry["dropped_empty"]),
        "dropped_too_long": total - kept,
        "invalid_utf8_replaced": int(entry["invalid_utf8_replaced"]),
        "source_tokens": masked("source_tokens", np.sum),
        "target_tokens": masked("target_tokens", np.sum),
        "max_source_length": masked("max_source", np.max),
        "max_target_length": masked("max_target", np.max),
    }


def text_files(cfg, split: str) -> tuple[Path, Path]:
    folder, _, entry = _split_entry(cfg, split)
    if "text" not in entry:
        raise DataError(f"{folder / MANIFEST}: the {split!r} split has no text copy")
    return folder / entry["text"][0], folder / entry["text"][1]


# ---------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------


def _available_splits(cfg) -> list[str]:
    if cfg.source == "multi30k":
        return list(sources.SPLITS)
    if cfg.source == "tfds":  # the configured splits the dataset has
        known = set(sources.tfds_builder(cfg).info.splits.keys())
        names = {"train": cfg.tfds_train_split, "valid": cfg.tfds_valid_split, "test": cfg.tfds_test_split}
        return [s for s in sources.SPLITS if s == "train" or names[s].split("[")[0] in known]
    return [s for s in sources.SPLITS if getattr(cfg, f"{s}_source") and getattr(cfg, f"{s}_target")]


def _encoder(tokenizer, replace_invalid: bool):
    import tensorflow as tf

    def fn(src, tgt):
        bad = (tf.strings.unicode_transcode(src, "UTF-8", "UTF-8", errors="replace") != src)
        bad = tf.reduce_sum(tf.cast(bad, tf.int64)) + tf.reduce_sum(tf.cast(
            tf.strings.unicode_transcode(tgt, "UTF-8", "UTF-8", errors="replace") != tgt, tf.int64))
        if replace_invalid:
            src = tf.strings.unicode_transcode(src, "UTF-8", "UTF-8", errors="replace")
            tgt = tf.strings.unicode_transcode(tgt, "UTF-8", "UTF-8", errors="replace")
        s = tokenizer.tokenize(src)
        y = tokenizer.tokenize(tgt)
        s_len = tf.cast(s.row_lengths(), tf.int64)
        y_len = tf.cast(y.row_lengths(), tf.int64)
        keep = (s_len > 0) & (y_len > 0)
        s, y = tf.ragged.boolean_mask(s, keep), tf.ragged.boolean_mask(y, keep)
        records = encode_examples(s, y)
        return records, tf.boolean_mask(s_len, keep), tf.boolean_mask(y_len, keep) + 1, bad

    return fn


class _Histogram:
    """Per value ``m = max(len(x), len(y) + 1)``: pairs, tokens (source ``len(x)``, target
    ``len(y) + 1``) and longest sides."""

    def __init__(self):
        self.size = 0
        self.arrays = {k: np.zeros(0, np.int64) for k in
                       ("count", "source_tokens", "target_tokens", "max_source", "max_target")}

    def add(self, s_len: np.ndarray, t_len: np.ndarray) -> None:
        if not s_len.size:
            return
        m = np.maximum(s_len, t_len)
        top = int(m.max()) + 1
        if top > self.size:
            for k, a in self.arrays.items():
                self.arrays[k] = np.concatenate([a, np.zeros(top - self.size, np.int64)])
            self.size = top
        a = self.arrays
        np.add.at(a["count"], m, 1)
        np.add.at(a["source_tokens"], m, s_len)
        np.add.at(a["target_tokens"], m, t_len)
        np.maximum.at(a["max_source"], m, s_len)
        np.maximum.at(a["max_target"], m, t_len)

    def as_dict(self) -> dict:
        present = np.nonzero(self.arrays["count"])[0]
        out = {"m": present.tolist()}
        out.update({k: a[present].tolist() for k, a in self.arrays.items()})
        return out


def _write_split(cfg, split, tokenizer, folder: Path, shards: int, seed: int, log) -> dict:
    import tensorflow as tf

    pairs_ds, n_pairs, replaced_lines = sources.pair_dataset(cfg, split)
    encode = _encoder(tokenizer, cfg.invalid_utf8 == "replace")
    ds = pairs_ds.batch(_BATCH).map(encode, num_parallel_calls=tf.data.AUTOTUNE).prefetch(4)
    training = split == "train"
    final = [f"{split}-{i:05d}-of-{shards:05d}.tfrecord" for i in range(shards)]
    staging = [folder / (name + ".part") for name in final] if training else [folder / n for n in final]
    writers = [tf.io.TFRecordWriter(str(p)) for p in staging]
    rng = np.random.default_rng([seed, sources.SPLITS.index(split)])
    hist = _Histogram()
    read = invalid = 0
    per_shard = np.zeros(shards, np.int64)
    progress = Progress(f"prepare {split}", n_pairs, "pairs", log)
    for records, s_len, t_len, bad in ds.as_numpy_iterator():
        read += _BATCH
        invalid += int(bad)
        if invalid and cfg.invalid_utf8 == "error":
            raise DataError(f"{sources.describe(cfg, split)}: texts that are not valid UTF-8; set "
                            "data.invalid_utf8=replace to replace bad bytes with U+FFFD")
        hist.add(s_len, t_len)
        where = rng.integers(0, shards, size=len(records)) if shards > 1 else np.zeros(len(records), np.int64)
        per_shard += np.bincount(where, minlength=shards)
        for record, shard in zip(records.tolist(), where.tolist()):
            writers[shard].write(record)
        progress.update(min(read, n_pairs))
    for w in writers:
        w.close()
    progress.done()
    if training:  # shuffle each shard in memory
        progress = Progress(f"prepare {split}: shuffling shards", shards, "shards", log)
        for i, (part, name) in enumerate(zip(staging, final)):
            records = [r.numpy() for r in tf.data.TFRecordDataset(str(part)).batch(_BATCH)]
            records = np.concatenate(records) if records else np.zeros(0, object)
            order = rng.permutation(len(records))
            with tf.io.TFRecordWriter(str(folder / name)) as w:
                for j in order.tolist():
                    w.write(records[j])
            part.unlink()
            progress.update(i + 1)
        progress.done()
    kept = int(per_shard.sum())
    entry = {
        "origin": sources.describe(cfg, split),
        "pairs_read": int(n_pairs),
        "pairs": kept,
        "dropped_empty": int(n_pairs) - kept,
        "invalid_utf8_replaced": int(replaced_lines if replaced_lines is not None else invalid),
        "files": [{"name": name, "pairs": int(c), "bytes": (folder / name).stat().st_size}
                  for name, c in zip(final, per_shard)],
        "lengths": hist.as_dict(),
    }
    if cfg.source in ("text", "multi30k"):
        entry["inputs"] = [[file_identity(a), file_identity(b)] for a, b in sources.split_file_pairs(cfg, split)]
    if not training:
        src, tgt = sources.read_parallel_text(cfg, split)
        entry["text"] = [f"{split}.source.txt", f"{split}.target.txt"]
        atomic_write(folder / entry["text"][0], "".join(line + "\n" for line in src))
        atomic_write(folder / entry["text"][1], "".join(line + "\n" for line in tgt))
    return entry


def prepare(config, output, tokenizer, shards: int | None = None, seed: int | None = None,
            overwrite: bool = False, log=say) -> dict:
    """Write the prepared corpus of ``config``'s data section to the folder ``output``.

    ``shards``: training files (default: one per 100,000 pairs, at least 16); ``seed``:
    the shuffle (default ``data.seed``). An existing prepared folder is replaced only with
    ``overwrite``. Returns the manifest plus ``summary`` (one line) and ``seconds``.
    """
    cfg = sources.data_section(config)
    if cfg.source == "prepared":
        raise DataError("data.source='prepared' is already prepared; point the config at the raw corpus")
    folder = Path(output).expanduser()
    if (folder / MANIFEST).exists() and not overwrite:
        raise DataError(f"{folder} already holds a prepared corpus ({folder / MANIFEST}); replace it "
                        "(overwrite=True) or choose another folder")
    if folder.exists() and any(folder.iterdir()) and not (folder / MANIFEST).exists():
        raise DataError(f"{folder} exists and is not empty; choose a new folder")
    start = time.time()
    seed = cfg.seed if seed is None else int(seed)
    if shards is not None and shards < 1:
        raise DataError(f"shards={shards} must be >= 1")
    if (folder / MANIFEST).exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split in _available_splits(cfg):
        if split == "train":
            n_pairs = (sources.tfds_num_examples(cfg, split) if cfg.source == "tfds"
                       else sum(sources.check_split_files(cfg, split)[1]))
            count = shards or max(16, -(-n_pairs // _PAIRS_PER_SHARD))
        else:
            count = 1
        log(f"prepare: {split} split of {sources.describe(cfg, split)} -> {count} shard(s)")
        splits[split] = _write_split(cfg, split, tokenizer, folder, count, seed, log)
    atomic_write(folder / "vocab.model", tokenizer.model_proto)
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "source_lang": cfg.source_lang,
        "target_lang": cfg.target_lang,
        "vocabulary": {"sha256": vocabulary_hash(tokenizer.model_proto), "pieces": int(tokenizer.vocab_size),
                       "file": "vocab.model", "from": getattr(tokenizer, "model_path", None)},
        "settings": {"seed": seed, "train_shards": len(splits["train"]["files"]), "invalid_utf8": cfg.invalid_utf8,
                     "source": cfg.source},
        "splits": splits,
    }
    atomic_write(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    seconds = time.time() - start
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    train = splits["train"]
    tokens = sum(train["lengths"]["source_tokens"]), sum(train["lengths"]["target_tokens"]) - train["pairs"]
    summary = (f"wrote {folder}: {train['pairs']:,} training pairs ({train['dropped_empty']:,} empty dropped; "
               f"{tokens[0]:,} source + {tokens[1]:,} target tokens) in {len(train['files'])} shards"
               + "".join(f", {s} {e['pairs']:,} pairs" for s, e in splits.items() if s != "train")
               + "".join(f"; {e['invalid_utf8_replaced']:,} {s} lines with invalid UTF-8 replaced (U+FFFD)"
                         for s, e in splits.items() if e.get("invalid_utf8_replaced"))
               + f"; {size / 1e6:,.1f} MB in {seconds:.1f} s")
    return dict(manifest, summary=summary, seconds=seconds, bytes=size)
