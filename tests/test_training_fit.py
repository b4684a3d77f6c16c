"""model.fit training: overfitting a tiny task, run directory contents, resuming, the CLI."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.corpora import write_tiny_parallel_corpus
from helpers.synthetic import dataset_fn, max_abs_difference, task_batches, tiny_config

from tf_transformer.training.loop import _plan
from tf_transformer.training.trainer import accumulation_steps_for

REPO = Path(__file__).resolve().parents[1]
HELPER = REPO / "tests" / "training_subprocess.py"


def _env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    env.pop("TF_CONFIG", None)
    return env


def test_fit_plan_lines_epochs_up_with_steps():
    assert _plan(0, 100, 50) == [(0, 2, 50)]
    assert _plan(0, 120, 50) == [(0, 3, 50)]  # the last epoch is cut by StopAtStep
    assert _plan(70, 200, 25) == [(2, 3, 5), (3, 8, 25)]  # finish epoch 2, then whole epochs
    assert _plan(75, 200, 25) == [(3, 8, 25)]
    assert _plan(200, 200, 25) == []


def test_accumulation_steps_from_tokens_per_update():
    assert accumulation_steps_for(None, 4096) == 1
    assert accumulation_steps_for(2000, 4096) == 1
    assert accumulation_steps_for(25000, 4096) == 6  # the paper's 25k per update on one device
    assert accumulation_steps_for(50000, 25000) == 2


@pytest.mark.slow
def test_tiny_model_overfits_reverse_task(tmp_path):
    from tf_transformer.training import train

    vocab = 16
    batches = task_batches(2, 8, vocab, "reverse", max_len=6)
    cfg = tiny_config(vocab, str(tmp_path / "run"), train_steps=300, steps_per_epoch=50, warmup_steps=100,
                      learning_rate_scale=0.3)
    cfg.model.d_model, cfg.model.d_ff = 64, 128
    start = time.time()
    result = train(cfg, train_data=dataset_fn(batches), valid_data=dataset_fn(batches, repeat=False), verbose=0)
    print(f"overfit: {time.time() - start:.1f}s, val_accuracy per epoch {result.history['val_accuracy']}")
    assert result.history["val_accuracy"][-1] == 1.0
    assert result.history["val_loss"][-1] < 0.05
    assert result.final_step == 300 and result.start_step == 0
    # the run directory
    run = tmp_path / "run"
    assert result.model_path == run / "model.keras" and result.model_path.is_file()
    assert (run / "config.yaml").is_file()
    assert [p.name for p in result.checkpoints] == ["ckpt-300.weights.h5"]
    assert (run / "backup" / "latest.weights.h5").is_file()
    import importlib.util

    if importlib.util.find_spec("tensorboard"):  # a dependency of tf-transformer; without it: no logs
        assert list((run / "logs").glob("train/events.out.tfevents.*"))
    assert "model " + str(run / "model.keras") in result.summary()
    # the saved model predicts what the trained one does
    import keras

    loaded = keras.saving.load_model(str(result.model_path))
    (src, tin), _ = batches[0]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded((src, tin))),
                               keras.ops.convert_to_numpy(result.model((src, tin))), atol=1e-5)
    # running again after the end does no training
    said = []
    again = train(cfg, train_data=dataset_fn(batches), valid_data=False, verbose=0, log=said.append)
    assert again.start_step == again.final_step == 300
    assert any("is at train.train_steps=300: nothing to train" in line for line in said), said
    # without the backup, starting over in the same directory is refused (nothing overwritten)
    import shutil

    from tf_transformer.errors import UserError

    shutil.rmtree(run / "backup")
    with pytest.raises(UserError, match="already holds 1 checkpoint"):
        train(cfg, train_data=dataset_fn(batches), valid_data=False, verbose=0)
    # a backup of another architecture is reported, not a traceback
    cfg.model.d_model, cfg.model.d_ff, cfg.train.train_steps = 32, 64, 2
    other = train(cfg, model_dir=tmp_path / "other", train_data=dataset_fn(batches), valid_data=False, verbose=0)
    shutil.copytree(tmp_path / "other" / "backup", run / "backup")
    cfg.model.d_model, cfg.model.d_ff, cfg.train.train_steps = 64, 128, 300
    with pytest.raises(UserError, match=r"backup .*latest.weights.h5: cannot load it into the model"):
        train(cfg, train_data=dataset_fn(batches), valid_data=False, verbose=0)
    assert other.final_step == 2


@pytest.mark.slow
def test_mirrored_two_cpus_equals_one_device(tmp_path):
    """Same global batch (replica 0: 6 short sentences, replica 1: 3 long ones) on two
    logical CPUs and on one device: same first-step loss, same update; and the same with
    gradient accumulation (one device, 2 micro-batches; two replicas, 2 micro-batches each)."""
    out = tmp_path / "mirrored.json"
    subprocess.run([sys.executable, str(HELPER), "mirrored", str(out)], check=True, env=_env(), cwd=REPO,
                   timeout=600)
    r = json.loads(out.read_text())
    assert r["init_diff"] == 0.0
    assert r["mirrored_loss"] == pytest.approx(r["single_loss"], rel=1e-6)
    assert r["accumulated_loss"] == pytest.approx(r["single_loss"], rel=1e-6)
    assert r["mirrored_accumulated_loss"] == pytest.approx(r["single_loss"], rel=1e-6)
    assert r["mirrored_accuracy"] == r["single_accuracy"]
    assert r["missing_device"] == "device '/cpu:2' does not exist in this process (logical devices: /cpu:0, /cpu:1)"
    # a budget too small per replica: refused before the run directory is made (it used to be found
    # after a backup was written, leaving a run that refused the corrected rerun)
    assert "data.tokens_per_batch=60 over 2 replicas leaves 30 per replica" in r["budget"]
    assert r["budget_dir_left"] is False
    assert r["update_size"] > 1e-2  # SGD(1.0): the update is the gradient
    for key in ("weight_diff", "accumulated_weight_diff", "mirrored_accumulated_weight_diff"):
        assert r[key] < 1e-5 * max(1.0, r["update_size"]), key
    assert r["iterations"] == [1, 1, 1, 1]  # accumulation: 2 micro-batches made one update
    # evaluation of 3 batches on 2 replicas (the last step has one) counts every token once
    assert r["eval_loss"] == pytest.approx([r["eval_loss"][1]] * 4, rel=1e-5)


def _free_ports(n):
    import socket

    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _two_workers(out: Path, run: Path, *args: str) -> tuple[list[dict], list[str]]:
    """Run the helper's ``multiworker`` mode as two worker processes on 127.0.0.1; their
    reports (``out/worker{i}.json``, weights in ``.npz`` beside them) and outputs."""
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    for index in range(2):
        env = _env()
        env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(
            [sys.executable, str(HELPER), "multiworker", str(out / f"worker{index}.json"), str(run), *args],
            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        outputs = [p.communicate(timeout=420)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, text in zip(procs, outputs):
        assert p.returncode == 0, text[-3000:]
    return [json.loads((out / f"worker{i}.json").read_text()) for i in range(2)], outputs


def _weights(out: Path, index: int) -> list:
    with np.load(out / f"worker{index}.json.npz") as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]


@pytest.mark.slow
def test_multiworker_two_local_workers(tmp_path):
    """Two worker processes on 127.0.0.1 train 6 steps with model.fit under
    MultiWorkerMirroredStrategy (with the Keras workaround) and end with equal weights."""
    results, _ = _two_workers(tmp_path, tmp_path / "run")
    assert [r["chief"] for r in results] == [True, False]
    assert all(r["replicas"] == 2 and r["final_step"] == 6 for r in results)
    assert results[0]["history"] == results[1]["history"]
    assert results[0]["checksum"] == pytest.approx(results[1]["checksum"], rel=1e-6)
    assert len(results[0]["history"]["val_loss"]) == 2
    assert results[0]["model_path"] and Path(results[0]["model_path"]).is_file()
    assert results[1]["model_path"] is None  # only the chief writes the run directory


@pytest.mark.slow
def test_multiworker_resume_after_a_kill_between_the_workers_backups(tmp_path):
    """Workers write their backups one after another; a kill between two of them leaves one
    worker's newest backup an update ahead of the other's. Simulated: after 4 updates (backups
    every 2, dropout 0.1), worker 1's backup of update 4 is taken away. The rerun to update 6
    resumes *both* workers at update 2 (worker 0 from its previous backup) and ends with the
    weights of a straight 6-update run (resuming each at its own newest would hang or diverge)."""
    straight, _ = _two_workers(tmp_path / "straight", tmp_path / "straight-run", "6", "0.1")
    first, _ = _two_workers(tmp_path / "first", tmp_path / "run", "4", "0.1")
    assert [r["final_step"] for r in first] == [4, 4]
    chief_backup = tmp_path / "run" / "backup"
    [worker_backup] = (tmp_path / "run" / "workers").glob("*/backup")
    assert sorted(p.name for p in chief_backup.glob("*.weights.h5")) == ["latest.weights.h5", "previous.weights.h5"]
    os.replace(worker_backup / "previous.weights.h5", worker_backup / "latest.weights.h5")  # killed before its 4
    resumed, outputs = _two_workers(tmp_path / "resumed", tmp_path / "run", "6", "0.1")
    assert [(r["start_step"], r["final_step"]) for r in resumed] == [(2, 6), (2, 6)]
    assert "the workers' newest backups differ (4, 2): every worker resumes at update 2" in outputs[0]
    for index in range(2):
        diff = max_abs_difference(_weights(tmp_path / "straight", index), _weights(tmp_path / "resumed", index))
        print(f"worker {index}: max abs weight difference to the straight run {diff}")
        assert diff <= 1e-6


@pytest.mark.slow
def test_multiworker_a_dead_peer_is_one_error_saying_to_rerun_every_worker(tmp_path):
    """Worker 1 is killed (SIGKILL) once both train; the chief, whose collectives then fail,
    ends with one ClusterError line saying what to do, not an UnavailableError traceback."""
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    procs = []
    for index in range(2):
        env = _env()
        env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(
            [sys.executable, str(HELPER), "multiworker", str(tmp_path / f"worker{index}.json"), str(tmp_path / "run"),
             "1000000"], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    try:
        backup = tmp_path / "run" / "backup" / "latest.weights.h5"  # the chief's: both workers are past update 2
        deadline = time.time() + 300
        while not backup.is_file() and time.time() < deadline and all(p.poll() is None for p in procs):
            time.sleep(0.1)
        assert backup.is_file() and procs[0].poll() is None, procs[0].communicate(timeout=60)[0][-3000:]
        procs[1].send_signal(signal.SIGKILL)
        output = procs[0].communicate(timeout=240)[0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert procs[0].returncode != 0
    assert "ClusterError: a worker of the cluster stopped or cannot be reached" in output, output[-3000:]
    assert "rerun every worker with the same command to continue from the last backup" in output
    assert "UnavailableError" not in output, output[-3000:]


@pytest.mark.slow
def test_killed_run_resumes_at_last_backup(tmp_path):
    """SIGKILL a run between backups (every 10 updates); the rerun restarts at the backed-up
    update with the learning rate of that update and finishes at train_steps."""
    from tf_transformer.training.schedule import TransformerSchedule

    run, progress = tmp_path / "run", tmp_path / "progress"
    meta = run / "backup" / "training_metadata.json"
    cmd = [sys.executable, str(HELPER), "resume", str(run), "200", str(progress)]
    proc = subprocess.Popen(cmd, env=_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    saved = None
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if meta.is_file():
                try:
                    step = json.loads(meta.read_text())["step"]
                except (ValueError, KeyError):
                    step = None
                if step is not None and step >= 40:
                    saved = step
                    break
            time.sleep(0.05)
        assert saved is not None, "no backup written in time"
        # kill between saves: after the backup, before the next one
        while progress.is_file() and int(progress.read_text() or 0) < saved + 3 and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    saved = json.loads(meta.read_text())["step"]
    reached = int(progress.read_text())
    assert reached > saved, (reached, saved)
    print(f"killed at step {reached}, last backup at {saved}: {reached - saved} updates lost")
    out = subprocess.run(cmd, check=False, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["start_step"] == saved and result["first_step"] == saved
    assert result["final_step"] == 200
    # the schedule continues: the learning rate of update `saved` (0-based iterations)
    assert result["first_learning_rate"] == pytest.approx(float(TransformerSchedule(32, 20)(saved)), rel=1e-5)
    assert f"resuming at step {saved}" in out.stderr
    assert result["checkpoints"][-1].endswith("ckpt-200.weights.h5")


@pytest.mark.slow
def test_cli_train_and_average(tmp_path):
    """`tft train` on a YAML config with --set overrides, then `tft average`."""
    # a tiny parallel text corpus through the real data pipeline; no vocabulary given
    corpus = write_tiny_parallel_corpus(tmp_path / "corpus")
    config = tmp_path / "tiny.yaml"
    config.write_text(f"""
model: {{d_model: 32, num_layers: 1, num_heads: 2, d_ff: 64, dropout: 0.0}}
data:
  source: text
  train_source: {corpus}/train.en
  train_target: {corpus}/train.de
  valid_source: {corpus}/valid.en
  valid_target: {corpus}/valid.de
  vocab_size: 60
  tokens_per_batch: 512
  max_length: 32
train: {{train_steps: 6, steps_per_epoch: 3, warmup_steps: 4, checkpoint_every_minutes: 60, strategy: default}}
""")
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "tf_transformer.cli", "train", "--config", str(config), "--model-dir", str(run),
           "--set", "train.train_steps=4", "--set", "train.label_smoothing=0.2", "--verbose", "2"]
    out = subprocess.run(cmd, check=False, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-2000:]
    summary = out.stdout.strip().splitlines()[-1]
    assert summary.startswith("trained steps 0->4") and str(run / "model.keras") in summary
    assert (run / "vocab.model").is_file()  # built because data.vocab_model was unset
    import yaml

    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["model"]["vocab_size"] == 60 and resolved["train"]["label_smoothing"] == 0.2
    assert resolved["data"]["vocab_model"] == str(run / "vocab.model")
    # a finished run asked for fewer steps: refused before anything of it is rewritten
    written = {p: p.read_bytes() for p in (run / "config.yaml", run / "model.keras")}
    lower = cmd[:-2] + ["--set", "train.train_steps=2"]
    out = subprocess.run(lower, check=False, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=400)
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"{run} is at step 4, past train.train_steps=2: nothing to train" in out.stderr
    assert {p: p.read_bytes() for p in written} == written
    out = subprocess.run([sys.executable, "-m", "tf_transformer.cli", "average", "--model-dir", str(run),
                          "--last", "3"], check=False, env=_env(), cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().startswith("averaged 1 checkpoint(s)") and (run / "averaged.keras").is_file()


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_global_norm_clipping(policy):
    """train.clip_norm clips the global gradient (also under loss scaling)."""
    import keras

    from tf_transformer.model import Transformer
    from tf_transformer.training.trainer import TrainingModel

    batches = task_batches(1, 4, 16)
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(1)
        model = TrainingModel(Transformer(vocab_size=16, d_model=32, num_layers=1, num_heads=4, d_ff=64, dropout=0.0),
                              clip_norm=0.01, nominal_tokens=32)
        model.build()
        optimizer = keras.optimizers.SGD(1.0)
        if policy == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        model.compile(optimizer=optimizer)
        optimizer.build(model.trainable_variables)
    finally:
        keras.config.set_dtype_policy(previous)
    before = [w.numpy().copy() for w in model.trainable_variables]
    model.fit(dataset_fn(batches)(None), steps_per_epoch=1, epochs=1, verbose=0)
    after = [w.numpy() for w in model.trainable_variables]
    norm = np.sqrt(sum(float(np.sum((a - b) ** 2)) for a, b in zip(after, before)))
    assert norm == pytest.approx(0.01, rel=1e-3)


def test_training_step_is_the_gradient_of_the_token_mean_loss():
    """One SGD step of TrainingModel (fused tied head) moves every weight, the shared table
    included (lookup + projection), by -lr * d(sum of smoothed token losses / tokens) computed
    from the model's logits with the keras.ops reference loss."""
    import keras
    import tensorflow as tf

    from tf_transformer.model import Transformer
    from tf_transformer.training.losses import reference_statistics
    from tf_transformer.training.trainer import TrainingModel

    (source, target_in), target_out = task_batches(1, 4, 16)[0]
    keras.utils.set_random_seed(3)
    transformer = Transformer(vocab_size=16, d_model=32, num_layers=1, num_heads=4, d_ff=64, dropout=0.0)
    model = TrainingModel(transformer, label_smoothing=0.1, nominal_tokens=32)
    model.build()
    model.compile(optimizer=keras.optimizers.SGD(0.5))
    variables = transformer.trainable_variables
    before = [v.numpy().copy() for v in variables]
    with tf.GradientTape() as tape:
        stats = reference_statistics(target_out, transformer((source, target_in), training=False), 0.1, 0)
        mean = stats["loss_sum"] / stats["tokens"]
    expected = [b - 0.5 * tf.convert_to_tensor(g).numpy() for b, g in zip(before, tape.gradient(mean, variables))]
    logs = model.fit(dataset_fn([((source, target_in), target_out)])(None), steps_per_epoch=1, epochs=1, verbose=0)
    assert logs.history["loss"][0] == pytest.approx(float(mean), rel=1e-5)
    for v, e in zip(variables, expected):
        np.testing.assert_allclose(v.numpy(), e, atol=2e-6, err_msg=v.path)



def test_sample_weights_in_fit_and_evaluate():
    """Keras' sample weights, in ``TrainingModel.fit`` and in a Transformer compiled with the
    package's loss and metrics: weights of 1 change nothing, weights [1, 1, 0, 0] train and
    evaluate as the first two sentences alone (the same update, the same logs), and
    ``target_tokens_seen`` still counts every real token processed."""
    import keras

    from tf_transformer.model import Transformer
    from tf_transformer.training import TrainingModel
    from tf_transformer.training.losses import LabelSmoothedCrossEntropy, Perplexity, TokenAccuracy

    rng = np.random.default_rng(6)
    src, tgt = rng.integers(4, 30, (4, 6)), rng.integers(4, 30, (4, 7))
    tgt[1, 5:] = 0
    x, y = (src, tgt[:, :-1]), tgt[:, 1:]
    half = np.array([1.0, 1.0, 0.0, 0.0], "float32")

    def trainer():
        keras.utils.set_random_seed(5)
        model = TrainingModel(Transformer(30, d_model=16, num_layers=1, num_heads=2, d_ff=32, dropout=0.0),
                              label_smoothing=0.1, nominal_tokens=16)
        model.build()
        model.compile(optimizer=keras.optimizers.SGD(0.5))
        return model

    weighted, alone, ones = trainer(), trainer(), trainer()
    logs_w = weighted.fit(x, y, sample_weight=half, batch_size=4, epochs=1, verbose=0).history
    logs_a = alone.fit((src[:2], tgt[:2, :-1]), y[:2], batch_size=4, epochs=1, verbose=0).history
    ones.fit(x, y, sample_weight=np.ones(4, "float32"), batch_size=4, epochs=1, verbose=0)
    plain = trainer()
    plain.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert logs_w["loss"][0] == pytest.approx(logs_a["loss"][0], rel=1e-5)
    assert logs_w["accuracy"][0] == pytest.approx(logs_a["accuracy"][0], rel=1e-6)
    for a, b in zip(weighted.weights, alone.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    for a, b in zip(ones.weights, plain.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)
    assert weighted.target_tokens_seen() == float(np.sum(y != 0))
    assert weighted.evaluate(x, y, sample_weight=half, batch_size=4, verbose=0, return_dict=True)["loss"] == \
        pytest.approx(weighted.evaluate((src[:2], tgt[:2, :-1]), y[:2], verbose=0, return_dict=True)["loss"], rel=1e-5)

    keras.utils.set_random_seed(5)
    model = Transformer(30, d_model=16, num_layers=1, num_heads=2, d_ff=32, dropout=0.0)
    # Keras gives sample weights to the loss and to ``weighted_metrics`` (``metrics`` are unweighted)
    model.compile(optimizer="sgd", loss=LabelSmoothedCrossEntropy(0.1),
                  weighted_metrics=[TokenAccuracy(), Perplexity()])
    every = model.evaluate(x, y, batch_size=4, verbose=0, return_dict=True)
    first_two = model.evaluate((src[:2], tgt[:2, :-1]), y[:2], batch_size=4, verbose=0, return_dict=True)
    for given, want in ((np.ones(4, "float32"), every), (half, first_two)):
        got = model.evaluate(x, y, sample_weight=given, batch_size=4, verbose=0, return_dict=True)
        for key in ("loss", "accuracy", "perplexity"):
            assert got[key] == pytest.approx(want[key], rel=1e-5), key


def test_training_model_saves_to_keras_and_resumes_equal(tmp_path):
    """``TrainingModel`` round-trips through ``.keras`` (what ``ModelCheckpoint("x.keras")`` writes
    at each epoch's end): settings, weights and optimizer state come back equal, and one more
    update from the loaded copy equals one more update from the original."""
    import keras

    from tf_transformer.model import Transformer
    from tf_transformer.training import TrainingModel, make_optimizer

    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(3)
    src, tgt = rng.integers(4, 60, (8, 6)), rng.integers(4, 60, (8, 5))
    data = ((src, tgt[:, :-1]), tgt[:, 1:])
    trainer = TrainingModel(Transformer(60, d_model=16, num_layers=1, num_heads=2, d_ff=32, dropout=0.0),
                            label_smoothing=0.2, clip_norm=1.5, nominal_tokens=64)
    trainer.build()
    trainer.compile(optimizer=make_optimizer(d_model=16, warmup_steps=10))
    path = tmp_path / "trainer.keras"
    trainer.fit(*data, epochs=2, batch_size=4, verbose=0, callbacks=[keras.callbacks.ModelCheckpoint(str(path))])
    loaded = keras.saving.load_model(path)
    assert type(loaded) is TrainingModel and type(loaded.transformer) is Transformer
    settings = (loaded.label_smoothing, loaded.clip_norm, loaded.nominal_tokens, loaded.accumulation_steps)
    assert settings == (0.2, 1.5, 64.0, 1)
    assert int(loaded.optimizer.iterations.numpy()) == int(trainer.optimizer.iterations.numpy()) == 4
    pairs = list(zip(trainer.weights + trainer.optimizer.variables, loaded.weights + loaded.optimizer.variables))
    assert len(pairs) > 2 * len(trainer.transformer.weights)
    for a, b in pairs:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # what tft translate/export/evaluate load: the Transformer inside the wrapper
    from tf_transformer.io import load_model

    inner = load_model(path)
    assert type(inner) is Transformer
    for a, b in zip(trainer.transformer.weights, inner.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for model in (trainer, loaded):
        model.fit(*data, epochs=1, batch_size=8, verbose=0)
    for a, b in zip(trainer.weights, loaded.weights):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)


def test_empty_validation_files_are_a_clear_error_before_training(tmp_path, capsys):
    """Empty validation files used to train with Keras' "ran out of data" warning (or, with
    validation BLEU on, end in a traceback from the callback): now a data error naming them,
    before any update."""
    from tf_transformer.cli import main

    corpus = write_tiny_parallel_corpus(tmp_path / "corpus")
    for lang in ("en", "de"):
        (corpus / f"empty.{lang}").write_text("")
    config = tmp_path / "tiny.yaml"
    config.write_text(f"""
model: {{d_model: 16, num_layers: 1, num_heads: 2, d_ff: 32}}
data: {{source: text, train_source: {corpus}/train.en, train_target: {corpus}/train.de,
        valid_source: {corpus}/empty.en, valid_target: {corpus}/empty.de, vocab_size: 60, tokens_per_batch: 256}}
train: {{train_steps: 4, steps_per_epoch: 2, warmup_steps: 2, strategy: default}}
""")
    for extra in ([], ["--set", "train.eval_bleu_every_steps=2"]):
        run = tmp_path / f"run{len(extra)}"
        assert main(["train", "--config", str(config), "--model-dir", str(run), "--verbose", "0", *extra]) == 2
        err = capsys.readouterr().err
        assert f"{corpus}/empty" in err and ("no validation pairs" in err or "no validation sentences" in err), err
        assert "Traceback" not in err and not run.exists()  # the folder this call made is removed again
    # no validation files at all: said before a vocabulary is built into the run directory
    config.write_text(config.read_text().replace(f"valid_source: {corpus}/empty.en, valid_target: {corpus}/empty.de,",
                                                 ""))
    assert "valid_source" not in config.read_text()
    run = tmp_path / "none"
    assert main(["train", "--config", str(config), "--model-dir", str(run), "--verbose", "0"]) == 2
    assert "needs data.valid_source and data.valid_target for the 'valid' split" in capsys.readouterr().err
    assert not run.exists()
    run.mkdir()  # a folder that was there before is left there
    assert main(["train", "--config", str(config), "--model-dir", str(run), "--verbose", "0"]) == 2
    assert run.is_dir()


def _tensorboard_scalars(log_dir):
    """``{(subdir, tag): [steps...]}`` over every event file under ``log_dir``."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    out = {}
    for path in sorted(Path(log_dir).glob("*/events.out.tfevents.*")):
        for raw in tf.data.TFRecordDataset(str(path)):
            event = event_pb2.Event.FromString(raw.numpy())
            for value in event.summary.value:
                out.setdefault((path.parent.name, value.tag), []).append(int(event.step))
    return out


def test_tensorboard_scalars_lie_on_the_update_axis_across_a_resume(tmp_path):
    """Every scalar's step is the optimizer update: the every-N train scalars, the epoch ends
    (train and validation, which used the epoch index), the validation BLEU of every evaluation
    (Keras' TensorBoard callback silenced all but those on its own N-batch grid), with gradient
    accumulation (2 micro-batches per update: the axis was stretched 2x) and across a resume (the
    second sitting wrote over the first one's steps)."""
    import importlib.util

    if not importlib.util.find_spec("tensorboard"):
        pytest.skip("tensorboard is not installed: no logs are written")
    from tf_transformer.training import train

    batches = task_batches(2, 4, 16, "reverse", max_len=6)
    cfg = tiny_config(16, str(tmp_path / "run"), train_steps=14, steps_per_epoch=7, warmup_steps=5,
                      tensorboard_every_steps=5, tokens_per_update=2 * 256)
    train(cfg, train_data=dataset_fn(batches), valid_data=dataset_fn(batches, repeat=False), verbose=0)
    cfg.train.train_steps = 21
    result = train(cfg, train_data=dataset_fn(batches), valid_data=dataset_fn(batches, repeat=False), verbose=0,
                   allow_config_change=True)
    assert result.start_step == 14 and result.final_step == 21
    steps = _tensorboard_scalars(tmp_path / "run" / "logs")
    assert steps[("train", "batch_loss")] == [5, 10, 15, 20]
    assert steps[("train", "batch_learning_rate")] == [5, 10, 15, 20]
    for key in (("train", "epoch_loss"), ("train", "epoch_learning_rate"), ("validation", "epoch_loss"),
                ("validation", "epoch_accuracy")):
        assert steps[key] == [7, 14, 21], key


def test_validation_pairs_dropped_are_reported(tmp_path, capsys):
    """Over-long validation pairs are left out of the validation loss: the run says how many, as
    it does for the training split (it used to say nothing about the validation split)."""
    from tf_transformer.cli import main

    corpus = write_tiny_parallel_corpus(tmp_path / "corpus", sizes=(("train", 120), ("valid", 5)))
    for lang in ("en", "de"):
        with open(corpus / f"valid.{lang}", "a") as f:
            f.write(" ".join(["a"] * 40) + "\n")
    config = tmp_path / "tiny.yaml"
    config.write_text(f"""
model: {{d_model: 16, num_layers: 1, num_heads: 2, d_ff: 32}}
data: {{source: text, train_source: {corpus}/train.en, train_target: {corpus}/train.de,
        valid_source: {corpus}/valid.en, valid_target: {corpus}/valid.de, vocab_size: 60, tokens_per_batch: 256,
        max_length: 24}}
train: {{train_steps: 2, steps_per_epoch: 2, warmup_steps: 2, strategy: default}}
""")
    assert main(["train", "--config", str(config), "--model-dir", str(tmp_path / "run"), "--verbose", "0",
                 "--set", "train.tokens_per_update=300"]) == 0
    err = capsys.readouterr().err
    # (and a tokens_per_update that is no multiple of tokens_per_batch is said, not silently rounded)
    assert ("train: note: train.tokens_per_update=300 is not a multiple of data.tokens_per_batch=256: 1 "
            "micro-batch(es) per update, 256 tokens (the nearest multiple)") in err
    line = next(x for x in err.splitlines() if x.startswith("data valid:"))
    assert "read 6 pairs" in line and "kept 5" in line and "1 longer than 24 tokens" in line
    assert line.endswith("(the validation loss is over the kept pairs)")


@pytest.mark.parametrize("task, message", [
    ({"type": "worker", "index": 2}, "TF_CONFIG: task index 2 is not one of 0..1 for the 2 'worker' task(s)"),
    ({"type": "chief", "index": 0}, "TF_CONFIG: task type 'chief' is not in its cluster (worker)"),
])
def test_a_task_outside_its_tf_config_cluster_is_refused_before_waiting(monkeypatch, task, message):
    """A task index past the cluster used to end in TensorFlow's ValueError traceback."""
    from tf_transformer.errors import UserError
    from tf_transformer.training.strategy import make_strategy

    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
                                                "task": task}))
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_strategy("multiworker")
