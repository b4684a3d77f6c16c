"""Where sentence pairs come from: parallel text files, the bundled Multi30k, TFDS.

Three sources (``data.source``), one language direction ``data.source_lang`` ->
``data.target_lang``:

``text``
    Two files per split, line *i* of one translating line *i* of the other
    (``data.train_source``/``data.train_target``, ``valid_*``, ``test_*``). Plain UTF-8
    or gzip (``.gz``). Relative paths are relative to the working directory.
``multi30k``
    The copy of Multi30k task 1 shipped with the package (the repository's ``data/multi30k``)
    or the one in ``data.multi30k_dir``: ``{train,val,test2016}.{en,de}.gz``. A ``*_source``/``*_target``
    field that is set replaces the bundled file for that split.
``tfds``
    A TFDS translation dataset (``data.tfds_name``, e.g. ``wmt14_translate/de-en``) whose
    features are keyed by language. It is read from ``data.tfds_data_dir`` and must be
    prepared there already unless ``data.tfds_download`` is true: this machine class has
    no network, so prepare it once elsewhere (``tfds build NAME --data_dir DIR``).

Checks before any training step (bad input fails early and names what is wrong):

* Text files are scanned once in Python, streaming in 1 MiB blocks (4.35M lines, 316 MB:
  a few seconds; Multi30k: milliseconds):
  both files must have the same number of lines, else a :class:`DataError` names both
  files and both counts. Results are cached per process (path, size, mtime).
* Invalid UTF-8: with ``data.invalid_utf8: error`` (the default) the scan stops at the
  first bad line and names file and line; with ``replace`` each bad byte becomes U+FFFD
  (which SentencePiece's NFKC normalization then drops) and the number of affected
  lines is reported in the reading summary.
  TFDS examples are checked by the statistics pass (``batching.dataset_statistics``).
* Empty pairs (either side without tokens) and over-long pairs are dropped in the
  graph and counted by the statistics pass; see ``batching``.
"""

from __future__ import annotations

import glob
import gzip
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tf_transformer.data.cache import Progress, cache_dir, disk_cache_get, disk_cache_put
from tf_transformer.errors import DataError
from tf_transformer.io import say

SPLITS = ("train", "valid", "test")
MULTI30K_FILES = {"train": "train", "valid": "val", "test": "test2016"}
_BLOCK = 1 << 20


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise DataError(f"split {split!r} is not one of {', '.join(SPLITS)}")


def data_section(config):
    """Accept a ``Config`` or its ``DataConfig`` section."""
    return getattr(config, "data", config)


# ---------------------------------------------------------------------------------------
# Multi30k and text files
# ---------------------------------------------------------------------------------------


def bundled_multi30k_dir() -> Path:
    """The bundled Multi30k copy: the repository's ``data/multi30k``, shipped inside the
    package (:func:`tf_transformer.resources.shipped_dir`); a path that does not exist when
    neither copy is there (:func:`multi30k_dir` then says where it looked)."""
    from tf_transformer.resources import candidates, shipped_dir

    return shipped_dir("multi30k") or candidates("multi30k")[-1]


def multi30k_dir(config) -> Path:
    cfg = data_section(config)
    if cfg.multi30k_dir:
        path = Path(cfg.multi30k_dir).expanduser()
        if not path.is_dir():
            raise DataError(f"data.multi30k_dir={cfg.multi30k_dir!r} is not a directory")
        return path
    path = bundled_multi30k_dir()
    if not path.is_dir():
        from tf_transformer.resources import missing_message

        raise DataError(
            missing_message("multi30k", "the bundled Multi30k files")
            + "; or set data.multi30k_dir to a folder holding train/val/test2016.{en,de}.gz"
        )
    return path


def _expand(field: str, value, split: str) -> list[Path]:
    """The files a ``data.<split>_<side>`` value names: a path, a glob (sorted matches) or a
    list of them (in the list's order)."""
    entries = value if isinstance(value, (list, tuple)) else [value]
    files: list[Path] = []
    for entry in entries:
        text = str(Path(str(entry)).expanduser())
        if any(c in text for c in "*?["):
            matches = sorted(Path(m) for m in glob.glob(text, recursive=True) if Path(m).is_file())
            if not matches:
                raise DataError(f"{entry!r} (data.{field}, {split} split) matches no file")
            files.extend(matches)
        else:
            path = Path(text)
            if not path.is_file():
                raise DataError(f"{path} (data.{field}, {split} split) does not exist or is not a file")
            files.append(path)
    return files


def split_file_pairs(config, split: str) -> list[tuple[Path, Path]]:
    """(source file, target file) pairs of a split for the ``text`` and ``multi30k`` sources.

    Each of ``data.<split>_source`` / ``_target`` is a path, a glob or a list of them; the
    i-th source file pairs with the i-th target file (globs in sorted order). Different file
    counts raise :class:`DataError` naming both values and both counts.
    """
    cfg = data_section(config)
    _check_split(split)
    if cfg.source in ("tfds", "prepared"):
        raise DataError(f"data.source={cfg.source!r} has no text files for split {split!r}")
    fields = (f"{split}_source", f"{split}_target")
    given = [getattr(cfg, f) for f in fields]
    if cfg.source == "multi30k":
        folder = None
        sides = []
        for field, value, lang in zip(fields, given, (cfg.source_lang, cfg.target_lang)):
            if value:
                sides.append(_expand(field, value, split))
            else:
                folder = folder or multi30k_dir(cfg)
                path = folder / f"{MULTI30K_FILES[split]}.{lang}.gz"
                if not path.is_file():
                    raise DataError(f"{path} (data.{field}, {split} split) does not exist or is not a file")
                sides.append([path])
    else:
        missing = [f"data.{f}" for f, v in zip(fields, given) if not v]
        if missing:
            raise DataError(
                f"data.source='text' needs {' and '.join(missing)} for the {split!r} split"
            )
        sides = [_expand(f, v, split) for f, v in zip(fields, given)]
    if len(sides[0]) != len(sides[1]):
        raise DataError(
            f"data.{fields[0]}={given[0]!r} names {len(sides[0])} file(s) but data.{fields[1]}={given[1]!r} "
            f"names {len(sides[1])}; source and target files are paired one to one (globs in sorted order)"
        )
    return list(zip(sides[0], sides[1]))


def split_files(config, split: str) -> tuple[Path, Path]:
    """(source file, target file) of a split made of one file per side (see
    :func:`split_file_pairs` for sharded splits)."""
    pairs = split_file_pairs(config, split)
    if len(pairs) != 1:
        raise DataError(f"the {split!r} split has {len(pairs)} file pairs, not one")
    return pairs[0]


def open_binary(path: Path):
    """``path`` opened for reading bytes, through gzip when its name ends in ``.gz``."""
    return gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")


@dataclass(frozen=True)
class FileScan:
    """What one pass over a text file found."""

    path: str
    lines: int
    invalid_lines: int  # lines that are not valid UTF-8 (only counted with "replace")
    carriage_returns: int = 0  # "\r" not followed by "\n": dropped by every reader (see _iter_lines)
    nul_bytes: int = 0  # "\0" bytes: SentencePiece reads each as an unknown piece
    first_nul_line: int = 0  # 1-based line of the first "\0" (0: none)

    def warn(self) -> None:
        if self.nul_bytes:
            say(f"data: warning: {self.path} has {self.nul_bytes:,} NUL byte(s) (\\0), the first on line "
                f"{self.first_nul_line:,}: the tokenizer reads each as <unk>, in training and translation alike; "
                "if they are not meant to be there, remove them (tr -d '\\000')")
        if self.carriage_returns:
            say(f"data: warning: {self.path} has {self.carriage_returns:,} carriage return(s) (\\r) inside lines: "
                "TensorFlow's line reader drops them, joining the text on either side, and so does every reader "
                "of this package (training, vocabulary, references); if they separate words, replace them with "
                "spaces (tr '\\r' ' ')")


_SCAN_CACHE: dict = {}


def scan_text_file(path, invalid_utf8: str = "error", cache_dir=None) -> FileScan:
    """Count lines and check UTF-8, streaming in blocks. Lines are what
    ``tf.data.TextLineDataset`` yields (a last line without newline counts).

    ``invalid_utf8="error"`` raises :class:`DataError` naming file and line at the first
    invalid line; ``"replace"`` counts the invalid lines. Results are kept for the process
    and, with ``cache_dir``, on disk (keyed by path, size and modification time); a scan
    of a large file reports its progress every few seconds.
    """
    path = Path(path)
    try:
        st = path.stat()
    except OSError as e:
        raise DataError(f"cannot read {path}: {e}") from None
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, invalid_utf8)
    if key in _SCAN_CACHE:
        return _SCAN_CACHE[key]
    stored = disk_cache_get(cache_dir, "scan", key)
    if stored is not None and "nul_bytes" in stored:
        result = FileScan(str(path), int(stored["lines"]), int(stored["invalid_lines"]),
                          int(stored["carriage_returns"]), int(stored["nul_bytes"]), int(stored["first_nul_line"]))
        result.warn()
        _SCAN_CACHE[key] = result
        return result
    progress = Progress(f"data: checking {path} ({st.st_size / 1e6:,.0f} MB)", st.st_size, "bytes")

    lines = 0
    invalid = 0
    returns = 0
    nuls = 0
    first_nul = 0

    def check(chunk: bytes) -> int:
        try:
            chunk.decode("utf-8")
            return 0
        except UnicodeDecodeError:
            pass
        bad = 0
        for i, line in enumerate(chunk.split(b"\n")):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as e:
                if invalid_utf8 == "error":
                    raise DataError(
                        f"{path}:{lines + i + 1}: invalid UTF-8 ({e.reason} at byte {e.start} of "
                        f"the line: {line[max(0, e.start - 10): e.start + 10]!r}); fix the file or "
                        "set data.invalid_utf8=replace to replace bad bytes with U+FFFD"
                    ) from None
                bad += 1
        return bad

    def take(chunk: bytes) -> None:  # whole lines, without the last one's newline
        nonlocal lines, invalid, returns, nuls, first_nul
        invalid += check(chunk)
        at = chunk.find(b"\0")
        if at >= 0 and not first_nul:
            first_nul = lines + chunk.count(b"\n", 0, at) + 1
        nuls += chunk.count(b"\0")
        lines += chunk.count(b"\n") + 1
        returns += chunk.count(b"\r") - chunk.count(b"\r\n") - chunk.endswith(b"\r")

    try:
        with open_binary(path) as f:
            rest = b""
            while True:
                block = f.read(_BLOCK)
                if not block:
                    break
                block = rest + block
                cut = block.rfind(b"\n") + 1
                if cut == 0:
                    rest = block
                    continue
                chunk, rest = block[: cut - 1], block[cut:]
                take(chunk)
                progress.update(f.fileobj.tell() if hasattr(f, "fileobj") else f.tell())
            if rest:
                take(rest)
    except (OSError, EOFError, gzip.BadGzipFile) as e:
        raise DataError(f"cannot read {path}: {e}") from None
    progress.done()
    result = FileScan(str(path), lines, invalid, returns, nuls, first_nul)
    result.warn()
    _SCAN_CACHE[key] = result
    disk_cache_put(cache_dir, "scan", key, {"lines": lines, "invalid_lines": invalid, "carriage_returns": returns,
                                            "nul_bytes": nuls, "first_nul_line": first_nul})
    return result


def check_parallel_files(source: Path, target: Path, invalid_utf8: str = "error",
                         cache_dir=None) -> tuple[int, int]:
    """Scan both files; returns (pairs, lines with invalid UTF-8 replaced).

    Raises :class:`DataError` when the line counts differ, naming both files and counts.
    """
    a = scan_text_file(source, invalid_utf8, cache_dir)
    b = scan_text_file(target, invalid_utf8, cache_dir)
    if a.lines != b.lines:
        raise DataError(
            f"parallel files differ in length: {source} has {a.lines:,} lines but {target} has "
            f"{b.lines:,} lines; line i of one must translate line i of the other"
        )
    return a.lines, a.invalid_lines + b.invalid_lines


def check_split_files(config, split: str) -> tuple[list[tuple[Path, Path]], list[int], int]:
    """The file pairs of a split, checked: ``(pairs of files, pairs per file pair, lines with
    invalid UTF-8 replaced)``."""
    cfg = data_section(config)
    files = split_file_pairs(cfg, split)
    counts, replaced = [], 0
    where = cache_dir(cfg)
    for source, target in files:
        n, r = check_parallel_files(source, target, cfg.invalid_utf8, where)
        counts.append(n)
        replaced += r
    return files, counts, replaced


def describe(config, split: str) -> str:
    """Short name of a split's origin for messages, e.g. ``data/multi30k/train.{en,de}.gz``."""
    cfg = data_section(config)
    if cfg.source == "tfds":
        return f"tfds:{cfg.tfds_name}[{_tfds_split(cfg, split)}] ({cfg.source_lang}->{cfg.target_lang})"
    if cfg.source == "prepared":
        return f"prepared:{cfg.prepared_dir}[{split}]"
    files = split_file_pairs(cfg, split)
    if len(files) == 1:
        return _pair_name(*files[0])
    given = (getattr(cfg, f"{split}_source"), getattr(cfg, f"{split}_target"))
    if all(isinstance(v, str) for v in given):
        return f"{_pair_name(Path(given[0]), Path(given[1]))} ({len(files)} file pairs)"
    return f"{_pair_name(*files[0])} and {len(files) - 1} more file pair(s)"


def _pair_name(src: Path, tgt: Path) -> str:
    def rel(p: Path) -> str:
        try:
            return str(p.resolve().relative_to(Path.cwd()))
        except ValueError:
            return str(p)

    a, b = rel(src), rel(tgt)
    # common prefix/suffix: data/multi30k/train.{en,de}.gz
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    j = 0
    while j < min(len(a), len(b)) - i and a[len(a) - 1 - j] == b[len(b) - 1 - j]:
        j += 1
    if i and "/" not in a[i: len(a) - j] + b[i: len(b) - j]:
        return f"{a[:i]}{{{a[i: len(a) - j]},{b[i: len(b) - j]}}}{a[len(a) - j:]}"
    return f"{a} + {b}"


# ---------------------------------------------------------------------------------------
# TFDS
# ---------------------------------------------------------------------------------------


def _tfds_split(cfg, split: str) -> str:
    _check_split(split)
    return {"train": cfg.tfds_train_split, "valid": cfg.tfds_valid_split, "test": cfg.tfds_test_split}[split]


def tfds_builder(config):
    """The prepared TFDS builder of ``data.tfds_name`` (language keys checked)."""
    cfg = data_section(config)
    import tensorflow_datasets as tfds

    where = cfg.tfds_data_dir or "the default TFDS data_dir (~/tensorflow_datasets)"
    try:
        builder = tfds.builder(cfg.tfds_name, data_dir=cfg.tfds_data_dir)
    except Exception as e:  # noqa: BLE001  (DatasetNotFoundError, config and version errors)
        raise DataError(f"data.tfds_name={cfg.tfds_name!r}: {str(e).splitlines()[0]}") from None
    if not builder.is_prepared():
        if not cfg.tfds_download:
            raise DataError(
                f"TFDS dataset {cfg.tfds_name!r} is not prepared in {where}; prepare it once where "
                f"the network is reachable (tfds build {cfg.tfds_name} --data_dir DIR) and set "
                "data.tfds_data_dir=DIR, or set data.tfds_download=true"
            )
        print(f"data: downloading and preparing {cfg.tfds_name} in {where}", file=sys.stderr)
        try:
            builder.download_and_prepare()
        except Exception as e:  # noqa: BLE001  (network, disk and TFDS' own errors, of many types)
            first = " ".join(str(e).split())[:300] or type(e).__name__
            raise DataError(f"TFDS dataset {cfg.tfds_name!r} could not be downloaded and prepared in {where} "
                            f"({type(e).__name__}: {first}); without network access, prepare it where the network "
                            f"is reachable (tfds build {cfg.tfds_name} --data_dir DIR), copy DIR here and set "
                            "data.tfds_data_dir=DIR") from None
    keys = list(builder.info.features.keys())
    for field in ("source_lang", "target_lang"):
        lang = getattr(cfg, field)
        if lang not in keys:
            raise DataError(
                f"data.{field}={lang!r} is not a feature of {cfg.tfds_name!r} (features: {', '.join(keys)})"
            )
    return builder


def _tfds_split_checked(builder, cfg, split: str) -> str:
    name = _tfds_split(cfg, split)
    known = list(builder.info.splits.keys())
    base = name.split("[")[0]
    if base not in known:
        field = {"train": "tfds_train_split", "valid": "tfds_valid_split", "test": "tfds_test_split"}[split]
        raise DataError(
            f"data.{field}={name!r} is not a split of {cfg.tfds_name!r} (splits: {', '.join(known)})"
        )
    return name


def tfds_num_examples(config, split: str) -> int:
    cfg = data_section(config)
    builder = tfds_builder(cfg)
    return int(builder.info.splits[_tfds_split_checked(builder, cfg, split)].num_examples)


# ---------------------------------------------------------------------------------------
# Datasets of raw pairs and Python lists
# ---------------------------------------------------------------------------------------


def num_parts(config, split: str) -> int:
    """How many units a split can be divided into without reading all of it: file pairs
    (text, Multi30k) or TFDS shards; 1 for a single file pair."""
    cfg = data_section(config)
    if cfg.source == "tfds":
        builder = tfds_builder(cfg)
        name = _tfds_split_checked(builder, cfg, split)
        return max(1, int(builder.info.splits[name].num_shards))
    return len(split_file_pairs(cfg, split))


def _text_lines(path):
    """``TextLineDataset`` of a path tensor or string; gzip when the name ends in ``.gz``."""
    import tensorflow as tf

    path = tf.convert_to_tensor(path, tf.string)
    kind = tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")
    return tf.data.TextLineDataset(path, compression_type=kind)


def pair_dataset(config, split: str, shuffle_files: bool = False, seed: int = 0, part: int = 0,
                 parts: int = 1, interleave: int = 16):
    """``tf.data.Dataset`` of raw ``(source, target)`` ``tf.string`` scalars.

    Text files are checked first (:func:`check_split_files`). Several file pairs are read
    ``interleave`` at a time, one line of each in turn (so sub-corpora mix), in file order
    or, with ``shuffle_files``, in an order drawn from ``seed`` that changes every
    repetition. ``part`` of ``parts`` selects a share: whole file pairs (TFDS shards) when
    there are at least ``parts`` of them, else every ``parts``-th pair.

    Returns ``(dataset, pairs, replaced)`` where ``pairs`` is the number of pairs of the whole
    split and ``replaced`` the number of lines with invalid UTF-8 (text sources with
    "replace"; ``None`` for TFDS).
    """
    import tensorflow as tf

    cfg = data_section(config)
    if cfg.source == "tfds":
        import tensorflow_datasets as tfds

        builder = tfds_builder(cfg)
        name = _tfds_split_checked(builder, cfg, split)
        by_file = parts > 1 and int(builder.info.splits[name].num_shards) >= parts
        context = None
        if by_file:
            context = tf.distribute.InputContext(num_input_pipelines=parts, input_pipeline_id=part)
        ds = builder.as_dataset(
            split=name,
            shuffle_files=shuffle_files,
            read_config=tfds.ReadConfig(shuffle_seed=seed, try_autocache=False, input_context=context),
        )
        if parts > 1 and not by_file:
            ds = ds.shard(parts, part)
        src, tgt = cfg.source_lang, cfg.target_lang
        ds = ds.map(lambda ex: (ex[src], ex[tgt]), num_parallel_calls=tf.data.AUTOTUNE)
        return ds, int(builder.info.splits[name].num_examples), None
    files, counts, replaced = check_split_files(cfg, split)
    by_file = parts > 1 and len(files) >= parts
    if by_file:
        files = files[part::parts]
    if len(files) == 1:
        ds = tf.data.Dataset.zip((_text_lines(str(files[0][0])), _text_lines(str(files[0][1]))))
    else:
        names = tf.data.Dataset.from_tensor_slices(([str(a) for a, _ in files], [str(b) for _, b in files]))
        if shuffle_files:
            names = names.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
        ds = names.interleave(
            lambda a, b: tf.data.Dataset.zip((_text_lines(a), _text_lines(b))),
            cycle_length=min(len(files), interleave), block_length=1,
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if parts > 1 and not by_file:
        ds = ds.shard(parts, part)
    return ds, sum(counts), replaced


def _decode(raw: bytes, mode: str, where) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if mode == "replace":
            return raw.decode("utf-8", errors="replace")
        raise DataError(
            f"{where}: invalid UTF-8 ({e.reason}); set data.invalid_utf8=replace to replace bad bytes"
        ) from None


def _iter_lines(path: Path, mode: str) -> Iterator[str]:
    """The lines of ``path`` as ``tf.data.TextLineDataset`` reads them for training: split at
    ``\n``, every ``\r`` dropped (its line reader drops them anywhere in a line, not only before
    the newline), so that references, vocabulary and training see the same text; a UTF-8 byte
    order mark at the start of the file is dropped too (SentencePiece drops it in training)."""
    with open_binary(path) as f:
        for i, raw in enumerate(f):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if b"\r" in raw:
                raw = raw.replace(b"\r", b"")
            if i == 0 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            yield _decode(raw, mode, f"{path}:{i + 1}")


def read_parallel_text(config, split: str) -> tuple[list[str], list[str]]:
    """All pairs of a split as Python strings (stripped), in file order, for evaluation.

    Nothing is dropped (empty or long pairs stay, so references line up with the file);
    the same checks as for training apply: equal line counts, UTF-8 per
    ``data.invalid_utf8``.
    """
    cfg = data_section(config)
    _check_split(split)
    if cfg.source == "tfds":
        import tensorflow_datasets as tfds

        builder = tfds_builder(cfg)
        name = _tfds_split_checked(builder, cfg, split)
        sources, targets = [], []
        ds = builder.as_dataset(split=name, shuffle_files=False)
        for i, ex in enumerate(tfds.as_numpy(ds)):
            where = f"tfds:{cfg.tfds_name}[{name}] example {i}"
            sources.append(_decode(ex[cfg.source_lang], cfg.invalid_utf8, where).strip())
            targets.append(_decode(ex[cfg.target_lang], cfg.invalid_utf8, where).strip())
        return sources, targets
    if cfg.source == "prepared":
        from tf_transformer.data.prepared import text_files

        files = [text_files(cfg, split)]
    else:
        files, _, _ = check_split_files(cfg, split)
    sources = [s.strip() for source, _ in files for s in _iter_lines(source, cfg.invalid_utf8)]
    targets = [t.strip() for _, target in files for t in _iter_lines(target, cfg.invalid_utf8)]
    return sources, targets


def training_sentences_count(config) -> tuple[str, int]:
    """(description, number of sentences) that :func:`iter_training_sentences` yields; the
    description says how many lines had invalid UTF-8 replaced, if any."""
    cfg = data_section(config)
    if cfg.source == "tfds":
        return describe(cfg, "train"), 2 * tfds_num_examples(cfg, "train")
    _, counts, replaced = check_split_files(cfg, "train")
    note = f" ({replaced:,} lines with invalid UTF-8 replaced, U+FFFD)" if replaced else ""
    return describe(cfg, "train") + note, 2 * sum(counts)


def iter_training_sentences(config, selected=None) -> Iterator[str]:
    """Every source sentence of the training split, then every target sentence (for the
    shared vocabulary), or only those at the sorted indices ``selected`` of that sequence.
    Not stripped; invalid UTF-8 per ``data.invalid_utf8``. For TFDS the selection runs in
    the graph: only the sampled sentences reach Python."""
    cfg = data_section(config)
    if cfg.source == "tfds":
        import tensorflow as tf
        import tensorflow_datasets as tfds

        builder = tfds_builder(cfg)
        name = _tfds_split_checked(builder, cfg, "train")
        sides = [builder.as_dataset(split=name, shuffle_files=False).map(lambda ex, key=lang: ex[key])
                 for lang in (cfg.source_lang, cfg.target_lang)]
        ds = sides[0].concatenate(sides[1]).enumerate()
        if selected is not None:
            total = 2 * int(builder.info.splits[name].num_examples)
            mask = np.zeros(total, bool)
            mask[np.asarray(selected, np.int64)] = True
            mask_t = tf.constant(mask)
            ds = ds.filter(lambda i, text: tf.gather(mask_t, i))
        for i, raw in tfds.as_numpy(ds.prefetch(tf.data.AUTOTUNE)):
            yield _decode(raw, cfg.invalid_utf8, f"tfds:{cfg.tfds_name}[{name}] sentence {i}")
        return
    files, _, _ = check_split_files(cfg, "train")
    chosen = iter(selected) if selected is not None else None
    want = next(chosen, None) if chosen is not None else None
    i = 0
    for side in (0, 1):
        for pair in files:
            for text in _iter_lines(pair[side], cfg.invalid_utf8):
                if chosen is None or i == want:
                    yield text
                    if chosen is not None:
                        want = next(chosen, None)
                        if want is None:
                            return
                i += 1


__all__ = [
    "SPLITS",
    "FileScan",
    "bundled_multi30k_dir",
    "check_parallel_files",
    "check_split_files",
    "data_section",
    "describe",
    "iter_training_sentences",
    "multi30k_dir",
    "num_parts",
    "pair_dataset",
    "read_parallel_text",
    "scan_text_file",
    "split_file_pairs",
    "split_files",
    "tfds_builder",
    "training_sentences_count",
]

