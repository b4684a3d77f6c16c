"""Exact resume: a run stopped and resumed (or SIGKILLed anywhere and rerun) ends with the
weights of a run never stopped: same batches in the same order (bucketed, shuffled real
data), same dropout masks, gradient accumulation on."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.corpora import write_tiny_parallel_corpus
from helpers.synthetic import max_abs_difference

REPO = Path(__file__).resolve().parents[1]
HELPER = REPO / "tests" / "training_subprocess.py"


def _write_config(directory: Path, vocab: str = "", **train) -> Path:
    corpus = directory / "corpus"
    if not corpus.is_dir():
        write_tiny_parallel_corpus(corpus, sizes=(("train", 160), ("valid", 8)))
    fields = {"train_steps": 12, "steps_per_epoch": 4, "warmup_steps": 4, "tokens_per_update": 256,
              "checkpoint_every_minutes": 60, "strategy": "default", **train}
    vocab_line = f", vocab_model: {vocab}" if vocab else ""
    path = directory / "tiny.yaml"
    path.write_text(f"""
model: {{d_model: 16, num_layers: 1, num_heads: 2, d_ff: 32, dropout: 0.3, attention_dropout: 0.1}}
data: {{source: text, train_source: {corpus}/train.en, train_target: {corpus}/train.de,
  valid_source: {corpus}/valid.en, valid_target: {corpus}/valid.de, vocab_size: 48,
  tokens_per_batch: 128, max_length: 24, shuffle_buffer: 64{vocab_line}}}
train: {{{", ".join(f"{k}: {v}" for k, v in fields.items())}}}
""")
    return path


@pytest.mark.slow
def test_stopped_and_resumed_run_equals_a_straight_run(tmp_path, monkeypatch):
    """12 updates straight vs 5 updates, then the same run continued to 12 (mid-epoch, two
    micro-batches per update, dropout 0.3): bitwise-equal weights, the stream positioned once
    for both fit calls of the resume. Resuming without the stream position (the data replayed
    from its start, as before) gives other weights."""
    from tf_transformer.config import load_config
    from tf_transformer.training import loop, train

    config = _write_config(tmp_path)
    straight = train(load_config(str(config)), model_dir=tmp_path / "straight", valid_data=False, verbose=0)
    vocab = tmp_path / "vocab.model"
    shutil.copyfile(tmp_path / "straight" / "vocab.model", vocab)
    config = _write_config(tmp_path, vocab=str(vocab))
    first = train(load_config(str(config), ["train.train_steps=5"]), model_dir=tmp_path / "resumed",
                  valid_data=False, verbose=0)
    assert first.final_step == 5 and straight.accumulation_steps == 2
    shutil.copytree(tmp_path / "resumed", tmp_path / "replayed")
    positioned = []
    stream = loop._stream

    def counted(fn, batches):
        positioned.append(batches)
        return stream(fn, batches)

    monkeypatch.setattr(loop, "_stream", counted)
    resumed = train(load_config(str(config)), model_dir=tmp_path / "resumed", valid_data=False, verbose=0)
    assert (resumed.start_step, resumed.final_step) == (5, 12)
    # two fit calls (updates 5-8 finish epoch 1, then epochs 2) on one stream positioned once,
    # after the 10 micro-batches of the first 5 updates (not again at update 8)
    assert positioned == [10]
    diff = max_abs_difference(straight.model.get_weights(), resumed.model.get_weights())
    print(f"exact resume: max abs weight difference {diff}")
    assert diff <= 1e-6

    # the control: the same resume with the input stream restarted at its first batch
    monkeypatch.setattr(loop, "_stream", lambda fn, batches: (lambda context: fn(context, skip=0)))
    replayed = train(load_config(str(config)), model_dir=tmp_path / "replayed", valid_data=False, verbose=0)
    assert replayed.start_step == 5
    assert max_abs_difference(straight.model.get_weights(), replayed.model.get_weights()) > 1e-4


def _env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    env.pop("TF_CONFIG", None)
    return env


def _chaos_run(config, model_dir, kill, out):
    proc = subprocess.run([sys.executable, str(HELPER), "chaos", str(config), str(model_dir), kill, str(out)],
                          env=_env(), cwd=REPO, capture_output=True, text=True, timeout=600)
    return proc, json.loads(out.read_text()) if out.is_file() else None


@pytest.mark.slow
def test_sigkilled_run_chain_equals_an_unkilled_run(tmp_path):
    """SIGKILL one run at 3 seeded random points (inside a backup write with its partial
    file half written, during validation, during a step); rerunning the same command after
    each kill ends with the weights of a run never killed."""
    rng = np.random.default_rng(11)
    corpus_dir = tmp_path
    config = _write_config(corpus_dir, train_steps=12, backup_every_steps=2, validation_steps=1)
    reference_out = tmp_path / "reference.json"
    proc, reference = _chaos_run(config, tmp_path / "reference", "none", reference_out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    vocab = tmp_path / "vocab.model"
    shutil.copyfile(tmp_path / "reference" / "vocab.model", vocab)
    config = _write_config(corpus_dir, vocab=str(vocab), train_steps=12, backup_every_steps=2, validation_steps=1)

    backup_at = int(rng.choice([2, 4]))  # a backup step (every 2 updates)
    validation_at = int(rng.choice([5, 6, 7, 8]))  # validation runs after updates 8 (epoch 2): >= 5
    step_at = int(rng.choice([9, 11]))  # between backups
    kills = [f"backup:{backup_at}", f"validation:{validation_at}", f"step:{step_at}"]
    run = tmp_path / "killed"
    lost = []
    for i, kill in enumerate(kills):
        proc, report = _chaos_run(config, run, kill, tmp_path / f"kill{i}.json")
        assert proc.returncode == -9, (kill, proc.returncode, proc.stderr[-3000:])
        assert report and report["killed"] == kill
        if i == 1:  # the rerun after the kill inside the backup write cleared its partial file
            assert "removed" in proc.stderr and ".partial-" in proc.stderr
        saved = json.loads((run / "backup" / "training_metadata.json").read_text())["step"]
        reached = int(kill.split(":")[1]) if kill.split(":")[0] != "validation" else 8
        lost.append(reached - saved)
        if i == 0:
            assert saved == backup_at - 2, "the killed backup write must leave the previous backup"
            assert list((run / "backup").glob(".partial-*")), "the kill was meant to leave a partial backup"
    proc, final = _chaos_run(config, run, "none", tmp_path / "final.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not list(run.rglob(".partial-*"))
    assert final["final_step"] == 12
    diff = max_abs_difference(reference["weights"], final["weights"])
    per_step = reference["train_seconds"] / 12
    lost_seconds = [steps * per_step for steps in lost]
    print(f"chaos: kills {kills}; updates lost per kill {lost}; final max abs weight difference "
          f"{diff}; about {np.mean(lost_seconds):.2f} s of training lost per kill")
    assert diff <= 1e-6


def test_partial_files_of_killed_writes_are_removed(tmp_path):
    """``.partial-<pid>-*`` left by a dead process are removed; a live writer's are kept."""
    from tf_transformer.io import remove_stale_partials

    (tmp_path / "backup").mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / "backup" / f".partial-{dead_pid}-latest.weights.h5"
    stale.write_bytes(b"x" * 100)
    live = tmp_path / f".partial-{os.getppid()}-config.yaml"
    live.write_text("y")
    keep = tmp_path / "backup" / "latest.weights.h5"
    keep.write_bytes(b"z")
    removed = remove_stale_partials(tmp_path)
    assert removed == [stale] and not stale.exists()
    assert live.exists() and keep.exists()


def test_atomic_write_leaves_the_old_file_when_the_write_fails(tmp_path):
    from tf_transformer.errors import WriteError
    from tf_transformer.io import atomic_path

    target = tmp_path / "f.txt"
    target.write_text("old")
    with pytest.raises(WriteError, match=r"f\.txt: \[Errno 28 ENOSPC\]"):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise OSError(28, "No space left on device")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]
    with pytest.raises(WriteError, match="MiB needed"):
        with atomic_path(target, expected_bytes=2**62):
            pass
    assert target.read_text() == "old"


def _write_config_without(cfg, path: Path, field: str) -> None:
    import yaml

    from tf_transformer.io import write_run_config

    write_run_config(cfg, path)
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    del raw["data"][field]
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")


def test_run_from_before_parallel_pipelines_resumes_with_one_pipeline(tmp_path):
    """A config.yaml written before ``data.parallel_pipelines`` existed ran one pipeline: a
    resume under the default (0 = one per core) continues it with one, and is not refused;
    asking for two on purpose still is."""
    from tf_transformer.config import load_config
    from tf_transformer.training.rundir import RunContractError, check_contract, resolve_pipelines_for

    _write_config_without(load_config("multi30k_tiny"), tmp_path / "config.yaml", "parallel_pipelines")

    resumed = load_config("multi30k_tiny")
    assert resumed.data.parallel_pipelines == 0
    resolve_pipelines_for(resumed, tmp_path)
    assert resumed.data.parallel_pipelines == 1
    assert check_contract(resumed, tmp_path) == []

    two = load_config("multi30k_tiny", ["data.parallel_pipelines=2"])
    resolve_pipelines_for(two, tmp_path)
    with pytest.raises(RunContractError, match=r"data.parallel_pipelines: 1 -> 2"):
        check_contract(two, tmp_path)


def test_early_contract_check_refuses_only_what_the_full_check_refuses(tmp_path):
    """``early_differences`` (before TensorFlow and the vocabulary) compares the config as read
    with the stored one, leaving out the two values training resolves: a resume of the same
    command passes, even with a ``model.vocab_size`` the vocabulary will overrule or the
    default pipeline count; a changed field is found, and the full check finds it too."""
    from tf_transformer.config import load_config
    from tf_transformer.io import write_run_config
    from tf_transformer.training.rundir import (
        RunContractError,
        check_contract,
        early_differences,
        resolve_pipelines_for,
    )

    assert early_differences(load_config("multi30k_tiny"), tmp_path) is None  # no run there yet
    ran = load_config("multi30k_tiny", ["data.parallel_pipelines=1"])
    ran.data.vocab_model = str(tmp_path / "vocab.model")
    write_run_config(ran, tmp_path / "config.yaml")

    same = load_config("multi30k_tiny", ["model.vocab_size=8000"])
    assert same.data.parallel_pipelines == 0
    assert early_differences(same, tmp_path) == []
    changed = load_config("multi30k_tiny", ["model.dropout=0.1", "train.max_minutes=400"])
    assert early_differences(changed, tmp_path) == [("model.dropout", "0.3", "0.1")]
    resolve_pipelines_for(changed, tmp_path)
    with pytest.raises(RunContractError, match=r"model\.dropout: 0\.3 -> 0\.1\. Start"):
        check_contract(changed, tmp_path)


@pytest.mark.slow
def test_sigterm_stops_at_the_update_boundary_with_everything_written_and_resumes_exactly(tmp_path):
    """SIGTERM after update 5 (two micro-batches per update): fit stops at the end of update
    6, the backup, a checkpoint and model.keras are of step 6, the handlers are put back,
    and continuing to 12 gives the weights of a run never stopped."""
    import signal

    import keras

    from tf_transformer.config import load_config
    from tf_transformer.training import train
    from tf_transformer.training.callbacks import current_step, list_checkpoints
    from tf_transformer.training.sittings import read_sittings

    class Preempt(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if current_step(self.model) == 5 and not getattr(self, "sent", False):
                self.sent = True
                os.kill(os.getpid(), signal.SIGTERM)

    config = _write_config(tmp_path)
    straight = train(load_config(str(config)), model_dir=tmp_path / "straight", valid_data=False, verbose=0)
    vocab = tmp_path / "vocab.model"
    shutil.copyfile(tmp_path / "straight" / "vocab.model", vocab)
    config = _write_config(tmp_path, vocab=str(vocab))
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    lines = []
    stopped = train(load_config(str(config)), model_dir=tmp_path / "run", valid_data=False, verbose=0,
                    callbacks=[Preempt()], log=lines.append)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    assert stopped.stopped_early == "SIGTERM" and stopped.final_step == 6 and stopped.accumulation_steps == 2
    assert any("SIGTERM received: stopping after the current update" in line for line in lines), lines
    meta = json.loads((tmp_path / "run" / "backup" / "training_metadata.json").read_text())
    assert meta["step"] == 6 and (tmp_path / "run" / "model.keras").is_file()
    assert max(step for step, _ in list_checkpoints(tmp_path / "run" / "checkpoints")) == 6
    resumed = train(load_config(str(config)), model_dir=tmp_path / "run", valid_data=False, verbose=0)
    assert (resumed.start_step, resumed.final_step, resumed.stopped_early) == (6, 12, None)
    assert max_abs_difference(straight.model.get_weights(), resumed.model.get_weights()) <= 1e-6
    # the run's two sittings: what each trained and what ended it
    sittings = [(r["sitting"], r["start_step"], r["end_step"], r["ended_by"]) for r in read_sittings(tmp_path / "run")]
    assert sittings == [(1, 0, 6, "SIGTERM"), (2, 6, 12, "train_steps")]


def test_a_signal_saves_the_backup_before_the_epoch_end_work_and_stops_at_the_epoch_end():
    """The backup is written at the update where a signal stops training, before Keras' validation
    pass of the cut epoch (a grace period may not outlast it); a signal during end-of-epoch work
    (validation, BLEU) stops at that epoch's end instead of training one more update first."""
    import types

    from tf_transformer.training.callbacks import StopOnSignal

    saved = []
    stop = StopOnSignal(2, log=lambda m: None, save_now=lambda: saved.append("backup"))
    stop.set_model(types.SimpleNamespace(stop_training=False))
    stop.on_train_batch_end(0)
    stop.received = "SIGTERM"
    stop.on_train_batch_end(1)  # the end of an update: saved, then stopped
    assert saved == ["backup"] and stop.model.stop_training
    stop.on_train_batch_end(2)
    stop.on_train_batch_end(3)
    assert saved == ["backup"]  # once
    late = StopOnSignal(1, log=lambda m: None, save_now=lambda: saved.append("late"))
    late.set_model(types.SimpleNamespace(stop_training=False))
    late.on_train_batch_end(0)
    late.received = "SIGINT"  # arrives during the epoch's validation
    late.on_epoch_end(0)
    assert late.model.stop_training and saved == ["backup"]  # the epoch end's own writes follow


def test_tft_train_exit_status_says_how_training_stopped(monkeypatch, capsys, tmp_path):
    import argparse

    from tf_transformer.cli import train as cli_train
    from tf_transformer.training import loop

    class Result:
        def __init__(self, why):
            self.stopped_early = why

        def summary(self):
            return f"stopped early ({self.stopped_early})"

    args = argparse.Namespace(overrides=[], strategy=None, config="multi30k_tiny", model_dir=str(tmp_path / "run"),
                              verbose=0, allow_config_change=False)
    for why, status in ((None, 0), ("max_minutes", 0), ("early_stopping", 0), ("nan", 1), ("SIGINT", 130),
                        ("SIGTERM", 143)):
        monkeypatch.setattr(loop, "train", lambda cfg, **kw: Result(why))
        assert cli_train.run_train(args) == status
        assert capsys.readouterr().out.strip() == f"stopped early ({why})"


def test_backup_keeps_its_previous_and_restores_the_step_asked_for(tmp_path):
    """With ``keep_previous`` (multi-worker runs) the backup before ``latest`` stays as
    ``previous``; ``restore(step=...)`` loads that one, a step not held is a clear error, and a
    kill between retiring the old latest and renaming the new one in falls back to
    ``previous``. Without it (one worker) only ``latest`` is written."""
    from helpers.synthetic import tiny_config

    from tf_transformer.errors import DamagedFileError
    from tf_transformer.training.callbacks import ResumableBackup
    from tf_transformer.training.trainer import build_training_model

    def first_kernel(model):
        return np.asarray(model.transformer.trainable_variables[0].numpy())

    trainer = build_training_model(tiny_config(16))
    kernel = trainer.transformer.trainable_variables[0]
    folder = tmp_path / "backup"
    backup = ResumableBackup(folder, 2, keep_previous=True)
    backup.set_model(trainer)
    for step in (2, 4, 6):
        trainer.optimizer.iterations.assign(step)
        kernel.assign(np.full(kernel.shape, float(step), "float32"))
        assert backup.save() == folder / "latest.weights.h5"
    assert {step: path.name for step, path in backup.saved_steps().items()} == {
        4: "previous.weights.h5", 6: "latest.weights.h5"}

    fresh = build_training_model(tiny_config(16))
    restorer = ResumableBackup(folder, 2, keep_previous=True)
    assert restorer.restore(fresh) == 6 and np.all(first_kernel(fresh) == 6.0)
    assert restorer.restore(fresh, step=4) == 4 and np.all(first_kernel(fresh) == 4.0)
    assert restorer.restored_path == folder / "previous.weights.h5"  # what the log names
    with pytest.raises(DamagedFileError, match=r"no backup of step 2 \(it holds steps \[4, 6\]\)"):
        restorer.restore(fresh, step=2)
    (folder / "latest.weights.h5").unlink()
    assert restorer.exists() and restorer.restore(fresh) == 4 and np.all(first_kernel(fresh) == 4.0)

    single = ResumableBackup(tmp_path / "single", 2)
    single.set_model(trainer)
    for step in (8, 10):
        trainer.optimizer.iterations.assign(step)
        single.save()
    assert sorted(p.name for p in (tmp_path / "single").glob("*.h5")) == ["latest.weights.h5"]
    assert set(single.saved_steps()) == {10}


def test_a_resume_on_another_replica_count_is_said_in_the_log(tmp_path):
    """The backup records how many replicas trained; a resume on another count (the stream
    is cut into one batch per replica, so not exact) is a note in the log, not silence."""
    from helpers.synthetic import tiny_config

    from tf_transformer.training.callbacks import ResumableBackup
    from tf_transformer.training.loop import replica_change_note
    from tf_transformer.training.trainer import build_training_model

    trainer = build_training_model(tiny_config(16))
    trainer.optimizer.iterations.assign(3)
    written = ResumableBackup(tmp_path / "backup", 1, replicas=2)
    written.set_model(trainer)
    written.save()
    reader = ResumableBackup(tmp_path / "backup", 1)
    assert reader.restore(build_training_model(tiny_config(16))) == 3 and reader.restored_replicas == 2
    note = replica_change_note(reader.restored_replicas, reader.replicas)
    assert note.startswith("train: note: this run's backup was written by 2 replica(s) and this process has 1")
    assert "an exact resume needs 2 replica(s)" in note
    assert replica_change_note(2, 2) is None and replica_change_note(None, 4) is None
