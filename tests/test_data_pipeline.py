"""Token-budget batches, target shift, sources and their checks (text files, Multi30k)."""

import dataclasses
import gzip
import itertools
from collections import Counter

import numpy as np
import pytest

from tf_transformer.config import ConfigError, DataConfig, load_config
from tf_transformer.data import (
    Tokenizer,
    batching,
    build_vocab,
    dataset_statistics,
    make_dataset,
    read_parallel_text,
    sources,
)
from tf_transformer.errors import DataError

N = 600


def multi30k_lines(lang, n=N, split="train"):
    with gzip.open(sources.bundled_multi30k_dir() / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def write(path, lines, raw=False):
    data = b"".join(lines) if raw else "".join(line + "\n" for line in lines).encode("utf-8")
    if str(path).endswith(".gz"):
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return str(path)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("pipeline")
    en, de = multi30k_lines("en"), multi30k_lines("de")
    return {
        "root": root,
        "en": en,
        "de": de,
        "en.gz": write(root / "train.en.gz", en),
        "de.gz": write(root / "train.de.gz", de),
        "en.txt": write(root / "train.en.txt", en),
        "de.txt": write(root / "train.de.txt", de),
    }


@pytest.fixture(scope="module")
def tok(corpus, tmp_path_factory):
    cfg = DataConfig(source="text", train_source=corpus["en.txt"], train_target=corpus["de.txt"],
                     vocab_size=500)
    out = tmp_path_factory.mktemp("spm") / "spm"
    build_vocab(cfg, out, progress=lambda m: None)
    return Tokenizer(str(out) + ".model")


def cfg_for(src, tgt, **kw):
    return DataConfig(source="text", train_source=src, train_target=tgt, valid_source=src,
                      valid_target=tgt, **kw)


def batches(ds, n=None):
    it = ds.as_numpy_iterator()
    out = []
    for b in it:
        out.append(b)
        if n is not None and len(out) == n:
            break
    return out


def pairs_of(batch_list):
    """Counter of (source ids, y) over all rows, y read from the labels (pads/EOS removed)."""
    out = Counter()
    for (src, tgt_in), tgt_out in batch_list:
        for s, ti, to in zip(src, tgt_in, tgt_out):
            s = tuple(int(v) for v in s if v != 0)
            y = [int(v) for v in to if v != 0]
            assert y[-1] == 3
            out[(s, tuple(y[:-1]))] += 1
    return out


def test_budget_respected_on_both_sides(corpus, tok):
    for budget, training in ((97, True), (1000, True), (256, False)):
        # without the counting pass every 2-D bucket keeps its own batches (no bucket plan)
        cfg = cfg_for(corpus["en.gz"], corpus["de.gz"], tokens_per_batch=budget, max_length=64, stats_pass=False)
        got = batches(make_dataset(cfg, "train", tok, training=training, verbose=False), 60)
        assert len(got) > 5
        for (src, tgt_in), tgt_out in got:
            assert src.dtype == tgt_in.dtype == tgt_out.dtype == np.int32
            assert src.shape[0] * src.shape[1] <= budget  # padded slots, source side
            assert tgt_in.shape[0] * tgt_in.shape[1] <= budget  # padded slots, target side
            assert tgt_in.shape == tgt_out.shape
            # padded to the longest row of the batch, not further
            assert (src[:, -1] != 0).any() and (tgt_out[:, -1] != 0).any()
        if training:  # training batches are full: the shortest sentences give the most rows
            rows = {}
            for (src, tgt_in), _ in got:
                rows.setdefault(max(src.shape[1], tgt_in.shape[1]), []).append(src.shape[0])
            lengths = sorted(rows)
            assert max(rows[lengths[0]]) > max(rows[lengths[-1]])
            # and fill the budget: B * max(S, T) > budget - max(S, T)
            for (src, tgt_in), _ in got:
                width = max(src.shape[1], tgt_in.shape[1])
                assert src.shape[0] * width > budget - 2 * width


def test_bucket_plan_joins_buckets_too_sparse_for_an_epoch():
    """Pairs per epoch and pipeline against the rows a bucket's batch needs: a dense bucket keeps
    its key; sparse ones share the bucket of their longer side, joined with longer ones until a
    run receives two batches' worth per epoch; batches never exceed the budget."""
    bounds, budget = [2, 4, 8, 16], 64  # rows: budget // max(bounds)
    plan = batching.bucket_plan(bounds, budget, [[3, 3, 100], [8, 16, 3], [16, 8, 2], [2, 4, 5], [16, 16, 2]],
                                shares=2)
    nb = len(bounds)
    assert plan.key[1 * nb + 1] == 1 * nb + 1 and plan.rows[plan.key[5]] == 16  # 50 per epoch >= 2 x 16 rows
    # (2,3), (3,2), (3,3) are sparse: all longer side 16 -> one run, 4 rows (64 // 16)
    assert plan.key[2 * nb + 3] == plan.key[3 * nb + 2] == plan.key[3 * nb + 3] >= nb * nb
    # (0,1): longer side 4, 2.5 per epoch < 2 x 16 rows: too few alone, joins the longest run
    assert plan.key[0 * nb + 1] == plan.key[3 * nb + 3] and plan.rows[plan.key[1]] == 4
    assert plan.shared_pairs == 12 and plan.pairs == 112 and "12 of 112 pairs" in plan.describe()
    for i in range(nb):
        for j in range(nb):
            assert plan.rows[plan.key[i * nb + j]] * max(bounds[i], bounds[j]) <= budget
    assert batching.bucket_plan(bounds, budget).key == list(range(nb * nb))  # no counts: unchanged
    dense = batching.bucket_plan(bounds, budget, [[3, 3, 1000]])
    assert dense.shared_pairs == 0 and dense.describe() == ""


@pytest.mark.parametrize("stats_pass", [True, False])
def test_training_stream_sees_every_pair_within_two_epochs(corpus, tok, stats_pass):
    """600 pairs at 400 tokens a batch: most 2-D buckets receive less than a batch per epoch.
    With the counting pass (the default) they are joined and every pair is trained on within two
    epochs' worth of batches, a pair rarely twice in a batch; without it (no counts), pairs wait
    in their buckets for epochs while copies of the ones before them fill the batches."""
    cfg = cfg_for(corpus["en.gz"], corpus["de.gz"], tokens_per_batch=400, max_length=64, stats_pass=stats_pass,
                  parallel_pipelines=1)
    pairs = Counter(zip(map(tuple, tok.encode(corpus["en"])), map(tuple, tok.encode(corpus["de"]))))
    expected = {p: n for p, n in pairs.items() if 0 < len(p[0]) <= 64 and 0 < len(p[1]) < 64}  # the kept ones
    kept = sum(expected.values())
    seen, rows, repeats = Counter(), 0, 0
    for b in make_dataset(cfg, "train", tok, verbose=False).as_numpy_iterator():
        pairs = pairs_of([b])
        repeats += sum(n - 1 for n in pairs.values())
        seen.update(pairs)
        rows += len(b[1])
        if rows >= 2 * kept:
            break
    missing = len(set(expected) - set(seen))
    if stats_pass:
        assert missing == 0 and repeats / rows < 0.03
    else:  # the defect the plan removes
        assert missing > 0.05 * len(expected) and repeats / rows > 0.05


def test_shift_and_every_pair_exactly_once(corpus, tok):
    cfg = cfg_for(corpus["en.gz"], corpus["de.gz"], tokens_per_batch=512, max_length=100)
    got = batches(make_dataset(cfg, "valid", tok, training=False, verbose=False))
    for (src, tgt_in), tgt_out in got:
        assert (tgt_in[:, 0] == 2).all()  # BOS first
        assert not (tgt_in == 3).any()  # no EOS in the decoder input
        lengths = (tgt_out != 0).sum(axis=1)
        assert (tgt_out[np.arange(len(lengths)), lengths - 1] == 3).all()  # EOS last
        assert ((tgt_in != 0).sum(axis=1) == lengths).all()
        np.testing.assert_array_equal(tgt_in[:, 1:] * (tgt_out[:, :-1] != 3), tgt_out[:, :-1] * (tgt_out[:, :-1] != 3))
    expected = Counter(zip(map(tuple, tok.encode(corpus["en"])), map(tuple, tok.encode(corpus["de"]))))
    assert pairs_of(got) == expected


def test_evaluation_streams_have_no_autotuning_thread(corpus, tok):
    """Keras makes a new validation iterator at every evaluation and deletes the old one; the
    deletion waits for the iterator's autotuning thread, which stalled training for 15-30 s at
    about every second epoch end. Evaluation streams (validation, test) run without it; the
    training stream keeps it. Every pair still comes exactly once."""
    cfg = cfg_for(corpus["en.gz"], corpus["de.gz"], tokens_per_batch=512, max_length=100)
    valid = make_dataset(cfg, "valid", tok, training=False, verbose=False)
    assert valid.options().autotune.enabled is False
    # the multi-worker strategy repeats its validation stream: it is made anew at every evaluation too
    repeated = make_dataset(cfg, "valid", tok, training=False, repeat=True, verbose=False)
    assert repeated.options().autotune.enabled is False
    assert make_dataset(cfg, "train", tok, training=True, verbose=False).options().autotune.enabled is not False
    expected = Counter(zip(map(tuple, tok.encode(corpus["en"])), map(tuple, tok.encode(corpus["de"]))))
    for _ in range(2):  # a second pass over a new iterator gives the same pairs
        assert pairs_of(batches(valid)) == expected


def test_same_seed_same_batches(corpus, tok):
    cfg = cfg_for(corpus["en.gz"], corpus["de.gz"], tokens_per_batch=1000, shuffle_buffer=1000)

    def first(seed):
        return batches(make_dataset(cfg, "train", tok, seed=seed, verbose=False), 30)

    a, b, c = first(5), first(5), first(6)
    assert len(a) == len(b) == 30
    for x, y in zip(a, b):
        for u, v in zip((x[0][0], x[0][1], x[1]), (y[0][0], y[0][1], y[1])):
            np.testing.assert_array_equal(u, v)
    assert any(x[0][0].shape != z[0][0].shape or (x[0][0] != z[0][0]).any() for x, z in zip(a, c))
    # training repeats: more than one epoch of pairs comes out
    assert sum(x[0][0].shape[0] for x in a) > N
    # caching the tokenized pairs changes nothing but the speed
    cached = batches(make_dataset(dataclasses.replace(cfg, cache=True), "train", tok, seed=5, verbose=False), 30)
    for x, y in zip(a, cached):
        np.testing.assert_array_equal(x[0][0], y[0][0])
        np.testing.assert_array_equal(x[1], y[1])


def test_gz_and_txt_read_the_same(corpus):
    def raw(src, tgt):
        ds, n, replaced = sources.pair_dataset(cfg_for(src, tgt), "train")
        return n, replaced, list(ds.as_numpy_iterator())

    gz, txt = raw(corpus["en.gz"], corpus["de.gz"]), raw(corpus["en.txt"], corpus["de.txt"])
    assert gz == txt
    assert gz[0] == N and gz[2][5] == (corpus["en"][5].encode(), corpus["de"][5].encode())


def test_mismatched_files_name_both_files_and_counts(corpus, tok, tmp_path):
    src = write(tmp_path / "a.en", corpus["en"][:10])
    tgt = write(tmp_path / "b.de.gz", corpus["de"][:9])
    cfg = cfg_for(src, tgt)
    for call in (lambda: make_dataset(cfg, "train", tok, verbose=False),
                 lambda: read_parallel_text(cfg, "valid")):
        with pytest.raises(DataError) as e:
            call()
        text = str(e.value)
        assert src in text and tgt in text and "10 lines" in text and "9 lines" in text
    # a missing last newline does not change the count
    write(tmp_path / "c.de", [line.encode() + b"\n" for line in corpus["de"][:9]] + [b"last"], raw=True)
    assert sources.check_parallel_files(tmp_path / "a.en", tmp_path / "c.de") == (10, 0)


def test_empty_and_long_pairs_dropped_and_counted(corpus, tok, tmp_path, capsys):
    en = list(corpus["en"][:50])
    de = list(corpus["de"][:50])
    en[3], de[7], en[11], de[11], de[20] = "", "   ", "", "", "\t"
    long_en = " ".join(corpus["en"][100:104])
    en.append(long_en)
    de.append("Ein Hund.")
    cfg = cfg_for(write(tmp_path / "e.en", en), write(tmp_path / "e.de", de), max_length=40)
    ids_en, ids_de = tok.encode(en), tok.encode(de)
    empty = sum(1 for a, b in zip(ids_en, ids_de) if not a or not b)
    too_long = sum(1 for a, b in zip(ids_en, ids_de) if a and b and (len(a) > 40 or len(b) + 1 > 40))
    assert empty == 4 and too_long >= 1
    ds = make_dataset(cfg, "train", tok, training=False)
    summary = capsys.readouterr().err
    assert f"read {len(en)} pairs" in summary
    assert f"dropped {empty} empty, {too_long} longer than 40 tokens" in summary
    stats = dataset_statistics(cfg, "train", tok)
    assert (stats.pairs, stats.kept, stats.dropped_empty, stats.dropped_too_long) == (
        len(en), len(en) - empty - too_long, empty, too_long)
    got = pairs_of(batches(ds))
    assert sum(got.values()) == stats.kept
    kept = [(tuple(a), tuple(b)) for a, b in zip(ids_en, ids_de)
            if a and b and len(a) <= 40 and len(b) + 1 <= 40]
    assert got == Counter(kept)
    assert stats.source_tokens == sum(len(a) for a, _ in kept)
    assert stats.target_tokens == sum(len(b) + 1 for _, b in kept)
    assert stats.max_target_length == max(len(b) + 1 for _, b in kept)


def test_invalid_utf8_error_names_file_and_line_or_is_replaced_loudly(corpus, tok, tmp_path, capsys):
    en = [line.encode() + b"\n" for line in corpus["en"][:20]]
    en[12] = b"A caf\xe9 with a \xff sign.\n"  # Latin-1 bytes, not UTF-8
    src = write(tmp_path / "bad.en.gz", en, raw=True)
    tgt = write(tmp_path / "ok.de", corpus["de"][:20])
    with pytest.raises(DataError, match=r"bad\.en\.gz:13: invalid UTF-8.*data\.invalid_utf8=replace"):
        make_dataset(cfg_for(src, tgt), "train", tok, verbose=False)
    with pytest.raises(DataError, match=r"bad\.en\.gz:13"):
        read_parallel_text(cfg_for(src, tgt), "valid")
    cfg = cfg_for(src, tgt, invalid_utf8="replace")
    got = pairs_of(batches(make_dataset(cfg, "valid", tok, training=False)))
    assert "1 lines with invalid UTF-8 replaced" in capsys.readouterr().err
    assert sum(got.values()) == 20
    sources_, _ = read_parallel_text(cfg, "valid")
    assert sources_[12] == "A caf\ufffd with a \ufffd sign."
    # the graph replaced the bytes the same way (SentencePiece's normalizer then drops U+FFFD)
    assert got == Counter(zip(map(tuple, tok.encode(sources_)), map(tuple, tok.encode(corpus["de"][:20]))))
    # building a vocabulary and preparing the corpus say so too
    said = []
    build_vocab(dataclasses.replace(cfg, vocab_size=60), tmp_path / "v", progress=said.append)
    assert any("(1 lines with invalid UTF-8 replaced, U+FFFD)" in line for line in said), said
    from tf_transformer.data.prepared import prepare

    summary = prepare(dataclasses.replace(cfg, vocab_model=str(tmp_path / "v.model")), tmp_path / "prep",
                      Tokenizer(str(tmp_path / "v.model")), log=lambda m: None)["summary"]
    assert "1 train lines with invalid UTF-8 replaced (U+FFFD)" in summary


def test_language_direction_is_a_config_value(corpus, tok):
    cfg = cfg_for(corpus["de.gz"], corpus["en.gz"], source_lang="de", target_lang="en")
    got = pairs_of(batches(make_dataset(cfg, "valid", tok, training=False, verbose=False)))
    assert got == Counter(zip(map(tuple, tok.encode(corpus["de"])), map(tuple, tok.encode(corpus["en"]))))


def test_shards_per_worker_partition_the_data_and_split_the_budget(corpus, tok):
    import tensorflow as tf

    cfg = cfg_for(corpus["en.gz"], corpus["de.gz"], tokens_per_batch=800)
    total = Counter()
    for worker in range(2):
        ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=worker,
                                         num_replicas_in_sync=4)
        got = batches(make_dataset(cfg, "train", tok, training=False, input_context=ctx, verbose=False))
        for (src, tgt_in), _ in got:
            assert src.size <= 200 and tgt_in.size <= 200
        part = pairs_of(got)
        assert abs(sum(part.values()) - N // 2) <= 1
        total += part
    assert total == Counter(zip(map(tuple, tok.encode(corpus["en"])), map(tuple, tok.encode(corpus["de"]))))
    ctx = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=64)
    with pytest.raises(ConfigError, match="per replica"):
        make_dataset(cfg, "train", tok, input_context=ctx, verbose=False)


def test_bucket_bounds():
    b = batching.bucket_bounds(100)
    assert b[:5] == [2, 4, 6, 8, 10] and b[-1] == 100
    assert all(x < y for x, y in itertools.pairwise(b))
    assert all(y - x == 2 for x, y in itertools.pairwise(b) if y <= 64)
    assert batching.bucket_bounds(10, bucket_width=3) == [3, 6, 9, 10]
    assert batching.bucket_bounds(3) == [2, 3]
    rows = batching.bucket_rows([2, 4, 100], 1000)
    assert rows == [[500, 250, 10], [250, 250, 10], [10, 10, 10]]
    e = batching.eval_bucket_bounds(256)
    assert e[0] == 8 and e[-1] == 256 and all(x < y for x, y in itertools.pairwise(e))


def test_bundled_multi30k_and_missing_copy(monkeypatch, tmp_path):
    cfg = load_config("multi30k_small")
    src, tgt = read_parallel_text(cfg, "valid")
    assert len(src) == len(tgt) == 1014
    assert src[0] and src[0] == src[0].strip()
    assert [p.name for p in sources.split_files(cfg.data, "test")] == ["test2016.en.gz", "test2016.de.gz"]
    monkeypatch.setattr(sources, "bundled_multi30k_dir", lambda: tmp_path / "nowhere")
    with pytest.raises(DataError, match="set data.multi30k_dir"):
        read_parallel_text(cfg, "train")
    with pytest.raises(DataError, match="is not a directory"):
        read_parallel_text(load_config("multi30k_small", [f"data.multi30k_dir={tmp_path / 'x'}"]), "train")


def test_text_source_missing_fields_and_files(tmp_path):
    cfg = DataConfig(source="text", train_source="a", train_target="b")
    with pytest.raises(DataError, match="data.valid_source and data.valid_target"):
        sources.split_files(cfg, "valid")
    with pytest.raises(DataError, match=r"a \(data.train_source, train split\) does not exist"):
        sources.split_files(cfg, "train")
    with pytest.raises(DataError, match="split 'dev'"):
        sources.split_files(cfg, "dev")


def test_config_rules():
    with pytest.raises(ConfigError, match="tokens_per_batch=50 must be >= data.max_length=100"):
        load_config("multi30k_small", ["data.tokens_per_batch=50"])
    with pytest.raises(ConfigError, match="'fr'"):
        load_config("multi30k_small", ["data.target_lang=fr"])


def test_make_dataset_checks_a_config_changed_in_python(corpus, tok):
    """``make_dataset(cfg.data, ..., **fields)`` and a DataConfig built in Python get the config
    file's checks: a budget below max_length used to give batches over the budget, an unknown
    batching ran as buckets, a misspelt field was a bare TypeError."""
    from tf_transformer.data import pairs

    cfg = cfg_for(corpus["en.txt"], corpus["de.txt"], max_length=40)
    with pytest.raises(ConfigError, match="tokens_per_batch=20 must be >= data.max_length=40"):
        pairs.make_dataset(cfg, "train", tok, tokens_per_batch=20)
    with pytest.raises(ConfigError, match="batching='nonsense' is not one of"):
        make_dataset(dataclasses.replace(cfg, batching="nonsense"), "train", tok)
    with pytest.raises(ConfigError, match="tokens_per_bach is not a data field"):
        pairs.make_dataset(cfg, "train", tok, tokens_per_bach=100)


def test_carriage_returns_and_byte_order_mark_read_alike_everywhere(tok, tmp_path, capsys):
    """TensorFlow's line reader drops every \\r (not only before \\n): the Python readers
    (references, vocabulary) used to keep a mid-line one as a space, so training saw other text
    than the references; now all drop it, and the scan warns. A BOM no longer reaches the
    references (SentencePiece already dropped it in training). CRLF endings are no warning."""
    en = write(tmp_path / "x.en", [b"\xef\xbb\xbfA dog runs.\r\n", b"Two\ryoung men.\r\n", b"A cat.\r\n"], raw=True)
    de = write(tmp_path / "x.de", [b"\xef\xbb\xbfEin Hund rennt.\r\n", b"Zwei junge M\xc3\xa4nner.\r\n",
                                   b"Eine Katze.\r\n"], raw=True)
    cfg = cfg_for(en, de, tokens_per_batch=512, max_length=40, stats_cache=False)
    src, ref = read_parallel_text(cfg, "valid")
    assert src == ["A dog runs.", "Twoyoung men.", "A cat."] and ref[0] == "Ein Hund rennt."
    warnings = [line for line in capsys.readouterr().err.splitlines() if "carriage return" in line]
    assert len(warnings) == 1 and "x.en has 1 carriage return(s)" in warnings[0]
    got = pairs_of(list(make_dataset(cfg, "valid", tok, training=False, verbose=False).as_numpy_iterator()))
    assert got == Counter(zip(map(tuple, tok.encode(src)), map(tuple, tok.encode(ref))))


def test_nul_bytes_are_counted_with_their_first_line_and_warned_about(tok, tmp_path, capsys, monkeypatch):
    """NUL bytes reach the tokenizer as <unk>: the scan says how many and where the first is,
    also when lines cross the scan's read blocks (a 16-byte block here) and in a last line
    without newline; a cached scan warns again; a file without NUL says nothing."""
    from tf_transformer.data import UNK_ID

    monkeypatch.setattr(sources, "_BLOCK", 16)
    path = write(tmp_path / "n.en", [b"A dog runs in the park.\n", b"Two young\x00 men.\n", b"A cat.\n",
                                     b"A \x00\x00bird"], raw=True)
    scan = sources.scan_text_file(path, cache_dir=tmp_path / "cache")
    assert (scan.lines, scan.nul_bytes, scan.first_nul_line) == (4, 3, 2)
    said = capsys.readouterr().err
    assert "n.en has 3 NUL byte(s) (\\0), the first on line 2" in said, said
    sources._SCAN_CACHE.clear()
    again = sources.scan_text_file(path, cache_dir=tmp_path / "cache")
    assert again == scan and "3 NUL byte(s)" in capsys.readouterr().err
    clean = sources.scan_text_file(write(tmp_path / "c.en", [b"A dog.\n", b"A cat.\n"], raw=True))
    assert (clean.nul_bytes, clean.first_nul_line) == (0, 0) and "NUL" not in capsys.readouterr().err
    # what the warning says happens to them
    assert UNK_ID in tok.encode(["Two young\x00 men."])[0] and UNK_ID not in tok.encode(["Two young men."])[0]


def test_a_huge_line_is_dropped_as_over_long_without_tokenizing_it(corpus, tok, tmp_path):
    """One 300,000-character line: counted as too long and dropped, both in the counting pass and
    in training, without a ragged row of its length (a 2-million-character one used to end in an
    out-of-memory error while masking the batch)."""
    en = write(tmp_path / "h.en", corpus["en"][:50] + ["word " * 60_000])
    de = write(tmp_path / "h.de", corpus["de"][:51])
    cfg = cfg_for(en, de, tokens_per_batch=512, max_length=40, stats_cache=False)
    stats = dataset_statistics(cfg, "train", tok)
    assert stats.pairs == 51 and stats.dropped_too_long >= 1 and stats.kept + stats.dropped_too_long == 51
    assert stats.max_source_length <= 40
    got = pairs_of(list(make_dataset(cfg, "valid", tok, training=False, verbose=False).as_numpy_iterator()))
    assert sum(got.values()) == stats.kept and all(len(s) <= 40 for s, _ in got)
    import tensorflow as tf

    src, tgt = batching._tokenize_pairs(tok, replace_invalid=False, max_length=40)(
        tf.constant(["A dog runs.", "word " * 60_000]), tf.constant(["Ein Hund rennt.", "Wort"]))
    assert src[0].numpy().tolist() == tok.encode(["A dog runs."])[0]
    assert src[1].numpy().tolist() == [1] * 42  # not tokenized: 42 <unk>, over the limit
    assert tgt[1].numpy().tolist() == [2] + tok.encode(["Wort"])[0] + [3]
