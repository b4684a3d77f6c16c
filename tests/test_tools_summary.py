"""tools/multi30k_summary.py: several reproduction runs side by side, with the statistics
checked against their formulas."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from helpers.tools import load_tool


@pytest.fixture(scope="module")
def summary():
    return load_tool("multi30k_summary")


def meta(bleu: float, sacre: float, ratio: float, run_ons: int = 0, loops: int = 0) -> dict:
    return {"scores": {"bleu_lc_moses": bleu, "sacrebleu": sacre, "chrf": 63.5, "bleu_lc": bleu - 0.5},
            "details": {"bleu_lc_moses": f"71.0/47.0/34.0/25.0 (BP=1.000 ratio={ratio:.3f} hyp_len=1 ref_len=1)"},
            "run_ons": run_ons, "loops": loops}


def make_run(root, name: str, seed: int, chosen_test: float, own_test: float, val: float,
             alpha: float = 3.0, own_alpha: float = 0.6, updates: int = 5800):
    """A run directory as tools/reproduce_multi30k.sh leaves it (the parts the summary reads)."""
    run = root / name
    (run / "report").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"train": {"seed": seed}, "data": {"seed": seed},
                                                     "decode": {"alpha": own_alpha}}))
    results = {"average of last 5": {
        f"val/beam5/alpha{alpha:g}": meta(val, val - 0.4, 0.985),
        f"val/beam5/alpha{own_alpha:g}": meta(val - 1.0, val - 1.3, 0.915),
        f"test2016/beam5/alpha{alpha:g}": meta(chosen_test, chosen_test - 0.3, 1.025, run_ons=1, loops=13),
        f"test2016/beam5/alpha{own_alpha:g}": meta(own_test, own_test - 0.3, 0.952),
    }, "final": {f"val/beam5/alpha{alpha:g}": meta(val - 2.0, val - 2.3, 0.99)}}
    payload = {"run": str(run), "updates": updates, "train_minutes": 103.8,
               "chosen": ["average of last 5", 5, alpha], "alphas": [0.6, 1.0, 1.4, alpha],
               "chosen_test2016_intervals": {"bleu_lc_moses": {"score": chosen_test, "low": chosen_test - 1.6,
                                                               "high": chosen_test + 1.6}},
               "results": results, "evaluations": []}
    (run / "report" / "results.json").write_text(json.dumps(payload))
    return run


def test_t_quantiles_match_the_distribution(summary):
    assert summary.t_quantile(1) == pytest.approx(12.706, abs=1e-3)
    assert summary.t_quantile(18) == pytest.approx(2.101, abs=1e-3)
    # beyond the table: the expansion against tabulated values of Student's t
    for df, exact in ((31, 2.0395), (40, 2.0211), (60, 2.0003), (120, 1.9799), (10_000, 1.9602)):
        assert summary.t_quantile(df) == pytest.approx(exact, abs=1e-3)
    with pytest.raises(ValueError):
        summary.t_quantile(0)


def test_describe_against_numpy(summary):
    values = [40.67, 39.86, 39.70, 40.33, 38.09]
    d = summary.describe(values)
    sd = float(np.std(values, ddof=1))
    half = 2.776 * sd / math.sqrt(5)  # t(0.975, 4)
    assert d["n"] == 5 and d["min"] == 38.09 and d["max"] == 40.67
    assert d["mean"] == pytest.approx(np.mean(values)) and d["sd"] == pytest.approx(sd)
    assert (d["low"], d["high"]) == pytest.approx((np.mean(values) - half, np.mean(values) + half))
    one = summary.describe([40.0])  # no spread from one run
    assert one["mean"] == 40.0 and one["sd"] is None and one["low"] is None


def test_rows_read_the_chosen_row_and_the_runs_own_alpha(summary, tmp_path):
    run = make_run(tmp_path, "s8", 8, chosen_test=38.09, own_test=38.96, val=40.75)
    row = summary.read_run(run)
    assert (row["weights"], row["beam"], row["alpha"], row["own_alpha"]) == ("average of last 5", 5, 3.0, 0.6)
    assert (row["train_seed"], row["data_seed"], row["updates"]) == (8, 8, 5800)
    assert (row["test"], row["test_sacrebleu"], row["val"]) == pytest.approx((38.09, 37.79, 40.75))
    assert (row["test_length"], row["test_own_alpha"], row["test_own_alpha_length"]) == (1.025, 38.96, 0.952)
    assert row["alpha_gain"] == pytest.approx(38.09 - 38.96)
    assert (row["run_ons"], row["loops"]) == (1, 13)


def test_rows_say_how_the_run_was_trained(summary, tmp_path):
    from tf_transformer.training.sittings import SittingLog

    run = make_run(tmp_path, "s9", 9, chosen_test=40.0, own_test=40.0, val=41.0)
    row = summary.read_run(run)
    assert (row["sittings"], row["ended_by"]) == (None, "not recorded")  # a run from before sittings
    host = {"cpu": "AMD EPYC", "cpus": 2, "cpu_flags": ["avx2"], "gpus": []}
    for start, end, why in ((0, 3000, "SIGTERM"), (3000, 5861, "max_minutes")):
        log = SittingLog(run)
        log.start(start, "default", 1, host_info=host)
        log.end(end, why, 3000.0)
    row = summary.read_run(run)
    assert (row["sittings"], row["ended_by"]) == (2, "the time budget")
    text = summary.markdown([row], summary.summarise([row], 41.0, 38.0))
    # the updates trained (the last sitting's end), not the last evaluation's step (the report's 5,800)
    assert row["updates"] == 5861 and "| 5,861 / 103.8 (2; the time budget) |" in text
    SittingLog(run).start(5861, "default", 1, host_info=host)  # a third sitting, killed
    assert summary.read_run(run)["ended_by"] == "no end recorded"
    assert summary.read_run(run)["updates"] == 5861


def test_a_run_chosen_at_its_own_alpha_gains_nothing(summary, tmp_path):
    run = make_run(tmp_path, "s1", 1, chosen_test=40.0, own_test=40.0, val=41.0, alpha=0.6)
    assert summary.read_run(run)["alpha_gain"] == 0.0


def test_summary_over_runs_and_goal_counts(summary, tmp_path):
    chosen, own = [40.55, 38.59, 39.71, 41.10], [40.28, 39.49, 39.98, 40.90]
    rows = [summary.read_run(make_run(tmp_path, f"s{i}", i, c, o, 40.5 + i / 10))
            for i, (c, o) in enumerate(zip(chosen, own))]
    s = summary.summarise(rows, goal_bleu=41.0, goal_sacrebleu=38.5)
    assert s["figures"]["test"]["mean"] == pytest.approx(np.mean(chosen))
    assert s["figures"]["test_own_alpha"]["sd"] == pytest.approx(np.std(own, ddof=1))
    assert s["figures"]["alpha_gain"]["mean"] == pytest.approx(np.mean(np.subtract(chosen, own)))
    # sacreBLEU is 0.3 below each: 40.25, 38.29, 39.41, 40.80
    assert s["goals"]["runs_reaching_bleu"] == 1 and s["goals"]["runs_reaching_sacrebleu"] == 3
    text = summary.markdown(rows, s)
    assert f"| {np.mean(chosen):.2f} |" in text
    assert "1 of 4 runs reach 41 test2016 BLEU lc Moses, 3 of 4 reach 38.5 sacreBLEU" in text
    d = s["figures"]["test"]
    assert f"lies inside the 95% interval of the mean [{d['low']:.2f}, {d['high']:.2f}]" in text
    assert "**41.10** [39.50, 42.70]" in text  # the run's own row, with its test-set interval


def test_command_line_writes_markdown_and_json(summary, tmp_path, capsys):
    runs = [make_run(tmp_path, f"s{i}", i, 39.0 + i, 39.5, 40.0) for i in range(3)]
    out = tmp_path / "summary.json"
    assert summary.main([str(r) for r in runs] + ["--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.count("| average of last 5, 5, 3 |") == 3
    written = json.loads(out.read_text())
    assert [r["test"] for r in written["rows"]] == [39.0, 40.0, 41.0]
    assert written["summary"]["figures"]["test"]["mean"] == pytest.approx(40.0)
    # the interval of the mean, 40 +- 4.303 * 1 / sqrt(3) = [37.52, 42.48], holds the goal 41.02
    assert "lies inside" in text


def test_paired_runs_give_the_differences_and_their_interval(summary, tmp_path, capsys):
    """--paired-with: run i minus partner i for each figure, described as the runs are (checked
    against NumPy), with the count of pairs higher and lower; each pair in its own row."""
    after = [(40.1, 40.3, 40.9, 7400), (39.2, 39.9, 40.2, 6650), (40.6, 40.0, 41.3, 8000)]
    before = [(39.3, 39.8, 40.5, 6391), (39.6, 39.8, 40.9, 6187), (39.7, 39.9, 40.6, 5465)]
    runs = [make_run(tmp_path, f"c{i}", i, t, o, v, updates=u) for i, (t, o, v, u) in enumerate(after)]
    pairs = [make_run(tmp_path, f"b{i}", i, t, o, v, updates=u) for i, (t, o, v, u) in enumerate(before)]
    out = tmp_path / "paired.json"
    assert summary.main([str(r) for r in runs] + ["--paired-with"] + [str(r) for r in pairs]
                        + ["--json", str(out)]) == 0
    text = capsys.readouterr().out
    written = json.loads(out.read_text())["paired"]["figures"]
    for index, key in enumerate(("test", "test_own_alpha", "val", "updates")):
        diffs = np.subtract([a[index] for a in after], [b[index] for b in before])
        d = written[key]
        half = 4.303 * np.std(diffs, ddof=1) / math.sqrt(3)  # t(0.975, 2)
        assert d["mean"] == pytest.approx(np.mean(diffs)) and d["sd"] == pytest.approx(np.std(diffs, ddof=1))
        assert (d["low"], d["high"]) == pytest.approx((np.mean(diffs) - half, np.mean(diffs) + half))
        assert (d["higher"], d["lower"]) == (int((diffs > 0).sum()), int((diffs < 0).sum()))
    assert f"| {runs[1]} | {pairs[1]} | 6,650 / 6,187 (+463) | 39.20 / 39.60 (-0.40) |" in text
    assert f"| test2016 BLEU lc Moses (chosen on val) | 3 | {np.mean([0.8, -0.4, 0.9]):+.2f} |" in text
    moved = np.subtract([a[3] for a in after], [b[3] for b in before])
    assert f"| updates | 3 | {np.mean(moved):+,.0f} | {np.std(moved, ddof=1):,.0f} | +463 | +2,535 |" in text
    # one partner per run, and a run cannot be its own partner
    assert summary.main([str(r) for r in runs] + ["--paired-with"] + [str(r) for r in pairs[:2]]) == 2
    assert "--paired-with gives 2 run(s) for 3" in capsys.readouterr().err
    assert summary.main([str(runs[0]), "--paired-with", str(runs[0])]) == 2
    assert "given twice" in capsys.readouterr().err


def test_bad_runs_are_named_with_what_to_do(summary, tmp_path, capsys):
    good = make_run(tmp_path, "good", 1, 40.0, 40.0, 41.0)
    (tmp_path / "unreported").mkdir()
    (tmp_path / "unreported" / "config.yaml").write_text("train: {seed: 2}\n")
    assert summary.main([str(good), str(tmp_path / "unreported")]) == 2
    err = capsys.readouterr().err
    assert "unreported has no report yet" in err and "tools/multi30k_report.py --run" in err
    assert summary.main([str(tmp_path / "nothing")]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert summary.main([str(good), str(good)]) == 2
    assert "given twice" in capsys.readouterr().err
    (good / "report" / "results.json").write_text('{"chosen": ["final", 5, 0.6], "results": {}}')
    assert summary.main([str(good)]) == 2
    err = capsys.readouterr().err
    assert "results.json: not a report of tools/multi30k_report.py" in err and "KeyError" in err
    (good / "report" / "results.json").write_text("{truncated")
    assert summary.main([str(good)]) == 2
    assert "JSONDecodeError" in capsys.readouterr().err


@pytest.mark.slow
def test_a_tiny_reproduction_is_reported_and_summarised(summary, tmp_path, capsys):
    """The whole chain on a slice of Multi30k: train the preset (tiny), write the report,
    summarise it: the report names the run's sitting and what ended it, and the summary's row
    is the report's chosen row."""
    from helpers.tiny_multi30k import tiny_overrides

    from tf_transformer.config import load_config
    from tf_transformer.training import train

    report = load_tool("multi30k_report")
    overrides = tiny_overrides(tmp_path / "data", train=200, valid=12, test=12) + [
        "model.num_heads=2", "train.train_steps=12", "train.steps_per_epoch=4", "train.eval_bleu_every_steps=4",
        "train.early_stopping_patience=null", "train.best_metric_window=1", "train.seed=3", "data.seed=3"]
    run = tmp_path / "run"
    train(load_config("multi30k_tiny", overrides), model_dir=run, verbose=0, log=lambda m: None)
    assert report.main(["--run", str(run), "--beams", "2", "--alphas", "0.6,1.0", "--alpha-step", "0",
                        "--average", "2"]) == 0
    text = (run / "report" / "report.md").read_text()
    assert "1 sitting: 1. " in text and "updates 0-12" in text
    assert "Training ended by the update limit (train.train_steps)." in text
    chosen = json.loads((run / "report" / "results.json").read_text())
    assert chosen["ended_by"] == "train_steps" and len(chosen["sittings"]) == 1
    capsys.readouterr()
    assert summary.main([str(run)]) == 0
    out = capsys.readouterr().out
    row = summary.read_run(run)
    name, beam, alpha = chosen["chosen"]
    assert (row["weights"], row["beam"], row["alpha"], row["train_seed"]) == (name, beam, alpha, 3)
    assert row["test"] == chosen["results"][name][f"test2016/beam{beam}/alpha{alpha:g}"]["scores"]["bleu_lc_moses"]
    assert "(1; the update limit)" in out and "(needs two runs)" in out
