"""Validation BLEU during training: early stopping on a scripted metric sequence, the best
weights kept, state restored on resume, the score equal to `tft evaluate`'s, and the
multi30k_tiny preset."""

import json
import types

import keras
import numpy as np
import pytest
from helpers.tiny_model import make_tiny_assets, toy_sentences

from tf_transformer.config import ConfigError, load_config
from tf_transformer.training.validation_bleu import ValidationBLEU, read_eval_log


class Scripted(ValidationBLEU):
    """Scores come from a list instead of decoding."""

    def __init__(self, values, **kwargs):
        super().__init__(None, None, ["x"], ["x"], **kwargs)
        self.values = list(values)

    def score(self):
        return self.values.pop(0), []


def fake_fit_model(transformer):
    """What the callback reads from fit's model: the update counter and stop_training."""
    return types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=np.int64(0)), stop_training=False,
                                 transformer=transformer)


def drive(cb, model, every, n_epochs, weights_at=None):
    """Run epoch ends at updates every, 2*every, ... until the callback stops training."""
    cb.set_model(model)
    cb.on_train_begin()
    for epoch in range(n_epochs):
        step = (epoch + 1) * every
        model.optimizer.iterations = np.int64(step)
        if weights_at is not None:
            weights_at(step)
        cb.on_epoch_end(epoch, {"val_loss": 10.0 / step})
        if model.stop_training:
            return step
    return None


def small_layer():
    layer = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    return layer


@pytest.mark.parametrize("metric", ["val_bleu", "val_loss"])
def test_early_stopping_at_the_right_evaluation_and_best_weights_kept(tmp_path, metric):
    # BLEU: 10 12 11 12 13 12 13 12.9 -> 11 and the tie 12 are two misses, 13 resets the
    # count, then 12, the tie 13 and 12.9 are three: patience 3 stops at the 8th
    # evaluation with the best 13 from the 5th. val_loss (10/step) improves every time, so
    # with that metric it never stops and the best is the last.
    values = [10, 12, 11, 12, 13, 12, 13, 12.9, 99, 99]
    layer = small_layer()

    def weights_at(step):  # the weights at each evaluation carry their step
        layer.set_weights([np.full((2, 1), step, "float32"), np.zeros(1, "float32")])

    cb = Scripted(values, every_steps=100, metric=metric, patience=3, keep_best=2, best_dir=tmp_path / "best",
                  log_path=tmp_path / "eval.jsonl", log=lambda m: None)
    cb.transformer = layer
    model = fake_fit_model(layer)
    stopped_at = drive(cb, model, 100, 9, weights_at)
    rows = read_eval_log(tmp_path / "eval.jsonl")
    if metric == "val_bleu":
        assert stopped_at == 800 and cb.stopped and model.stop_training
        assert cb.best == 13 and cb.best_step == 500
        assert [r["val_bleu"] for r in rows] == values[:8]
        kept = sorted(p.name for p in (tmp_path / "best").iterdir())
        # the 2 best evaluations (13 at 500 and at 700), not the last two new bests (12 at 200, 13 at 500)
        assert kept == ["best-500.weights.h5", "best-700.weights.h5"] and cb.best_steps() == [500, 700]
        layer.load_weights(str(tmp_path / "best" / "best-500.weights.h5"))
        assert float(layer.get_weights()[0][0, 0]) == 500.0
        assert [r["step"] for r in rows] == list(range(100, 900, 100))
    else:
        assert stopped_at is None and not cb.stopped
        assert cb.best_step == 900
        assert [r["step"] for r in rows] == list(range(100, 1000, 100))


def test_windowed_metric_ignores_one_lucky_evaluation(tmp_path):
    # Greedy BLEU with one lucky evaluation (14 at update 400) before a slower climb. Alone,
    # 14 is the best and patience 3 stops at update 700 (12.5, 13, 13.5 all below it). The
    # mean of the last 3 (10, 11, 11, 12.33, 12.5, 13.17, 13.0, 13.67, 14.17, 14.0, 13.83,
    # 13.67) improves to 14.17 at update 900 and then misses three times: patience 3 stops
    # at update 1200, and best/ holds the weights of update 900 (the last of the best window).
    values = [10, 12, 11, 14, 12.5, 13, 13.5, 14.5, 14.5, 13, 14, 14]

    def run(window):
        layer = small_layer()
        best_dir = tmp_path / f"best{window}"

        def weights_at(step):
            layer.set_weights([np.full((2, 1), step, "float32"), np.zeros(1, "float32")])

        cb = Scripted(values, every_steps=100, window=window, patience=3, keep_best=1, best_dir=best_dir,
                      log_path=tmp_path / f"eval{window}.jsonl", log=lambda m: None)
        cb.transformer = layer
        return cb, drive(cb, fake_fit_model(layer), 100, len(values), weights_at), best_dir

    alone, stop, best_dir = run(1)
    assert stop == 700 and alone.best == 14 and alone.best_step == 400
    smooth, stop, best_dir = run(3)
    means = [np.mean(values[max(0, i - 2): i + 1]) for i in range(len(values))]
    rows = read_eval_log(tmp_path / "eval3.jsonl")
    assert [r["val_bleu_mean3"] for r in rows] == pytest.approx(means[: len(rows)], abs=1e-4)
    best_i = int(np.argmax(means[:9]))
    assert best_i == 8 and smooth.best == pytest.approx(means[8]) and smooth.best_step == 900
    assert stop == 1200 and smooth.stopped
    assert [p.name for p in best_dir.iterdir()] == ["best-900.weights.h5"]
    # a resume recomputes the window from the log: same best and count
    again = Scripted([], every_steps=100, window=3, patience=3, log_path=tmp_path / "eval3.jsonl",
                     log=lambda m: None)
    again.restore(1100)
    assert (again.best_step, again.bad_evaluations, again.stopped) == (900, 2, False)
    # `tft train`'s last line names the best evaluation and its window's mean
    from tf_transformer.training.loop import TrainResult

    result = TrainResult(None, None, tmp_path, None, None, None, [], tmp_path, None, {}, 0, 1200, 1, 0.0, 0.0,
                         evaluations=rows, best_step=smooth.best_step)
    assert "val_bleu 14.00 (best 14.50 at step 900, val_bleu_mean3 14.17)" in result.summary()


def test_resume_restores_patience_and_drops_rows_after_the_backup(tmp_path):
    values = [10, 12, 11, 11, 11]
    cb = Scripted(values, every_steps=100, patience=3, keep_best=0, log_path=tmp_path / "eval.jsonl",
                  log=lambda m: None)
    model = fake_fit_model(None)
    drive(cb, model, 100, 4)  # 10 12 11 11: best 12 at 200, 2 without improvement
    # The run is killed; its backup was at update 300: the row of update 400 is redone.
    again = Scripted([11, 11], every_steps=100, patience=3, keep_best=0, log_path=tmp_path / "eval.jsonl",
                     log=lambda m: None)
    again.restore(300)
    assert (again.best, again.best_step, again.bad_evaluations) == (12, 200, 1)
    assert [r["step"] for r in read_eval_log(tmp_path / "eval.jsonl")] == [100, 200, 300]
    model = fake_fit_model(None)
    model.optimizer.iterations = np.int64(300)
    again.set_model(model)
    again.on_train_begin()
    for epoch, step in ((3, 400), (4, 500)):
        model.optimizer.iterations = np.int64(step)
        again.on_epoch_end(epoch, {})
    assert again.stopped and model.stop_training  # 11 11 after 12: third evaluation without improvement
    # A rerun after early stopping knows it is over.
    done = Scripted([], every_steps=100, patience=3, log_path=tmp_path / "eval.jsonl", log=lambda m: None)
    done.restore(500)
    assert done.stopped


def test_torn_last_line_is_ignored(tmp_path):
    path = tmp_path / "eval.jsonl"
    path.write_text(json.dumps({"step": 100, "val_bleu": 1.0}) + "\n" + '{"step": 200, "val_b')
    assert read_eval_log(path) == [{"step": 100, "val_bleu": 1.0}]


def test_score_equals_tft_evaluate(tmp_path, capsys):
    from tf_transformer.cli import main
    from tf_transformer.data.tokenizer import Tokenizer
    from tf_transformer.decoding.translator import load_model

    model_path, vocab_path = make_tiny_assets(tmp_path / "assets")
    sources = toy_sentences(24, seed=5)
    # references: the sources with every other sentence's last word dropped, so that the
    # copy model's BLEU is neither 0 nor 100
    references = [s if i % 2 else " ".join(s.split()[:-1]) + "." for i, s in enumerate(sources)]
    (tmp_path / "src.txt").write_text("\n".join(sources) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(references) + "\n")
    code = main(["evaluate", "--model", model_path, "--vocab", vocab_path, "--source", str(tmp_path / "src.txt"),
                 "--reference", str(tmp_path / "ref.txt"), "--beam", "1", "--json", str(tmp_path / "s.json"),
                 "--quiet"])
    assert code == 0, capsys.readouterr().err
    expected = json.loads((tmp_path / "s.json").read_text())["scores"]["sacrebleu"]["score"]
    assert 1 < expected < 95
    model = load_model(model_path)
    cb = ValidationBLEU(model, Tokenizer(vocab_path), sources + ["extra."], references + ["extra."],
                        every_steps=1, beam_size=1, max_sentences=24, log=lambda m: None)
    bleu, hyps = cb.score()
    assert len(hyps) == 24
    assert bleu == pytest.approx(expected, abs=1e-3)


def test_tiny_preset_recipe():
    cfg = load_config("multi30k_tiny")
    t, m = cfg.train, cfg.model
    peak = t.learning_rate_scale * m.d_model ** -0.5 * t.warmup_steps ** -0.5
    assert peak == pytest.approx(0.005, rel=1e-9)
    from tf_transformer.training.schedule import TransformerSchedule

    schedule = TransformerSchedule(m.d_model, t.warmup_steps, t.learning_rate_scale)
    # optimizer.iterations == warmup - 1 is the paper's (1-based) step == warmup: the peak
    assert float(schedule(t.warmup_steps - 1)) == pytest.approx(0.005, rel=1e-5)
    assert schedule.peak() == pytest.approx(0.005, rel=1e-9)
    assert float(schedule(t.warmup_steps - 2)) < 0.005 and float(schedule(t.warmup_steps)) < 0.005
    assert (m.num_layers, m.d_model, m.d_ff, m.num_heads, m.dropout) == (4, 128, 256, 4, 0.3)
    assert cfg.data.tokens_per_batch == 8192 and cfg.data.vocab_size == 10000
    assert t.early_stopping_patience == 10 and t.eval_bleu_every_steps % t.steps_per_epoch == 0
    assert t.best_metric == "val_bleu" and t.best_metric_window == 5


@pytest.mark.parametrize("override, message", [
    (["train.eval_bleu_every_steps=150"], "must be a multiple of train.steps_per_epoch=100"),
    (["train.eval_bleu_every_steps=null"], "early_stopping_patience=10 needs train.eval_bleu_every_steps"),
    (["train.best_metric=bleu"], "best_metric='bleu' is not one of 'val_bleu', 'val_loss'"),
])
def test_eval_config_errors_name_the_field(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config("multi30k_tiny", override)


@pytest.mark.slow
def test_cli_train_evaluates_keeps_best_and_stops_early(tmp_path):
    """`tft train` with BLEU every 2 updates and patience 2 on a tiny text corpus: the rows,
    checkpoints and best weights line up, the stop follows the patience rule over the
    logged scores, and a rerun of the same command trains nothing more."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from helpers.corpora import write_tiny_parallel_corpus

    corpus = write_tiny_parallel_corpus(tmp_path / "corpus")
    config = tmp_path / "tiny.yaml"
    config.write_text(f"""
model: {{d_model: 32, num_layers: 1, num_heads: 2, d_ff: 64, dropout: 0.0}}
data: {{source: text, train_source: {corpus}/train.en, train_target: {corpus}/train.de,
        valid_source: {corpus}/valid.en, valid_target: {corpus}/valid.de, vocab_size: 60,
        tokens_per_batch: 512, max_length: 32}}
train: {{train_steps: 40, steps_per_epoch: 2, warmup_steps: 4, checkpoint_every_minutes: 60, strategy: default,
         eval_bleu_every_steps: 2, early_stopping_patience: 2, keep_best: 1, keep_checkpoints: 50}}
decode: {{max_extra_length: 5}}
""")
    run = tmp_path / "run"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    cmd = [sys.executable, "-m", "tf_transformer.cli", "train", "--config", str(config), "--model-dir", str(run),
           "--verbose", "2"]
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = read_eval_log(run / "eval.jsonl")
    steps = [r["step"] for r in rows]
    assert steps == list(range(2, 2 * len(rows) + 1, 2))
    # replay the patience rule on the logged scores: where must it have stopped?
    best, misses, expected_stop = None, 0, None
    for r in rows:
        if best is None or r["val_bleu"] > best:
            best, misses, best_step = r["val_bleu"], 0, r["step"]
        else:
            misses += 1
        if misses >= 2:
            expected_stop = r["step"]
            break
    assert expected_stop == steps[-1] and expected_stop < 40
    summary = out.stdout.strip().splitlines()[-1]
    assert f"trained steps 0->{expected_stop}" in summary and "stopped early (early_stopping)" in summary
    assert f"best {best:.2f} at step {best_step}" in summary
    ckpts = sorted(int(p.name.split("-")[1].split(".")[0]) for p in (run / "checkpoints").glob("ckpt-*.weights.h5"))
    assert ckpts == steps  # one checkpoint per evaluation
    assert [p.name for p in (run / "best").iterdir()] == [f"best-{best_step}.weights.h5"]
    assert all("val_loss" in r for r in rows)
    assert "eval step 2: val_bleu" in out.stderr
    again = subprocess.run(cmd, env=env, cwd=repo, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "early stopping had already ended this run" in again.stderr
    assert read_eval_log(run / "eval.jsonl") == rows


def test_keep_best_keeps_the_best_evaluations_not_the_last_new_bests(tmp_path):
    """BLEU 0.03, 0.11, 2.04, 2.04, 1.77 with keep_best 3: the three best evaluations are those of
    updates 60, 80 and 100 (the tie and the 1.77 rank above 0.11); keeping the last three new
    bests held 20, 40 and 60, early weights that an average of best/ would mix in."""
    layer = small_layer()

    def weights_at(step):
        layer.set_weights([np.full((2, 1), step, "float32"), np.zeros(1, "float32")])

    cb = Scripted([0.03, 0.11, 2.04, 2.04, 1.77], every_steps=20, keep_best=3, best_dir=tmp_path / "best",
                  log=lambda m: None)
    cb.transformer = layer
    kept_after = []
    model = fake_fit_model(layer)
    cb.set_model(model)
    cb.on_train_begin()
    for epoch, step in enumerate(range(20, 120, 20)):
        model.optimizer.iterations = np.int64(step)
        weights_at(step)
        cb.on_epoch_end(epoch, {})
        kept_after.append(sorted(int(p.name.split("-")[1].split(".")[0]) for p in (tmp_path / "best").iterdir()))
    assert kept_after == [[20], [20, 40], [20, 40, 60], [40, 60, 80], [60, 80, 100]]
    assert cb.best_step == 60 and cb.best_steps() == [60, 80, 100]
    for step in (60, 80, 100):  # each file holds the weights of its own update
        layer.load_weights(str(tmp_path / "best" / f"best-{step}.weights.h5"))
        assert float(layer.get_weights()[0][0, 0]) == step
    # val_loss: lower is better
    cb = Scripted([0.0] * 4, every_steps=20, metric="val_loss", keep_best=2, best_dir=tmp_path / "loss",
                  log=lambda m: None)
    cb.transformer = layer
    model = fake_fit_model(layer)
    cb.set_model(model)
    cb.on_train_begin()
    for epoch, (step, loss) in enumerate(zip(range(20, 100, 20), (3.0, 2.0, 2.5, 2.2))):
        model.optimizer.iterations = np.int64(step)
        cb.on_epoch_end(epoch, {"val_loss": loss})
    assert sorted(p.name for p in (tmp_path / "loss").iterdir()) == ["best-40.weights.h5", "best-80.weights.h5"]
