"""The fault matrix: every way a run or its artefacts can be wrong that we know of, through
the command line in-process (``tf_transformer.cli.main``). Each case asserts the exit code,
that the one-line message names the file or field, and that the run directory a user
already has is byte-identical afterwards (every file hashed before and after)."""

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers.corpora import write_tiny_parallel_corpus

from tf_transformer.cli import main

TRAIN = {"train_steps": 2, "steps_per_epoch": 2, "warmup_steps": 2, "checkpoint_every_minutes": 60,
         "strategy": "default", "validation_steps": 1}


def _config(directory: Path, corpus: Path, model: str = "", **train) -> Path:
    fields = {**TRAIN, **train}
    path = directory / "tiny.yaml"
    path.write_text(f"""
model: {{d_model: 16, num_layers: 1, num_heads: 2, d_ff: 32, dropout: 0.1{model}}}
data: {{source: text, train_source: {corpus}/train.en, train_target: {corpus}/train.de,
  valid_source: {corpus}/valid.en, valid_target: {corpus}/valid.de, test_source: {corpus}/valid.en,
  test_target: {corpus}/valid.de, vocab_size: 48, tokens_per_batch: 256, max_length: 24}}
train: {{{", ".join(f"{k}: {v}" for k, v in fields.items())}}}
""")
    return path


def _hashes(directory: Path) -> dict:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A finished tiny run (2 updates) made with ``tft train``."""
    base = tmp_path_factory.mktemp("faults")
    corpus = write_tiny_parallel_corpus(base / "corpus", sizes=(("train", 120), ("valid", 6)))
    config = _config(base, corpus)
    model_dir = base / "run"
    assert main(["train", "--config", str(config), "--model-dir", str(model_dir), "--verbose", "0"]) == 0
    return {"base": base, "corpus": corpus, "config": config, "dir": model_dir}


def _sets(*overrides):
    """``--set a --set b ...``: one field per ``--set``, as every command takes them."""
    return [arg for o in overrides for arg in ("--set", o)]


def _call(argv, capsys):
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    return code, err


def _assert_refused(code, err, *names):
    assert code == 2, err
    last = err.splitlines()[-1]
    assert last.startswith("tft ") and ": error: " in last, err
    assert "Traceback" not in err
    for name in names:
        assert str(name) in last, (name, last)


def _copy(run, name):
    target = run["base"] / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(run["dir"], target)
    return target


# -- the run directory contract ----------------------------------------------------------

CONTRACT_CASES = [
    ("d_model", ["model.d_model=24"], "model.d_model: 16 -> 24"),
    ("dropout", ["model.dropout=0.3"], "model.dropout: 0.1 -> 0.3"),
    ("warmup", ["train.warmup_steps=8"], "train.warmup_steps: 2 -> 8"),
    ("label_smoothing", ["train.label_smoothing=0.2"], "train.label_smoothing: 0.1 -> 0.2"),
    ("seed", ["data.seed=7"], "data.seed: 1234 -> 7"),
]


@pytest.mark.parametrize("case,overrides,expected", CONTRACT_CASES, ids=[c[0] for c in CONTRACT_CASES])
def test_changed_config_is_refused_before_anything_is_written(run, capsys, case, overrides, expected):
    before = _hashes(run["dir"])
    code, err = _call(["train", "--config", run["config"], "--model-dir", run["dir"], "--verbose", "0",
                       *_sets(*overrides, "train.train_steps=4")], capsys)
    _assert_refused(code, err, expected, run["dir"] / "config.yaml", "--allow-config-change")
    assert "train.train_steps" not in err  # allowed to differ: not listed
    assert _hashes(run["dir"]) == before


def test_other_training_files_are_refused(run, capsys):
    other = write_tiny_parallel_corpus(run["base"] / "other_corpus", sizes=(("train", 50), ("valid", 6)), seed=3)
    before = _hashes(run["dir"])
    code, err = _call(["train", "--config", run["config"], "--model-dir", run["dir"], "--verbose", "0",
                       *_sets(f"data.train_source={other}/train.en", f"data.train_target={other}/train.de")], capsys)
    _assert_refused(code, err, f"data.train_source: {run['corpus']}/train.en -> {other}/train.en",
                    "data.train_target")
    assert _hashes(run["dir"]) == before


def test_other_vocabulary_is_refused_and_not_copied_over(run, capsys):
    vocab = run["base"] / "other_vocab"
    other = write_tiny_parallel_corpus(run["base"] / "vocab_corpus", sizes=(("train", 80),), seed=5)
    assert main(["build-vocab", "--config", str(run["config"]), "--set", f"data.train_source={other}/train.en",
                 "--set", f"data.train_target={other}/train.de", "--output", str(vocab)]) == 0
    capsys.readouterr()
    before = _hashes(run["dir"])
    code, err = _call(["train", "--config", run["config"], "--model-dir", run["dir"], "--verbose", "0",
                       "--set", f"data.vocab_model={vocab}.model"], capsys)
    _assert_refused(code, err, "vocabulary (sha256 of", run["dir"] / "vocab.model")
    assert _hashes(run["dir"]) == before


def test_allowed_changes_continue_the_run(run, capsys):
    """train_steps, cadence and decode settings may differ: the run continues (on a copy)."""
    copy = _copy(run, "allowed")
    code, err = _call(["train", "--config", run["config"], "--model-dir", copy, "--verbose", "0",
                       *_sets("train.train_steps=3", "train.checkpoint_every_minutes=30", "decode.beam_size=2")],
                      capsys)
    assert code == 0, err
    assert "resuming at step 2" in err


# -- bad config / data before the model is built -------------------------------------------


def test_learned_positions_shorter_than_data_max_length(run, capsys):
    before = _hashes(run["dir"])
    fresh = run["base"] / "learned"
    code, err = _call(["train", "--config", run["config"], "--model-dir", fresh, "--verbose", "0",
                       *_sets("model.position_encoding=learned", "model.max_length=16")], capsys)
    _assert_refused(code, err, "model.max_length=16", "data.max_length=24")
    assert not fresh.exists()
    assert _hashes(run["dir"]) == before


def test_zero_usable_pairs(run, capsys):
    empty = run["base"] / "empty"
    empty.mkdir(exist_ok=True)
    (empty / "train.en").write_text("\n\n\n")
    (empty / "train.de").write_text("\n\n\n")
    before = _hashes(run["dir"])
    fresh = run["base"] / "zero"
    code, err = _call(["train", "--config", run["config"], "--model-dir", fresh, "--verbose", "0",
                       *_sets(f"data.train_source={empty}/train.en", f"data.train_target={empty}/train.de",
                              f"data.vocab_model={run['dir']}/vocab.model")], capsys)
    _assert_refused(code, err, f"{empty}/train.{{en,de}}", "no usable training pairs", "3 empty")
    assert not (fresh / "model.keras").exists() and not (fresh / "backup").exists()
    assert _hashes(run["dir"]) == before


# -- write errors --------------------------------------------------------------------------


def test_model_dir_under_a_file(run, capsys):
    blocker = run["base"] / "a_file"
    blocker.write_text("x")
    before = _hashes(run["dir"])
    code, err = _call(["train", "--config", run["config"], "--model-dir", blocker / "run", "--verbose", "0"], capsys)
    _assert_refused(code, err, blocker, "Errno 20 ENOTDIR")
    assert _hashes(run["dir"]) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories: covered by the tmpfs case")
def test_read_only_model_dir(run, capsys):
    locked = run["base"] / "locked"
    locked.mkdir(exist_ok=True)
    locked.chmod(0o500)
    try:
        code, err = _call(["train", "--config", run["config"], "--model-dir", locked / "run", "--verbose", "0"],
                          capsys)
    finally:
        locked.chmod(0o700)
    _assert_refused(code, err, locked, "Errno 13 EACCES")


@pytest.fixture
def small_tmpfs(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_full_disk(run, capsys, small_tmpfs):
    """A 256 KiB file system: one line naming the path and ENOSPC, exit 2, no partial file."""
    before = _hashes(run["dir"])
    target = small_tmpfs / "run"
    code, err = _call(["train", "--config", run["config"], "--model-dir", target, "--verbose", "0",
                       *_sets(f"data.vocab_model={run['dir']}/vocab.model", "model.d_model=64", "model.d_ff=256")],
                      capsys)
    _assert_refused(code, err, small_tmpfs, "Errno 28 ENOSPC")
    assert not list(small_tmpfs.rglob(".partial-*"))
    assert _hashes(run["dir"]) == before


def test_export_to_an_unwritable_place(run, capsys):
    blocker = run["base"] / "export_blocker"
    blocker.write_text("x")
    before = _hashes(run["dir"])
    code, err = _call(["export", "--model", run["dir"] / "model.keras", "--vocab", run["dir"] / "vocab.model",
                       "--output", blocker / "exported"], capsys)
    _assert_refused(code, err, blocker, "Errno 20 ENOTDIR")
    assert _hashes(run["dir"]) == before


def test_build_vocab_to_an_unwritable_place(run, capsys):
    blocker = run["base"] / "vocab_blocker"
    blocker.write_text("x")
    code, err = _call(["build-vocab", "--config", run["config"], "--output", blocker / "spm"], capsys)
    _assert_refused(code, err, f"cannot write {blocker}: [Errno 17 EEXIST]")
    assert not list(blocker.parent.glob("spm*"))


# -- damaged artefacts ---------------------------------------------------------------------


def _truncate(path: Path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _poison_h5(path: Path):
    """Set every value of the first float dataset of a weights file to NaN."""
    import h5py

    with h5py.File(path, "r+") as f:
        found = []
        f.visititems(lambda name, obj: found.append(obj) if isinstance(obj, h5py.Dataset)
                     and obj.dtype.kind == "f" and obj.size > 1 and not found else None)
        found[0][...] = np.nan


def _poison_keras(path: Path, out: Path):
    import zipfile

    tmp = out.parent / "weights.h5"
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        members = {n: z.read(n) for n in names}
    tmp.write_bytes(members["model.weights.h5"])
    _poison_h5(tmp)
    members["model.weights.h5"] = tmp.read_bytes()
    with zipfile.ZipFile(out, "w") as z:
        for n in names:
            z.writestr(n, members[n])
    tmp.unlink()


def test_average_of_checkpoints_from_another_architecture_is_one_line(run, capsys):
    """A run whose config.yaml was edited after training (another depth): Keras' loading error
    lists every layer it could not load over many lines; the refusal is one line naming the file."""
    import yaml

    copy = _copy(run, "average_arch")
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["model"]["num_layers"] += 1
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    before = _hashes(copy)
    code, err = _call(["average", "--model-dir", copy, "--last", "5"], capsys)
    _assert_refused(code, err, "cannot load it into the model", "another architecture")
    assert "List of objects" not in err and len([line for line in err.splitlines() if "error" in line]) == 1
    assert _hashes(copy) == before


@pytest.mark.parametrize("damage", ["truncated", "nan"])
def test_average_refuses_a_damaged_checkpoint(run, capsys, damage):
    copy = _copy(run, f"average_{damage}")
    ckpt = next((copy / "checkpoints").glob("ckpt-*.weights.h5"))
    _truncate(ckpt) if damage == "truncated" else _poison_h5(ckpt)
    before = _hashes(copy)
    code, err = _call(["average", "--model-dir", copy, "--last", "5"], capsys)
    _assert_refused(code, err, ckpt, "truncated or damaged" if damage == "truncated" else "non-finite")
    assert _hashes(copy) == before  # no averaged.keras written


@pytest.fixture(scope="module")
def damaged_models(run):
    out = run["base"] / "damaged_models"
    out.mkdir(exist_ok=True)
    truncated, poisoned = out / "truncated.keras", out / "nan.keras"
    shutil.copyfile(run["dir"] / "model.keras", truncated)
    _truncate(truncated)
    _poison_keras(run["dir"] / "model.keras", poisoned)
    return {"truncated": truncated, "nan": poisoned}


MODEL_COMMANDS = [
    ("translate", "truncated"), ("translate", "nan"), ("evaluate", "truncated"), ("evaluate", "nan"),
    ("export", "truncated"), ("export", "nan"),
]


@pytest.mark.parametrize("command,damage", MODEL_COMMANDS, ids=[f"{c}-{d}" for c, d in MODEL_COMMANDS])
def test_commands_refuse_a_damaged_model(run, capsys, damaged_models, command, damage, tmp_path):
    model = damaged_models[damage]
    source = run["corpus"] / "valid.en"
    argv = [command, "--model", model, "--vocab", run["dir"] / "vocab.model"]
    if command == "translate":
        argv += ["--input", source, "--output", tmp_path / "out.txt"]
    elif command == "evaluate":
        argv += ["--source", source, "--reference", run["corpus"] / "valid.de"]
    else:
        argv += ["--output", tmp_path / "exported"]
    before = _hashes(run["dir"])
    code, err = _call(argv, capsys)
    _assert_refused(code, err, model, "truncated or damaged" if damage == "truncated" else "non-finite")
    assert not list(tmp_path.iterdir())  # no output written
    assert _hashes(run["dir"]) == before


@pytest.mark.parametrize("damage", ["truncated", "nan"])
def test_resume_refuses_a_damaged_backup(run, capsys, damage):
    copy = _copy(run, f"resume_{damage}")
    backup = copy / "backup" / "latest.weights.h5"
    _truncate(backup) if damage == "truncated" else _poison_h5(backup)
    before = _hashes(copy)
    code, err = _call(["train", "--config", run["config"], "--model-dir", copy, "--verbose", "0", "--set",
                       "train.train_steps=4"], capsys)
    _assert_refused(code, err, backup, "truncated or damaged" if damage == "truncated" else "non-finite")
    assert _hashes(copy) == before


def test_crash_before_the_first_backup_resumes(run, capsys):
    """Killed after config.yaml and the vocabulary but before any backup: the same command
    starts over (nothing of another run is there), and leftover partial files go."""
    copy = _copy(run, "early_crash")
    for name in ("backup", "checkpoints", "logs"):
        shutil.rmtree(copy / name, ignore_errors=True)
    (copy / "model.keras").unlink()
    stale = copy / ".partial-999999999-model.keras"
    stale.write_bytes(b"half")
    code, err = _call(["train", "--config", run["config"], "--model-dir", copy, "--verbose", "0"], capsys)
    assert code == 0, err
    assert f"removed {stale}" in err and not stale.exists()
    assert (copy / "model.keras").is_file()
