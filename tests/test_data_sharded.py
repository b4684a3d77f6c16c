"""Sharded corpora (globs, lists), the on-disk statistics cache, prepared TFRecord shards,
parallel pipelines, sharding by file and the tf.data service."""

import dataclasses
import json
import os
from collections import Counter

import numpy as np
import pytest

from tests.helpers.corpora import write_tiny_parallel_corpus
from tf_transformer.config import ConfigError, DataConfig, load_config
from tf_transformer.data import Tokenizer, batching, build_vocab, dataset_statistics, make_dataset, sources
from tf_transformer.data import prepared as prep
from tf_transformer.errors import DataError


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded")
    for i in range(4):
        write_tiny_parallel_corpus(root, sizes=((f"part{i}", 40 + 10 * i),), seed=i)
    write_tiny_parallel_corpus(root, sizes=(("valid", 25),), seed=9)
    return root


def text_cfg(root, **kw):
    kw.setdefault("stats_cache_dir", str(root / "cache"))
    return DataConfig(source="text", train_source=str(root / "part*.en"), train_target=str(root / "part*.de"),
                      valid_source=str(root / "valid.en"), valid_target=str(root / "valid.de"), vocab_size=40,
                      tokens_per_batch=200, max_length=24, **kw)


@pytest.fixture(scope="module")
def tok(corpus):
    build_vocab(text_cfg(corpus), corpus / "spm", progress=lambda m: None)
    return Tokenizer(corpus / "spm.model")


def lines(path):
    return path.read_text().splitlines()


def all_pairs(root, parts=range(4)):
    return [pair for i in parts for pair in zip(lines(root / f"part{i}.en"), lines(root / f"part{i}.de"))]


def expected_ids(tok, pairs, max_length=24):
    src = tok.encode([a for a, _ in pairs])
    tgt = tok.encode([b for _, b in pairs])
    return Counter((tuple(s), tuple(t)) for s, t in zip(src, tgt)
                   if s and t and len(s) <= max_length and len(t) + 1 <= max_length)


def id_pairs(ds):
    out = Counter()
    for (src, _), tgt_out in ds.as_numpy_iterator():
        for s, t in zip(src, tgt_out):
            t = [int(v) for v in t if v != 0]
            assert t[-1] == 3
            out[(tuple(int(v) for v in s if v != 0), tuple(t[:-1]))] += 1
    return out


def test_globs_and_lists_pair_file_by_file_in_sorted_order(corpus):
    files = sources.split_file_pairs(text_cfg(corpus), "train")
    assert [(a.name, b.name) for a, b in files] == [(f"part{i}.en", f"part{i}.de") for i in range(4)]
    # a list of a glob and a path: each glob sorted, the list's order kept
    cfg = dataclasses.replace(text_cfg(corpus), train_source=[str(corpus / "part3.en"), str(corpus / "part[01].en")],
                              train_target=[str(corpus / "part3.de"), str(corpus / "part[01].de")])
    files = sources.split_file_pairs(cfg, "train")
    assert [a.name for a, _ in files] == ["part3.en", "part0.en", "part1.en"]
    assert [b.name for _, b in files] == ["part3.de", "part0.de", "part1.de"]
    ds, n, replaced = sources.pair_dataset(cfg, "train")
    got = Counter((a.decode(), b.decode()) for a, b in ds.as_numpy_iterator())
    assert n == sum(got.values()) == 70 + 40 + 50 and replaced == 0
    assert got == Counter(all_pairs(corpus, (3, 0, 1)))
    src, tgt = sources.read_parallel_text(cfg, "train")
    assert list(zip(src, tgt)) == all_pairs(corpus, (3, 0, 1))  # read in the list's order
    # several files are read one line of each in turn: the sub-corpora mix
    first = [a.decode() for a, _ in list(ds.as_numpy_iterator())[:3]]
    assert first == [lines(corpus / f"part{i}.en")[0] for i in (3, 0, 1)]


def test_mismatched_file_counts_and_lengths_name_both_sides(corpus, tmp_path):
    cfg = dataclasses.replace(text_cfg(corpus), train_target=str(corpus / "part[012].de"))
    with pytest.raises(DataError) as e:
        sources.split_file_pairs(cfg, "train")
    text = str(e.value)
    assert "part*.en" in text and "names 4 file(s)" in text and "part[012].de" in text and "names 3" in text
    (tmp_path / "a.en").write_text("x\ny\nz\n")
    (tmp_path / "a.de").write_text("x\ny\n")
    cfg = dataclasses.replace(cfg, train_source=[str(corpus / "part0.en"), str(tmp_path / "a.en")],
                              train_target=[str(corpus / "part0.de"), str(tmp_path / "a.de")])
    with pytest.raises(DataError, match=r"a\.en has 3 lines but .*a\.de has 2 lines"):
        sources.pair_dataset(cfg, "train")
    cfg = dataclasses.replace(cfg, train_source=str(tmp_path / "nothing*.en"))
    with pytest.raises(DataError, match=r"nothing\*\.en.*data\.train_source, train split\) matches no file"):
        sources.split_file_pairs(cfg, "train")


def test_config_takes_a_path_a_glob_or_a_list(tmp_path):
    cfg = load_config("multi30k_small", ["data.source=text", "data.train_source=[a.en, b.en]",
                                         "data.train_target=c/*.de"])
    assert cfg.data.train_source == ["a.en", "b.en"] and cfg.data.train_target == "c/*.de"
    with pytest.raises(ConfigError, match=r"data.train_source=\[1, 2\] must be str or list"):
        load_config("multi30k_small", ["data.train_source=[1, 2]"])
    with pytest.raises(ConfigError, match=r"data.train_target=\['a', ''\] must be a path, a glob or a non-empty"):
        load_config("multi30k_small", ["data.source=text", "data.train_source=a", "data.train_target=[a, '']"])


def test_statistics_are_cached_on_disk_reused_and_invalidated(corpus, tok, tmp_path, monkeypatch):
    import shutil

    root = tmp_path / "c"
    shutil.copytree(corpus, root, ignore=shutil.ignore_patterns("cache", "spm*"))
    cfg = text_cfg(root, stats_cache_dir=str(tmp_path / "cache"))
    first = dataset_statistics(cfg, "train", tok)
    assert first.pairs == 40 + 50 + 60 + 70
    assert first.kept == sum(expected_ids(tok, all_pairs(root)).values())
    assert len(list((tmp_path / "cache").glob("stats-*.json"))) == 1

    passes = []
    real = sources.pair_dataset

    def counting(*a, **k):
        passes.append(1)
        return real(*a, **k)

    monkeypatch.setattr(sources, "pair_dataset", counting)
    batching._STATS_CACHE.clear()  # a new process: only the disk cache is left
    sources._SCAN_CACHE.clear()
    assert dataset_statistics(cfg, "train", tok) == first and passes == []  # reused, no pass
    # another max_length: a new key, a new pass
    other = dataset_statistics(dataclasses.replace(cfg, max_length=12), "train", tok)
    assert passes == [1] and other.kept < first.kept
    # a changed file: new size and mtime, a new pass that sees the new line
    with open(root / "part2.en", "a") as f:
        f.write("a man\n")
    with open(root / "part2.de", "a") as f:
        f.write("ein mann\n")
    batching._STATS_CACHE.clear()
    changed = dataset_statistics(cfg, "train", tok)
    assert passes == [1, 1] and changed.pairs == first.pairs + 1 and changed.kept == first.kept + 1
    # the cache switched off: no file written
    batching._STATS_CACHE.clear()
    dataset_statistics(dataclasses.replace(cfg, stats_cache=False, max_length=13), "train", tok)
    assert len(list((tmp_path / "cache").glob("stats-*.json"))) == 3
    # the line counts of the text files are cached too
    assert list((tmp_path / "cache").glob("scan-*.json"))


def test_progress_is_reported_during_long_passes():
    from tf_transformer.data.cache import Progress

    said = []
    p = Progress("data train: counting", 1000, "pairs", said.append, every=0.0)
    p.update(250)
    p.done()
    assert said[0].startswith("data train: counting: 25% (250 of 1,000 pairs)") and "left" in said[0]
    assert said[1].startswith("data train: counting: done in")
    quiet = []
    p = Progress("x", 10, "pairs", quiet.append, every=3600)
    p.update(5)
    p.done()
    assert quiet == []  # a short pass prints nothing


@pytest.fixture(scope="module")
def prepared_dir(corpus, tok, tmp_path_factory):
    out = tmp_path_factory.mktemp("prep") / "corpus"
    prep.prepare(text_cfg(corpus), out, tok, shards=3, log=lambda m: None)
    return out


def test_prepared_shards_give_the_same_ids_as_the_text_path(corpus, tok, prepared_dir):
    cfg = text_cfg(corpus)
    pcfg = dataclasses.replace(cfg, source="prepared", prepared_dir=str(prepared_dir))
    manifest = json.loads((prepared_dir / "manifest.json").read_text())
    assert manifest["vocabulary"]["sha256"] == prep.vocabulary_hash(tok.model_proto)
    train = manifest["splits"]["train"]
    assert train["pairs_read"] == 220 and sum(f["pairs"] for f in train["files"]) == train["pairs"] == 220
    assert len(train["files"]) == 3 and all((prepared_dir / f["name"]).is_file() for f in train["files"])
    # training: the same multiset of id pairs over one pass; validation: the same batches
    want = expected_ids(tok, all_pairs(corpus))
    assert id_pairs(make_dataset(pcfg, "train", tok, repeat=False, verbose=False)) == want
    assert id_pairs(make_dataset(cfg, "train", tok, repeat=False, verbose=False)) == want
    # more pipelines than shards: each takes every 4th record of the shards in one shuffled order
    more = dataclasses.replace(pcfg, parallel_pipelines=4)
    for seed in (5, 6):
        assert id_pairs(make_dataset(more, "train", tok, seed=seed, repeat=False, verbose=False)) == want, seed
    a = list(make_dataset(cfg, "valid", tok, training=False, verbose=False).as_numpy_iterator())
    b = list(make_dataset(pcfg, "valid", tok, training=False, verbose=False).as_numpy_iterator())
    assert len(a) == len(b) > 1
    for x, y in zip(a, b):
        for u, v in zip((x[0][0], x[0][1], x[1]), (y[0][0], y[0][1], y[1])):
            np.testing.assert_array_equal(u, v)
    # the manifest answers the statistics for any max_length, as a pass over the text would
    for max_length in (24, 10):
        text_stats = dataset_statistics(dataclasses.replace(cfg, max_length=max_length), "train", tok)
        prep_stats = dataset_statistics(dataclasses.replace(pcfg, max_length=max_length), "train", tok)
        # (the text pass also counts pairs by (source, target) length, for the bucket plan; a manifest does not)
        assert prep_stats.length_pairs is None and sum(n for _, _, n in text_stats.length_pairs) == text_stats.kept
        text_stats = dataclasses.replace(text_stats, origin="", length_pairs=None)
        assert dataclasses.replace(prep_stats, origin="") == text_stats
    assert sources.read_parallel_text(pcfg, "valid") == sources.read_parallel_text(cfg, "valid")
    # the training shards are shuffled: not in file order
    import tensorflow as tf

    records = [prep.parse_examples(tf.constant([r.numpy()]))[0][0].numpy().tolist()
               for r in tf.data.TFRecordDataset(str(prepared_dir / train["files"][0]["name"])).take(5)]
    file_order = [s for s, _ in zip(tok.encode([a for a, _ in all_pairs(corpus)]), range(5))]
    assert records != file_order


def test_prepared_records_are_tf_train_examples_and_vocabulary_is_checked(corpus, tok, prepared_dir, tmp_path):
    import tensorflow as tf

    ids = tf.ragged.constant([[5, 200, 70000], [1]], dtype=tf.int32)
    serialized = prep.encode_examples(ids, tf.ragged.constant([[3], [2**30, 0]], dtype=tf.int32)).numpy()
    example = tf.train.Example.FromString(serialized[0])
    assert list(example.features.feature["source"].int64_list.value) == [5, 200, 70000]
    assert list(tf.train.Example.FromString(serialized[1]).features.feature["target"].int64_list.value) == [2**30, 0]
    other = tmp_path / "other"
    build_vocab(dataclasses.replace(text_cfg(corpus), vocab_size=30), other, progress=lambda m: None)
    pcfg = dataclasses.replace(text_cfg(corpus), source="prepared", prepared_dir=str(prepared_dir))
    with pytest.raises(DataError, match="prepared with another vocabulary"):
        make_dataset(pcfg, "train", Tokenizer(str(other) + ".model"), verbose=False)
    with pytest.raises(DataError, match="already holds a prepared corpus"):
        prep.prepare(text_cfg(corpus), prepared_dir, tok, log=lambda m: None)
    with pytest.raises(DataError, match="manifest.json does not exist"):
        make_dataset(dataclasses.replace(pcfg, prepared_dir=str(tmp_path)), "train", tok, verbose=False)


def test_parallel_pipelines_and_workers_shard_by_file(corpus, tok):
    import tensorflow as tf

    want = expected_ids(tok, all_pairs(corpus))
    for k in (1, 3, 5):  # 5 pipelines over 4 file pairs: every 5th pair of one stream each
        cfg = text_cfg(corpus, parallel_pipelines=k)
        assert id_pairs(make_dataset(cfg, "train", tok, repeat=False, verbose=False)) == want
        for seed in (5, 6):  # the shuffled file order is the same in every pipeline: disjoint shares
            assert id_pairs(make_dataset(cfg, "train", tok, seed=seed, repeat=False, verbose=False)) == want, seed
        a = list(make_dataset(cfg, "train", tok, seed=3, verbose=False).take(12).as_numpy_iterator())
        b = list(make_dataset(cfg, "train", tok, seed=3, verbose=False).take(12).as_numpy_iterator())
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x[0][0], y[0][0])
    # two workers, four file pairs: each reads whole files of its own (0, 2 and 1, 3)
    cfg = text_cfg(corpus, parallel_pipelines=1)
    for worker, parts in ((0, (0, 2)), (1, (1, 3))):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker, num_replicas_in_sync=2)
        got = id_pairs(make_dataset(cfg, "train", tok, input_context=ctx, repeat=False, verbose=False))
        assert got == expected_ids(tok, all_pairs(corpus, parts))
    # two workers x two pipelines over four files: one file each, together all of them; two
    # workers x three pipelines: two files a worker, each pipeline every 3rd pair of them
    for k in (2, 3):
        cfg = text_cfg(corpus, parallel_pipelines=k)
        total = Counter()
        for worker in (0, 1):
            ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker, num_replicas_in_sync=2)
            total += id_pairs(make_dataset(cfg, "train", tok, input_context=ctx, seed=5, repeat=False, verbose=False))
        assert total == want, k


def test_tf_data_service_on_loopback_yields_the_same_examples(corpus, tok):
    import tensorflow as tf

    dispatcher = tf.data.experimental.service.DispatchServer()
    address = dispatcher.target.split("://")[1]
    worker = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=address))
    try:
        local = id_pairs(make_dataset(text_cfg(corpus), "train", tok, repeat=False, verbose=False))
        for mode in ("distributed_epoch", "parallel_epochs"):
            cfg = text_cfg(corpus, service=dispatcher.target, service_mode=mode, parallel_pipelines=2)
            served = id_pairs(make_dataset(cfg, "train", tok, repeat=False, verbose=False))
            assert served == local
    finally:
        worker.stop()
        dispatcher.stop()


def test_an_unreachable_dispatcher_is_named_instead_of_waited_for(corpus, tok):
    """TensorFlow waits for a dispatcher that does not answer without a word, forever: also
    for an address where something else listens (this used to hang)."""
    import http.server
    import socket
    import threading

    import tensorflow as tf

    from tf_transformer.data.batching import check_dispatcher

    with socket.socket() as s:  # a loopback port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = text_cfg(corpus, service=f"grpc://127.0.0.1:{port}")
    with pytest.raises(DataError, match=rf"data.service=grpc://127.0.0.1:{port}: no tf.data service dispatcher "
                                        rf"answers at 127.0.0.1:{port}"):
        make_dataset(cfg, "train", tok, repeat=False, verbose=False)
    # something listens there, but it is not a dispatcher: a tf.data worker, a silent listener, HTTP/1
    dispatcher = tf.data.experimental.service.DispatchServer()
    worker = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=dispatcher.target.split("://")[1]))
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    web = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        check_dispatcher(dispatcher.target)  # the real one passes
        for where, said in ((worker._address, "a gRPC server that is not a tf.data service dispatcher"),
                            (f"127.0.0.1:{silent.getsockname()[1]}", "DEADLINE_EXCEEDED"),
                            (f"127.0.0.1:{web.server_port}", "UNAVAILABLE")):
            with pytest.raises(DataError, match=f"data.service={where}: .* is .*{said}.*data.service must name "
                                                "the dispatcher"):
                check_dispatcher(where, timeout=2.0)
    finally:
        web.shutdown()
        silent.close()
        worker.stop()
        dispatcher.stop()
    # (a DataConfig made in Python is checked as a config file is: the config's own error)
    with pytest.raises(ConfigError, match="data.service='nowhere' must be a dispatcher address"):
        make_dataset(text_cfg(corpus, service="nowhere"), "train", tok, repeat=False, verbose=False)


def test_tft_prepare_command(corpus, tok, tmp_path, capsys):
    from tf_transformer.cli import main

    config = tmp_path / "c.yaml"
    config.write_text(json.dumps({"data": dataclasses.asdict(text_cfg(corpus, vocab_model=str(corpus / "spm.model")))}))
    out = tmp_path / "p"
    assert main(["prepare", "--config", str(config), "--output", str(out), "--shards", "2"]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}: 220 training pairs" in printed and "in 2 shards" in printed and "valid 25 pairs" in printed
    assert main(["prepare", "--config", str(config), "--output", str(out)]) == 2
    assert "(--force)" in capsys.readouterr().err
    assert os.path.isfile(out / "vocab.model")


@pytest.mark.parametrize("cores, expected", [(1, 1), (3, 3), (40, 16)])
def test_one_pipeline_per_usable_core(monkeypatch, cores, expected):
    """parallel_pipelines 0 counts the cores this process may run on (taskset, CPU sets),
    not the machine's, and stops at 16; an explicit count is kept."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert batching.resolve_pipelines(DataConfig(parallel_pipelines=0)) == expected
    assert batching.resolve_pipelines(DataConfig(parallel_pipelines=5)) == 5


@pytest.fixture
def small_chunks(monkeypatch):
    """Groups of 4 pairs, so that the tiny corpus spans ramp-up chunks and full chunks."""
    monkeypatch.setattr(batching, "_TOKENIZE_BATCH", 4)


@pytest.mark.parametrize("pipelines", [1, 2])
def test_sorted_chunks_keep_every_pair_once_within_the_budget(corpus, tok, small_chunks, pipelines):
    """batching: sorted_chunks: one epoch holds every kept pair exactly once (ramp-up chunks
    and full chunks alike), every batch keeps both sides within the token budget, and all
    rows of a batch fall in one length bucket of max(source, BOS+target)."""
    # 64 pairs per pipeline's chunk: 16 ramp-up chunks of one 4-pair group, then full ones
    cfg = text_cfg(corpus, batching="sorted_chunks", shuffle_buffer=64 * pipelines, parallel_pipelines=pipelines)
    ds = make_dataset(cfg, "train", tok, repeat=False, verbose=False)
    assert id_pairs(ds) == expected_ids(tok, all_pairs(corpus))
    bounds = batching.bucket_bounds(cfg.max_length, cfg.bucket_width)
    sizes = []
    for (src, tgt_in), tgt_out in ds.as_numpy_iterator():
        rows = src.shape[0]
        assert rows * src.shape[1] <= cfg.tokens_per_batch and rows * tgt_in.shape[1] <= cfg.tokens_per_batch
        longest = np.maximum((src != 0).sum(1), (tgt_out != 0).sum(1))  # y+EOS = BOS+y
        buckets = np.searchsorted(bounds, longest, side="left")
        assert len(set(buckets)) == 1, buckets
        assert rows <= cfg.tokens_per_batch // bounds[buckets[0]]
        sizes.append(rows)
    assert max(sizes) > 4  # full chunks make batches larger than one 4-pair group could


def _fairseq_cut(longest, budget):
    """NumPy reference of the greedy cut (fairseq's batch_by_size without a sentence cap):
    walk the pairs in order, open a new batch when one more row would exceed the budget."""
    batches, rows, widest, batch = [], 0, 0, 0
    for n in longest:
        if rows and (rows + 1) * max(widest, n) > budget:
            batch, rows, widest = batch + 1, 0, 0
        rows, widest = rows + 1, max(widest, n)
        batches.append(batch)
    return batches


@pytest.mark.parametrize("budget", [7, 40, 200])
def test_greedy_cut_matches_the_reference(budget):
    rng = np.random.default_rng(budget)
    longest = np.sort(rng.integers(1, 25, size=300))[::-1].copy()
    rng.shuffle(longest[100:200])  # descending, shuffled and ascending stretches
    longest[200:] = np.sort(longest[200:])
    longest[50] = budget + 3  # a pair over the budget is a batch of its own
    got = batching._greedy_batches(longest.astype(np.int64), budget).numpy().tolist()
    want = _fairseq_cut(longest.tolist(), budget)
    assert got == want
    assert got[50] == got[49] + 1 and got[51] == got[50] + 1
    assert batching._greedy_batches(np.zeros([0], np.int64), budget).numpy().size == 0


@pytest.mark.parametrize("pipelines", [1, 2])
def test_source_sorted_batches_are_fairseq_like(corpus, tok, small_chunks, pipelines):
    """batching: source_sorted: one epoch holds every kept pair exactly once, no side of a batch
    exceeds the budget (padding included), each batch's rows are in (source length, target
    length) order, and target lengths in a batch are not held to one bucket. (Where the cut
    falls is checked against the NumPy reference above.)"""
    cfg = text_cfg(corpus, batching="source_sorted", shuffle_buffer=64 * pipelines, parallel_pipelines=pipelines)
    ds = make_dataset(cfg, "train", tok, repeat=False, verbose=False)
    assert id_pairs(ds) == expected_ids(tok, all_pairs(corpus))
    budget, spans = cfg.tokens_per_batch, []
    for (src, tgt_in), tgt_out in ds.as_numpy_iterator():
        rows = src.shape[0]
        s_len, t_len = (src != 0).sum(1), (tgt_out != 0).sum(1)  # y+EOS = BOS+y
        assert src.shape[1] == s_len.max() and tgt_in.shape[1] == t_len.max()
        assert rows * max(src.shape[1], tgt_in.shape[1]) <= budget
        keys = list(zip(s_len.tolist(), t_len.tolist()))
        assert keys == sorted(keys)
        spans.append(int(t_len.max() - t_len.min()))
    assert max(spans) > 2  # target lengths within a batch are not held to a 2-token bucket


@pytest.mark.parametrize("batching_mode", ["sorted_chunks", "source_sorted"])
def test_sorted_chunks_are_deterministic_resumable_and_reshuffled(corpus, tok, small_chunks, batching_mode):
    cfg = text_cfg(corpus, batching=batching_mode, shuffle_buffer=64, parallel_pipelines=2)

    def first(n, seed=5, skip=0):
        ds = make_dataset(cfg, "train", tok, seed=seed, verbose=False, skip=skip).take(n)
        return [tuple(map(bytes, (s, t))) for (s, _), t in ds.as_numpy_iterator()]

    stream = first(60)
    assert first(60) == stream
    assert first(50, skip=10) == stream[10:]
    assert first(60, seed=6) != stream
    # later epochs group the pairs anew: the repeated stream is not the first epoch again
    epoch = len(list(make_dataset(cfg, "train", tok, seed=5, repeat=False, verbose=False)))
    two = first(2 * epoch)
    assert two[:60] == stream and two[epoch:] != two[:epoch]


@pytest.mark.parametrize("batching_mode", ["buckets", "sorted_chunks", "source_sorted"])
def test_prepared_shards_resume_at_the_same_batch(corpus, tok, prepared_dir, small_chunks, batching_mode):
    """A resume over prepared shards (skip = the batches already trained on) continues the
    very stream a straight run sees: the same shard, the same offset in it."""
    cfg = dataclasses.replace(text_cfg(corpus, batching=batching_mode, shuffle_buffer=64, parallel_pipelines=2),
                              source="prepared", prepared_dir=str(prepared_dir))

    def first(n, seed=5, skip=0):
        ds = make_dataset(cfg, "train", tok, seed=seed, verbose=False, skip=skip).take(n)
        return [tuple(map(bytes, (s, t))) for (s, _), t in ds.as_numpy_iterator()]

    stream = first(40)
    assert len(set(stream)) > 30  # real batches, not one repeated
    assert first(40) == stream
    assert first(33, skip=7) == stream[7:]
    assert first(40, seed=6) != stream


def test_batching_mode_is_checked():
    expected = r"data.batching='sorted' is not one of 'buckets', 'sorted_chunks', 'source_sorted'"
    with pytest.raises(ConfigError, match=expected):
        DataConfig(batching="sorted").validate()


def test_a_missing_prepared_dir_is_named_before_a_vocabulary_is_built(tmp_path):
    """``data.source: prepared`` with a folder that does not exist: the error names it and says
    what it should be, instead of building a vocabulary into it (leaving an empty folder) and
    then failing on the missing split."""
    from tf_transformer.config import Config
    from tf_transformer.data.tokenizer import resolve_vocabulary

    cfg = Config()
    cfg.data.source, cfg.data.prepared_dir = "prepared", str(tmp_path / "nope")
    messages = []
    with pytest.raises(DataError, match=r"nope/manifest.json does not exist: data.prepared_dir must be a folder "
                                        r"written by prepare"):
        resolve_vocabulary(cfg, tmp_path / "run" / "vocab.model", log=messages.append)
    assert messages == [] and not (tmp_path / "nope").exists() and not (tmp_path / "run").exists()


def test_a_cut_shard_is_named_before_training_reads_it(corpus, tok, prepared_dir, tmp_path):
    """A shard shorter than prepare wrote it (a copy cut short) ended training in TensorFlow's
    ``DataLossError: truncated record`` without a file name; the manifest records each shard's
    size, so the shard is named before any batch is read."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(prepared_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    shard = copy / manifest["splits"]["train"]["files"][1]["name"]
    assert shard.stat().st_size == manifest["splits"]["train"]["files"][1]["bytes"]
    shard.write_bytes(shard.read_bytes()[:-7])
    pcfg = dataclasses.replace(text_cfg(corpus), source="prepared", prepared_dir=str(copy))
    with pytest.raises(DataError, match=rf"{shard} is [\d,]+ bytes but .*manifest.json says [\d,]+: the shard was cut"):
        make_dataset(pcfg, "train", tok, verbose=False)


def test_a_corrupted_record_met_in_training_is_a_data_error_naming_the_corpus(corpus, tok, prepared_dir, tmp_path):
    """One flipped byte keeps a shard's size: TensorFlow finds it when the record is read, in the
    middle of training, and says ``DataLossError: corrupted record`` without a file name; the run
    now ends with a data error naming the damaged shard (found by reading the shards again), what
    TensorFlow found there and what to do."""
    import shutil

    from tests.helpers.synthetic import tiny_config
    from tf_transformer.training import train

    copy = tmp_path / "copy"
    shutil.copytree(prepared_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    entry = manifest["splits"]["train"]["files"][1]  # one shard: it is named
    shard = copy / entry["name"]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    cfg = tiny_config(tok.vocab_size, str(tmp_path / "run"), train_steps=4, steps_per_epoch=2, warmup_steps=2)
    cfg.model.num_layers, cfg.model.d_model, cfg.model.d_ff = 1, 16, 32
    cfg.data = dataclasses.replace(text_cfg(corpus), source="prepared", prepared_dir=str(copy),
                                   vocab_model=str(corpus / "spm.model"))
    cfg.train.train_steps = cfg.train.steps_per_epoch = 200  # long enough to read every shard
    said = []
    with pytest.raises(DataError, match=rf"data.prepared_dir={copy}: shard {shard} is damaged \((corrupted|truncated) "
                                        r"record at \d+\); prepare the corpus"):
        train(cfg, valid_data=False, verbose=0, log=said.append)
    assert "train: a training shard is damaged; reading every shard to find which" in said
