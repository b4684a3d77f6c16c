"""Keras Tuner hypermodel and search: building trials, tiny searches end to end, the results table."""

import csv

import keras
import keras_tuner as kt
import pytest
from helpers.tiny_multi30k import tiny_overrides

from tf_transformer.cli import main
from tf_transformer.config import ConfigError, load_config
from tf_transformer.model import count_parameters
from tf_transformer.tuning import SearchSpace, TransformerHyperModel, run_search
from tf_transformer.tuning.search import format_markdown


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tune-data")
    overrides = tiny_overrides(root)
    return {"root": root, "overrides": overrides, "config": load_config("multi30k_small", overrides)}


def test_build_uses_the_trial_values(tiny, tmp_path):
    hm = TransformerHyperModel(tiny["config"], SearchSpace(num_heads=(2, 8), num_layers=(1, 3), d_ff=(48,),
                                                            dropout=(0.0, 0.25)), vocab_dir=tmp_path)
    hp = kt.HyperParameters()
    hp.Fixed("num_heads", 8)
    hp.Fixed("num_layers", 1)
    hp.Fixed("dropout", 0.25)
    model = hm.build(hp)
    t = model.transformer
    assert (t.num_heads, t.key_dim, t.value_dim, t.num_layers, t.d_ff, t.d_model) == (8, 4, 4, 1, 48, 32)
    assert t.dropout_rate == pytest.approx(0.25)
    assert t.vocab_size == hm.tokenizer.vocab_size == 300  # vocabulary built into vocab_dir
    assert (tmp_path / "vocab.model").is_file()
    assert model.optimizer is not None and model.label_smoothing == pytest.approx(0.1)
    # the values registered on hp are the ones the hypermodel reports
    assert hm.declare(hp) == {"num_heads": 8, "num_layers": 1, "d_ff": 48, "dropout": 0.25}
    # word dropout is not searched unless the space has values for it: the config's rates stay
    assert "word_dropout" not in hp.values
    assert (t.source_word_dropout, t.target_word_dropout) == (0.0, 0.0)


def test_word_dropout_in_the_search_space_sets_both_sides(tiny, tmp_path):
    cfg = load_config("multi30k_small", tiny["overrides"] + ["model.source_word_dropout=0.05"])
    space = SearchSpace(num_heads=(4,), num_layers=(1,), d_ff=(48,), dropout=(0.1,), word_dropout=(0.0, 0.2))
    hm = TransformerHyperModel(cfg, space, vocab_dir=tmp_path)
    hp = kt.HyperParameters()
    hp.Fixed("word_dropout", 0.2)
    t = hm.build(hp).transformer
    assert (t.source_word_dropout, t.target_word_dropout) == (pytest.approx(0.2), pytest.approx(0.2))
    assert hm.declare(hp)["word_dropout"] == 0.2
    values = dict(hm.declare(kt.HyperParameters()), word_dropout=0.0)
    assert (hm.trial_config(values).model.source_word_dropout, hm.trial_config(values).model.target_word_dropout) \
        == (0.0, 0.0)
    # without it in the space, the config's own rates (0.05 on the source side only) are kept
    plain = TransformerHyperModel(cfg, SearchSpace(num_heads=(4,), num_layers=(1,), d_ff=(48,), dropout=(0.1,)),
                                  vocab_dir=tmp_path)
    kept = plain.trial_config(plain.declare(kt.HyperParameters())).model
    assert (kept.source_word_dropout, kept.target_word_dropout) == (0.05, 0.0)
    with pytest.raises(ConfigError, match="word_dropout=1.0"):
        SearchSpace(word_dropout=(0.0, 1.0)).validate(32)
    with pytest.raises(ConfigError, match="word_dropout is empty"):
        SearchSpace(word_dropout=()).validate(32)


def test_search_space_checks():
    with pytest.raises(ConfigError, match="num_heads=3 does not divide model.d_model=32"):
        SearchSpace(num_heads=(2, 3)).validate(32)
    with pytest.raises(ConfigError, match="dropout=1.0"):
        SearchSpace(dropout=(0.0, 1.0)).validate(32)
    with pytest.raises(ConfigError, match="empty"):
        SearchSpace(d_ff=()).validate(32)
    space = SearchSpace.around(load_config("multi30k_small").model)
    assert space.num_heads == (1, 2, 4, 8, 16) and space.num_layers == (2, 3, 4) and space.d_ff == (512, 1024)


def test_reported_epoch_is_the_best_by_the_objective(tiny, tmp_path):
    history = {"loss": [5.0, 4.0, 3.5], "val_loss": [4.5, 4.1, 4.3], "val_accuracy": [0.1, 0.3, 0.2]}
    hm = TransformerHyperModel(tiny["config"], vocab_dir=tmp_path)
    assert hm._pick_epoch(history) == {"loss": 4.0, "val_loss": 4.1, "val_accuracy": 0.3, "epoch": 2.0,
                                       "epochs": 3.0}
    hm.objective = "val_accuracy"
    assert hm._pick_epoch(history)["epoch"] == 2.0
    # BLEU is measured after training, on the final weights: the last epoch's numbers go with it
    hm = TransformerHyperModel(tiny["config"], vocab_dir=tmp_path, objective="val_bleu")
    assert hm.bleu and hm._pick_epoch(history)["epoch"] == 3.0
    # a diverged epoch (NaN) is never the best
    hm.objective = "val_loss"
    assert hm._pick_epoch({"val_loss": [float("nan"), 4.2]})["epoch"] == 2.0


def _read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_tft_tune_random_two_trials(tiny, tmp_path, capsys, recwarn):
    out = tmp_path / "tune"
    code = main(["tune", "--config", "multi30k_small", *sum((["--set", o] for o in tiny["overrides"]), []),
                 "--output", str(out), "--algorithm", "random", "--max-trials", "2", "--steps-per-trial", "2",
                 "--steps-per-epoch", "1", "--heads", "2,4", "--layers", "1,2", "--d-ff", "32,64",
                 "--dropout", "0,0.1", "--bleu", "--bleu-sentences", "5", "--verbose", "0"])
    assert code == 0
    summary = capsys.readouterr().out
    assert "2 trial(s) completed of 2" in summary and str(out / "results.md") in summary
    rows = _read_csv(out / "results.csv")
    assert len(rows) == 2 and {r["status"] for r in rows} == {"COMPLETED"}
    seen = set()
    for r in rows:
        h, n, dff = int(r["num_heads"]), int(r["num_layers"]), int(r["d_ff"])
        seen.add((h, n, dff, float(r["dropout"])))
        assert int(r["key_dim"]) == 32 // h
        assert float(r["steps"]) == 2 and float(r["epochs"]) <= 2
        assert float(r["objective"]) == pytest.approx(float(r["val_loss"]))
        assert 0.0 <= float(r["val_bleu"]) <= 100.0 and float(r["val_perplexity"]) > 1.0
        # the parameter count is the one of the model with these values
        cfg = load_config("multi30k_small", tiny["overrides"] + [
            f"model.num_heads={h}", f"model.num_layers={n}", f"model.d_ff={dff}", "model.vocab_size=300"])
        from tf_transformer.model import Transformer

        keras.backend.clear_session()
        model = Transformer.from_config_section(cfg.model)
        model.build()
        assert float(r["params_m"]) * 1e6 == pytest.approx(count_parameters(model))
    assert len(seen) == 2
    # the validation length is counted once, so Keras never runs past the end of the set
    assert not [w for w in recwarn if "ran out of data" in str(w.message)]
    md = (out / "results.md").read_text()
    assert md.count("| COMPLETED |") == 2 and "val_bleu" in md and " * |" in md
    best = load_config(str(out / "best_config.yaml"))
    best_row = min(rows, key=lambda r: float(r["objective"]))
    assert best.model.num_heads == int(best_row["num_heads"]) and best.model.d_ff == int(best_row["d_ff"])
    assert best.model.key_dim == 32 // best.model.num_heads

    # rerunning resumes: nothing left to do, the table is rewritten with the same trials
    assert main(["tune", "--config", "multi30k_small", *sum((["--set", o] for o in tiny["overrides"]), []),
                 "--output", str(out), "--max-trials", "2", "--steps-per-trial", "2", "--steps-per-epoch", "1",
                 "--heads", "2,4", "--layers", "1,2", "--d-ff", "32,64", "--dropout", "0,0.1", "--bleu",
                 "--bleu-sentences", "5", "--verbose", "0"]) == 0
    assert _read_csv(out / "results.csv") == rows
    capsys.readouterr()

    # the same space in another order is the same search
    assert main(["tune", "--config", "multi30k_small", *sum((["--set", o] for o in tiny["overrides"]), []),
                 "--output", str(out), "--max-trials", "2", "--steps-per-trial", "2", "--steps-per-epoch", "1",
                 "--heads", "4,2", "--layers", "2,1", "--d-ff", "64,32", "--dropout", "0.1,0", "--bleu",
                 "--bleu-sentences", "5", "--verbose", "0"]) == 0
    capsys.readouterr()
    # rerunning with another space or config is refused before anything is rewritten (Keras Tuner
    # would reload the old trials and report a best trial outside the asked space)
    written = {p: p.read_bytes() for p in (out / "results.csv", out / "best_config.yaml")}
    for changed in (["--heads", "1", "--layers", "2"], ["--set", "model.d_model=64"]):
        args = ["tune", "--config", "multi30k_small", *sum((["--set", o] for o in tiny["overrides"]), []),
                "--output", str(out), "--max-trials", "2", "--steps-per-trial", "2", "--steps-per-epoch", "1",
                "--heads", "2,4", "--layers", "1,2", "--d-ff", "32,64", "--dropout", "0,0.1", "--bleu",
                "--bleu-sentences", "5", "--verbose", "0", *changed]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert f"{out / 'random'} holds a random search with other settings" in err and "--overwrite" in err
        assert ("search_space.num_heads: [2, 4] -> [1]" in err) or ("config.model.d_model: 32 -> 64" in err), err
        assert {p: p.read_bytes() for p in written} == written


@pytest.mark.slow
def test_hyperband_under_a_distribution_strategy(tiny, tmp_path):
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    result = run_search(tiny["config"], tmp_path / "hb", algorithm="hyperband", steps_per_trial=2, steps_per_epoch=1,
                        search_space=SearchSpace(num_heads=(1, 4), num_layers=(1,), d_ff=(32,), dropout=(0.0, 0.1)),
                        strategy=strategy, verbose=0, log=lambda m: None)
    assert result.tuner.distribution_strategy is strategy
    assert len(result.rows) >= 2 and all(r["status"] == "COMPLETED" for r in result.rows)
    for r in result.rows:
        assert r["steps"] == r["epochs"]  # one update per epoch, epochs from Hyperband's bracket
    assert result.results_md.is_file() and result.results_csv.is_file()
    assert result.best["objective"] == min(r["objective"] for r in result.rows)


@pytest.mark.slow
def test_hypermodel_in_a_plain_keras_tuner_with_a_time_budget(tiny, tmp_path):
    messages = []
    hm = TransformerHyperModel(tiny["config"], SearchSpace(num_heads=(2,), num_layers=(1,), d_ff=(32,),
                                                            dropout=(0.0,)),
                               vocab_dir=tmp_path, max_minutes=1e-4, verbose=0, log=messages.append)
    tuner = kt.RandomSearch(hypermodel=hm, objective="val_loss", max_trials=1, directory=str(tmp_path),
                            project_name="direct")
    tuner.search(epochs=1, steps_per_epoch=20)
    trial = tuner.oracle.get_best_trials(1)[0]
    # the wall-clock budget stopped training after the first update (then it validated)
    assert trial.metrics.get_last_value("steps") == 1
    assert any("max_minutes" in m for m in messages)
    assert trial.score == pytest.approx(trial.metrics.get_last_value("val_loss"))
    best = tuner.get_best_models(1)[0]  # rebuilt from hp and the trial's checkpoint
    assert best.transformer.num_heads == 2 and best.transformer.key_dim == 16
    assert tuner.get_best_hyperparameters(1)[0].values == {"num_heads": 2, "num_layers": 1, "d_ff": 32,
                                                           "dropout": 0.0}


def test_results_table_format():
    rows = [{"trial": "0", "status": "COMPLETED", "num_heads": 4, "key_dim": 8, "num_layers": 2, "d_ff": 64,
             "dropout": 0.1, "epochs": 2, "steps": 4.0, "params_m": 0.0512, "objective": 4.25, "val_loss": 4.25,
             "val_perplexity": 70.1, "val_accuracy": 0.1, "val_bleu": None, "train_minutes": 0.25},
            {"trial": "1", "status": "FAILED", "num_heads": 2, "key_dim": 16, "num_layers": 1, "d_ff": 32,
             "dropout": 0.0, "epochs": None, "steps": None, "params_m": None, "objective": None, "val_loss": None,
             "val_perplexity": None, "val_accuracy": None, "val_bleu": None, "train_minutes": None}]
    md = format_markdown(rows, "val_loss", best_trial="0")
    lines = md.strip().splitlines()
    assert lines[0].startswith("Objective: `val_loss` (min)")
    assert "val_bleu" not in md  # never measured: no column
    assert lines[-2] == "| 0 * | COMPLETED | 4 | 8 | 2 | 64 | 0.1 | 2 | 4 | 0.05 | 4.2500 | 4.2500 | 70.1000 | " \
                        "0.1000 | 0.2 |"
    assert lines[-1].startswith("| 1 | FAILED | 2 | 16 | 1 | 32 | 0 |")
    assert "P_word" not in md  # not searched: no column
    searched = format_markdown([dict(r, word_dropout=w) for r, w in zip(rows, (0.1, 0.0))], "val_loss", best_trial="0")
    lines = searched.strip().splitlines()
    assert "| P_drop | P_word | epochs |" in searched
    assert lines[-2].startswith("| 0 * | COMPLETED | 4 | 8 | 2 | 64 | 0.1 | 0.1 | 2 |")
    assert lines[-1].startswith("| 1 | FAILED | 2 | 16 | 1 | 32 | 0 | 0 |")


@pytest.mark.slow
def test_own_datasets_in_tuner_search_as_functions(tiny, tmp_path):
    """``tuner.search(train, validation_data=valid)``: functions that make the datasets are called
    per trial and work; a dataset made before a trial whose tokenizer resource Keras Tuner's
    ``clear_session()`` destroyed gets an error saying to pass such a function (every trial
    used to fail with ``NotFoundError: Resource ... SentencepieceOp``)."""
    from tf_transformer.data import Tokenizer, make_dataset
    from tf_transformer.errors import UserError

    cfg = tiny["config"]
    space = SearchSpace(num_heads=(2, 4), num_layers=(1,), d_ff=(32,), dropout=(0.0,))
    hm = TransformerHyperModel(cfg, space, vocab_dir=tmp_path, verbose=0, log=lambda m: None)
    tok = Tokenizer(hm.prepare().model_proto)  # made once, before the trials: it remakes its graph side
    made = []

    def train():
        made.append("train")
        return make_dataset(hm.config.data, "train", tok, verbose=False)

    def valid():
        return make_dataset(hm.config.data, "valid", tok, training=False, verbose=False)

    tuner = kt.RandomSearch(hypermodel=hm, objective="val_loss", max_trials=2, directory=str(tmp_path),
                            project_name="own")
    tuner.search(train, validation_data=valid, epochs=1, steps_per_epoch=2)
    trials = list(tuner.oracle.trials.values())
    # two trials, each after a clear_session: both complete (the second failed with the tokenizer's
    # SentencePiece resource gone), each with datasets of its own
    assert [str(t.status) for t in trials] == ["COMPLETED", "COMPLETED"] and made == ["train", "train"]
    assert trials[0].metrics.get_last_value("epochs") == 1.0

    stale = make_dataset(hm.config.data, "train", tok, verbose=False)
    keras.backend.clear_session()  # what Keras Tuner does before each trial
    hp = kt.HyperParameters()
    model = hm.build(hp)
    with pytest.raises(UserError, match="give a function that makes the dataset"):
        hm.fit(hp, model, stale, validation_data=valid, epochs=1, steps_per_epoch=1)


def test_a_fixed_head_count_that_does_not_divide_d_model_fails_the_trial(tiny, tmp_path):
    hm = TransformerHyperModel(tiny["config"], vocab_dir=tmp_path, log=lambda m: None)
    hp = kt.HyperParameters()
    hp.Fixed("num_heads", 3)
    with pytest.raises(ConfigError, match=r"num_heads=3 does not divide d_model=32"):
        hm.build(hp)


def test_tune_flags_are_checked_before_tensorflow_is_imported(tmp_path):
    import subprocess
    import sys

    code = ("import sys\nfrom tf_transformer.cli import main\n"
            f"rc = main(['tune', '--output', {str(tmp_path / 't')!r}, '--heads', '3'])\n"
            "print(rc, 'tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.stdout.split() == ["2", "False"], out.stdout + out.stderr[-2000:]
    assert "search space num_heads=3 does not divide model.d_model=256" in out.stderr


@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_a_trial_budget_must_be_a_finite_number_of_minutes(tmp_path, capsys, value):
    """NaN minutes never ran out, and a search recorded with them could never be resumed (NaN != NaN)."""
    assert main(["tune", "--output", str(tmp_path / "t"), "--minutes-per-trial", value]) == 2
    assert f"--minutes-per-trial {float(value)}: must be a finite number > 0" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="minutes_per_trial=nan: must be a finite number > 0"):
        run_search(load_config("multi30k_small"), tmp_path / "p", minutes_per_trial=float("nan"), verbose=0)


def test_a_failed_trial_is_never_the_best(tiny, tmp_path, capsys):
    """Keras Tuner's get_best_trials returns failed trials when none completed: the table starred
    one and tft tune crashed formatting its missing objective. Empty validation files are now
    refused before the search."""
    import types

    from tf_transformer.tuning.search import best_trial

    def trial(tid, status, score):
        return types.SimpleNamespace(trial_id=tid, status=status, score=score)

    failed, done = trial("00", "FAILED", None), trial("01", "COMPLETED", 4.2)
    for trials, expected in (([failed], None), ([failed, done], done), ([done, failed], done)):
        oracle = types.SimpleNamespace(trials={t.trial_id: t for t in trials}, get_best_trials=lambda n, ts=trials: ts)
        assert best_trial(types.SimpleNamespace(oracle=oracle)) is expected
    for lang in ("en", "de"):
        (tmp_path / f"empty.{lang}").write_text("")
    args = ["tune", "--config", "multi30k_small", *sum((["--set", o] for o in tiny["overrides"]), []),
            "--set", f"data.valid_source={tmp_path / 'empty.en'}",
            "--set", f"data.valid_target={tmp_path / 'empty.de'}",
            "--output", str(tmp_path / "t"), "--max-trials", "1", "--steps-per-trial", "1", "--verbose", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "empty.{en,de}: no validation pairs" in err and "Traceback" not in err, err
    assert not (tmp_path / "t" / "random").exists()
