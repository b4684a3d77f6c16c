"""tft ablate: a tiny two-row run end to end, resuming, settings guard, and the report itself."""

import json

import pytest
from helpers.tiny_multi30k import tiny_overrides

from tf_transformer.cli import main
from tf_transformer.errors import UserError
from tf_transformer.paper import TABLE3
from tf_transformer.tuning.ablation import format_report, plot_report, run_ablation

PNG = b"\x89PNG\r\n\x1a\n"


def _record(row, ppl, bleu, params, change="x"):
    from tf_transformer.tuning.rows import paper_figures

    return {"row": row, "change": change, "params": params, "ppl": ppl, "bleu": bleu, "steps": 10,
            "paper": paper_figures(row)}


def _results(rows):
    return {"settings": {"base_config": "multi30k_small", "overrides": [], "steps": 10, "minutes": None,
                         "beam_size": 4, "alpha": 0.6, "bleu_sentences": None},
            "rows": {r["row"]: r for r in rows}, "bleu_signature": "sig", "tokens_per_batch": 4096,
            "data": {"source_lang": "en", "target_lang": "de", "train": "t", "valid": "v", "test": "test2016"}}


def test_report_table_and_chart(tmp_path):
    results = _results([_record("base", 8.0, 30.0, 8_400_000, "small base"),
                        _record("C1", 9.5, 27.5, 5_000_000, "N=1"),
                        _record("E", 7.9, 30.4, 8_465_536, "learned positions")])
    md = format_report(results)
    lines = md.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| row |"))
    assert lines[header].split(" | ")[1:9] == ["paper change", "our change", "our params (M)", "our PPL", "our BLEU",
                                               "paper PPL", "paper BLEU", "paper params (M)"]
    table = {line.split(" | ")[0][2:]: line.split(" | ") for line in lines[header + 2:] if line.startswith("| ")}
    assert list(table) == ["base", "C1", "E"]
    c1 = table["C1"]
    assert c1[1:9] == ["N=2", "N=1", "5.00", "9.50", "27.5", f"{TABLE3['table3/C1'][0]:.2f}",
                       f"{TABLE3['table3/C1'][1]:.1f}", str(TABLE3["table3/C1"][2])]
    # deltas from each side's base: ours 9.5-8.0, paper 6.11-4.92; BLEU 27.5-30.0, 23.7-25.8
    assert c1[9] == "+1.50 / +1.19" and c1[10] == "-2.5 / -2.1"
    assert table["E"][8] == ""  # the paper leaves E's params blank
    assert "beam search (beam 4, alpha 0.6)" in md and "test2016" in md
    png = plot_report(results, tmp_path / "report.png")
    data = png.read_bytes()
    assert data.startswith(PNG) and len(data) > 5000


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_overrides(tmp_path_factory.mktemp("ablate-data"))


@pytest.mark.slow
@pytest.mark.filterwarnings("error:Your input ran out of data")  # scoring a whole split is not an error
def test_two_rows_end_to_end_and_resume(tiny, tmp_path, capsys):
    out = tmp_path / "ablate"
    args = ["ablate", "--rows", "E", "--steps", "2", "--beam", "1", "--bleu-sentences", "6", "--output", str(out),
            "--no-validation", "--verbose", "0", *sum((["--set", o] for o in tiny), [])]
    assert main(args) == 0
    assert "2 row(s) in the report (2 trained now)" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert list(results["rows"]) == ["base", "E"]
    base, e = results["rows"]["base"], results["rows"]["E"]
    assert base["config"]["position_encoding"] == "sinusoidal" and e["config"]["position_encoding"] == "learned"
    for r in (base, e):
        assert r["steps"] == 2 and r["bleu_sentences"] == 6
        assert 1.0 < r["ppl"] < 300.0 * 1.5 and 0.0 <= r["bleu"] <= 100.0
        assert (out / "rows" / r["row"] / "model.keras").is_file()
        assert r["paper"]["ppl"] == TABLE3[r["preset"]][0]
        for key in ("bleu_lowercase", "bleu_tokenized", "chrf"):
            assert 0.0 <= r[key] <= 100.0
    # learned positions add max_length x d_model weights, nothing else
    assert e["params"] - base["params"] == 64 * 32
    md = (out / "report.md").read_text()
    assert "| base | base | small base |" in md and "| E | learned positions | learned positions |" in md
    assert "greedy decoding" in md and "the first 6 sentences" in md
    assert (out / "report.png").read_bytes().startswith(PNG)

    # rerunning skips the rows already done and rewrites the same report
    result = run_ablation("E", out, overrides=tiny, steps=2, beam_size=1, bleu_sentences=6, validate=False,
                          verbose=0, log=lambda m: None)
    assert result.skipped == ["base", "E"] and result.trained == []
    again = json.loads((out / "results.json").read_text())
    assert again["rows"] == results["rows"]
    assert (out / "report.md").read_text() == md

    # other settings would mix incomparable rows: refused, nothing lost
    with pytest.raises(UserError, match="steps: 2 there, 3 now"):
        run_ablation("E", out, overrides=tiny, steps=3, beam_size=1, bleu_sentences=6, verbose=0,
                     log=lambda m: None)
    assert json.loads((out / "results.json").read_text()) == again


def test_a_row_stopped_by_a_signal_stops_the_study_unrecorded(tiny, tmp_path, capsys, monkeypatch):
    """SIGTERM / Ctrl-C stop the row's training at an update: that row is no result (its run
    resumes from its backup on a rerun), so the study stops there, records nothing for it and
    exits as tft train does (143 / 130)."""
    from types import SimpleNamespace

    from tf_transformer.training import loop

    trained = []

    def stopped(cfg, model_dir=None, **kwargs):
        trained.append(model_dir)
        return SimpleNamespace(stopped_early=signal, final_step=3)

    monkeypatch.setattr(loop, "train", stopped)
    for signal, code in (("SIGTERM", 143), ("SIGINT", 130)):
        out = tmp_path / signal
        args = ["ablate", "--rows", "E", "--steps", "2", "--output", str(out), "--verbose", "0",
                *sum((["--set", o] for o in tiny), [])]
        assert main(args) == code
        err = capsys.readouterr().err
        assert f"row base stopped by {signal} at update 3: not recorded; rerun the same command" in err
        assert f"tft ablate: stopped by {signal} (0 row(s) in the report); rerun the same command" in err
        assert not (out / "results.json").exists() and [p.name for p in trained] == ["base"]
        trained.clear()


def test_rows_of_another_resolved_config_are_refused(tmp_path):
    """A config file edited between two runs keeps its name: the resolved config is compared
    too (studies written before it was recorded are compared by the settings alone)."""
    from tf_transformer.tuning.ablation import check_settings

    settings = {"base_config": "tiny.yaml", "overrides": [], "steps": 10, "minutes": None, "beam_size": 1,
                "alpha": 0.6, "bleu_sentences": 5, "config": {"model": {"d_ff": 64, "num_heads": 2}}}
    previous = {"settings": settings, "rows": {"base": {}}}
    check_settings(previous, dict(settings), tmp_path / "results.json")  # the same: fine
    edited = {**settings, "config": {"model": {"d_ff": 128, "num_heads": 2}}}
    with pytest.raises(UserError, match=r"other settings \(config model.d_ff: 64 there, 128 now\)"):
        check_settings(previous, edited, tmp_path / "results.json")
    older = {"settings": {k: v for k, v in settings.items() if k != "config"}, "rows": {"base": {}}}
    check_settings(older, edited, tmp_path / "results.json")


def test_list_and_bad_arguments(capsys):
    assert main(["ablate", "--list"]) == 0
    text = capsys.readouterr().out
    assert text.count("\n| ") == 19 + 1  # header + 19 rows
    assert main(["ablate", "--rows", "A1"]) == 2
    assert "--output DIR is required" in capsys.readouterr().err
    assert main(["ablate", "--rows", "Z9", "--output", "x"]) == 2
    assert "'Z9' is not a Table 3 row" in capsys.readouterr().err
    for value in ("nan", "inf", "0"):  # a NaN clock never runs out
        assert main(["ablate", "--rows", "A1", "--output", "x", "--minutes", value]) == 2
        assert f"--minutes {float(value)}: must be a finite number > 0" in capsys.readouterr().err


def test_one_model_after_another_silences_only_the_retracing_warning():
    """A new tf.function per model (one per row/trial) from the same code: TensorFlow warns of
    retracing after a few; inside the context only that warning is dropped."""
    import logging

    import tensorflow as tf

    from tf_transformer.io import one_model_after_another

    class Collect(logging.Handler):
        def __init__(self):
            super().__init__()
            self.messages = []

        def emit(self, record):
            self.messages.append(record.getMessage())

    def new_functions():
        for i in range(8):
            def f(x, i=i):
                return x + i
            tf.function(f)(tf.constant(1.0))

    collect = Collect()
    logger = logging.getLogger("tensorflow")
    logger.addHandler(collect)
    try:
        new_functions()
        assert any("triggered tf.function retracing" in m for m in collect.messages)  # TensorFlow's warning
        collect.messages.clear()
        with one_model_after_another():
            new_functions()
            logger.warning("another warning")
        assert collect.messages == ["another warning"]
        assert not logger.filters  # removed on exit
    finally:
        logger.removeHandler(collect)
