"""tools/multi30k_report.py: the choice of weights and beam is made on val alone."""

from __future__ import annotations

import json

import pytest
from helpers.tools import load_tool


@pytest.fixture(scope="module")
def report():
    return load_tool("multi30k_report")


def scored(val: dict, test: dict, alpha: float = 0.6) -> dict:
    """``{(split, beam, alpha): {"scores": {"bleu_lc_moses": x}}}`` from ``{beam: x}`` per split."""
    out = {}
    for split, by_beam in (("val", val), ("test2016", test)):
        for beam, value in by_beam.items():
            out[(split, beam, alpha)] = {"scores": {"bleu_lc_moses": value, "sacrebleu": value - 0.3}}
    return out


def test_choice_follows_val_and_ignores_test(report):
    results = {
        "final": scored({4: 37.4, 5: 37.5}, {4: 41.9, 5: 42.0}),  # best on test, not on val
        "average of last 5": scored({4: 38.0, 5: 37.9}, {4: 39.1, 5: 39.0}),  # best on val
        "best (best-4200)": scored({4: 36.6, 5: 36.7}, {4: 40.0, 5: 40.1}),
    }
    assert report.choose_on_val(results, [4, 5], [0.6]) == ("average of last 5", 4, 0.6)
    # raising every test score of another set changes nothing; raising its val score does
    results["final"] = scored({4: 37.4, 5: 37.5}, {4: 99.0, 5: 99.0})
    assert report.choose_on_val(results, [4, 5], [0.6]) == ("average of last 5", 4, 0.6)
    results["final"] = scored({4: 37.4, 5: 38.2}, {4: 0.0, 5: 0.0})
    assert report.choose_on_val(results, [4, 5], [0.6]) == ("final", 5, 0.6)


def test_choice_covers_alpha_and_ignores_test(report):
    results = {"final": {**scored({4: 38.0, 5: 38.1}, {4: 45.0, 5: 45.0}, alpha=0.6),
                         **scored({4: 38.4, 5: 38.3}, {4: 30.0, 5: 30.0}, alpha=1.4)}}
    assert report.choose_on_val(results, [4, 5], [0.6, 1.4]) == ("final", 4, 1.4)
    # the alphas offered bound the choice
    assert report.choose_on_val(results, [4, 5], [0.6]) == ("final", 5, 0.6)


def test_choice_ties_go_to_the_first_set_beam_and_alpha(report):
    results = {"a": scored({4: 30.0, 5: 30.0}, {4: 1.0, 5: 2.0}), "b": scored({4: 30.0, 5: 30.0}, {4: 3.0, 5: 4.0})}
    assert report.choose_on_val(results, [4, 5], [0.6]) == ("a", 4, 0.6)
    assert report.choose_on_val(results, [5, 4], [0.6]) == ("a", 5, 0.6)
    tied = {"a": {**scored({4: 30.0}, {4: 1.0}, alpha=1.0), **scored({4: 30.0}, {4: 2.0}, alpha=0.6)}}
    assert report.choose_on_val(tied, [4], [1.0, 0.6]) == ("a", 4, 1.0)


def test_alphas_parsed_with_the_runs_alpha_by_default(report):
    assert report.parse_alphas(None, 0.6) == [0.6, 1.0, 1.4]
    assert report.parse_alphas(None, 1.0) == [1.0, 1.4]
    assert report.parse_alphas("1.2, 0.6,1.2", 0.6) == [1.2, 0.6]
    for bad in ("0.6,x", "-1", ","):
        with pytest.raises(SystemExit, match="--alphas"):
            report.parse_alphas(bad, 0.6)


def test_average_counts_parsed(report):
    assert report.parse_counts("5,10") == [5, 10]
    assert report.parse_counts(" 20, 5,20") == [20, 5]
    for bad in ("5,x", "1", ",", "5.5"):
        with pytest.raises(SystemExit, match="--average"):
            report.parse_counts(bad)


def test_length_ratio_read_from_the_bleu_detail(report):
    meta = {"details": {"bleu_lc_moses": "72.5/49.3/35.7/25.9 (BP=0.936 ratio=0.938 hyp_len=12038 ref_len=12828)"}}
    assert report.length_ratio(meta) == "0.938"
    assert report.length_ratio({}) == ""  # caches written before the details were recorded


def test_run_on_count(report):
    sources = ["a man sleeps", "two dogs", ""]
    hypotheses = ["ein Mann schläft", "zwei Hunde sehr sehr sehr sehr sehr", "ein Wort zwei"]
    # over twice the source's words: line 2 (6 > 4) and line 3 (3 > 2, an empty source counts as one word)
    assert report.run_on_count(sources, hypotheses) == 2


def test_loops_are_repetitions_not_length(report):
    from tf_transformer.evaluation.degenerate import has_loop

    assert has_loop("zwei Hunde sehr sehr sehr")
    assert has_loop("Kinder, was sie zu sein scheint, was sie zu sein scheint.")  # 4 words twice
    assert has_loop("ob ob ob auch")
    assert not has_loop("sehr sehr gut")  # a word twice is German, not a loop
    assert not has_loop("Ein Mann und ein Mann")  # "ein mann" twice but not in a row
    assert not has_loop("")
    hypotheses = ["eine junge Frau klettert an einer steilen Felswand hoch", "und und und", "a b c a b c"]
    assert report.loop_count(hypotheses) == 2  # long is not a loop; the other two are


def test_minutes_left_counts_every_sitting(report, tmp_path, capsys):
    assert report.minutes_left(tmp_path, 105) == 105  # nothing trained yet
    rows = [{"step": 100, "minutes": 1.9, "val_bleu": 0.0}, {"step": 3200, "minutes": 55.1, "val_bleu": 35.4}]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 33', "utf-8")
    assert report.minutes_left(tmp_path, 105) == pytest.approx(49.9)  # the torn last line is ignored
    assert report.minutes_left(tmp_path, 50) < 0
    assert report.main(["--run", str(tmp_path), "--minutes-left", "105"]) == 0
    assert capsys.readouterr().out.strip() == "49.900"


def test_minutes_left_is_zero_once_early_stopping_ended_the_run(report, tmp_path):
    from tf_transformer.training.sittings import SittingLog

    rows = [{"step": 100, "minutes": 1.9, "val_bleu": 0.0}, {"step": 5900, "minutes": 98.7, "val_bleu": 37.5}]
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    log = SittingLog(tmp_path)
    log.start(0, "default (1 replica on CPU)", 1, host_info={"cpu": "x", "cpus": 2})
    log.end(3000, "max_minutes", 60.0)  # a budget stop leaves the rest of the budget to a rerun
    assert report.minutes_left(tmp_path, 105) == pytest.approx(6.3)
    log = SittingLog(tmp_path)
    log.start(3000, "default (1 replica on CPU)", 1, host_info={"cpu": "x", "cpus": 2})
    log.end(5900, "early_stopping", 60.0)  # finished: nothing left to train, whatever the clock says
    assert report.minutes_left(tmp_path, 105) == 0.0


def test_interval_sentence_places_the_published_figure(report, tmp_path):
    """The report's interval line: the chosen file's bootstrap interval, and whether the
    published figure lies in it."""
    refs = [f"ein hund läuft durch das gras nummer {i} ." for i in range(40)]
    hyps = [r if i % 4 else r.replace("hund", "mann") for i, r in enumerate(refs)]
    (tmp_path / "chosen.de").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    intervals, comparisons = report.chosen_statistics({"path": str(tmp_path / "chosen.de")}, refs, "de")
    assert comparisons is None  # no baseline
    lc = intervals["bleu_lc_moses"]
    assert lc.low < lc.score < lc.high and set(intervals) == {"bleu_lc_moses", "sacrebleu"}
    text = report.interval_sentence(intervals)
    assert f"[{lc.low:.2f}, {lc.high:.2f}]" in text
    assert ("is inside" in text) == (lc.low <= report.PUBLISHED["bleu_lc_moses"] <= lc.high)
    assert "is outside" in text  # these toy outputs score far above 41.02


def peaked(peak: float):
    """A val score that rises with alpha up to ``peak`` and falls after it, for two weight sets."""
    def score(name: str, alpha: float) -> float:
        return 40.0 - abs(alpha - peak) - (0.5 if name == "final" else 0.0)
    return score


def grow(report, score, alphas, step=0.4, cap=3.0):
    """``grow_alphas`` over a scripted val score; returns (grid, alphas decoded, chosen row)."""
    names, beams = ("final", "average of last 10"), [4, 5]
    results = {n: {} for n in names}
    decoded = []

    def fill(alpha):
        for n in names:
            for b in beams:
                results[n][("val", b, alpha)] = {"scores": {"bleu_lc_moses": score(n, alpha)}}

    def decode_val(alpha):
        decoded.append(alpha)
        fill(alpha)

    for a in alphas:
        fill(a)
    grid = report.grow_alphas(results, beams, alphas, step, cap, decode_val)
    return grid, decoded, report.choose_on_val(results, beams, grid)


def test_alpha_grid_grows_while_val_best_is_its_largest_alpha(report):
    grid, decoded, chosen = grow(report, peaked(2.0), [0.6, 1.0, 1.4])
    # 1.4 wins -> 1.8 wins -> 2.2 does not beat 1.8 (both 0.2 from the peak) -> stop
    assert decoded == [1.8, 2.2]
    assert grid == [0.6, 1.0, 1.4, 1.8, 2.2]
    assert chosen == ("average of last 10", 4, 1.8)


def test_alpha_grid_stays_when_val_best_is_inside_it(report):
    grid, decoded, chosen = grow(report, peaked(1.0), [0.6, 1.0, 1.4])
    assert decoded == [] and grid == [0.6, 1.0, 1.4] and chosen[2] == 1.0


def test_alpha_grid_growth_stops_at_the_cap_and_can_be_turned_off(report):
    grid, decoded, _ = grow(report, peaked(9.0), [0.6, 1.0, 1.4], cap=2.2)
    assert decoded == [1.8, 2.2] and max(grid) == 2.2
    grid, decoded, chosen = grow(report, peaked(9.0), [0.6, 1.0, 1.4], step=0)
    assert decoded == [] and chosen[2] == 1.4


@pytest.mark.parametrize("bad", [["--alpha-step", "-0.4"], ["--max-alpha", "-1"], ["--alpha-step", "nan"]])
def test_bad_alpha_growth_options_are_refused_by_name(report, bad, capsys):
    with pytest.raises(SystemExit):
        report.parse_args(["--run", "x", *bad])
    assert bad[0] in capsys.readouterr().err


def test_baseline_comparison_is_the_paired_difference(report, tmp_path):
    """--baseline: the chosen output against another system's on the same resampled test
    sets; the difference is the two corpus scores' difference, and a file against itself
    differs by nothing."""
    import sacrebleu

    refs = [f"ein hund läuft durch das gras nummer {i} ." for i in range(60)]
    mine = [r if i % 5 else r.replace("hund", "mann") for i, r in enumerate(refs)]
    theirs = [r if i % 3 else r.replace("läuft", "springt") for i, r in enumerate(refs)]
    (tmp_path / "chosen.de").write_text("\n".join(mine) + "\n", encoding="utf-8")
    _, comparisons = report.chosen_statistics({"path": str(tmp_path / "chosen.de")}, refs, "de", theirs)
    sacre = comparisons["sacrebleu"]
    expected = (sacrebleu.corpus_bleu(mine, [refs]).score - sacrebleu.corpus_bleu(theirs, [refs]).score)
    assert sacre.delta == pytest.approx(expected, abs=1e-6) and sacre.delta > 0
    assert sacre.low <= sacre.delta <= sacre.high
    text = report.baseline_sentence("theirs.de", comparisons)
    lc = comparisons["bleu_lc_moses"]
    assert f"{lc.delta:+.2f} [{lc.low:+.2f}, {lc.high:+.2f}], p {lc.p_value:.3f}" in text
    _, same = report.chosen_statistics({"path": str(tmp_path / "chosen.de")}, refs, "de", mine)
    assert all(c.delta == 0 and c.low == 0 == c.high for c in same.values())


def test_baseline_file_checked_before_any_decoding(report, tmp_path):
    """A --baseline that cannot be the test set's translation is refused by name and line
    count; a missing one by name."""
    from tf_transformer.errors import UserError

    path = tmp_path / "base.de.gz"
    import gzip

    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("eins\nzwei\n")
    assert report.read_baseline(str(path), 2) == ["eins", "zwei"]
    with pytest.raises(UserError, match=r"base\.de\.gz has 2 lines but test2016 has 1,000 sentences"):
        report.read_baseline(str(path), 1000)
    with pytest.raises(UserError, match=r"--baseline .*missing\.de: no such file"):
        report.read_baseline(str(tmp_path / "missing.de"), 2)


def test_a_missing_run_is_one_line_not_a_traceback(report, tmp_path, capsys):
    assert report.main(["--run", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "config.yaml does not exist" in err and "Traceback" not in err


def test_split_length_sentence_gives_the_shift_from_val_to_test(report):
    """Multi30k's val references are relatively longer than test2016's: the report says by
    how much a length fitted on val overshoots on test2016."""
    val = (["a b c d"] * 10, ["w x y z"] * 9 + ["w x y"])        # 39 / 40 = 0.975
    test = (["a b c d"] * 10, ["w x y"] * 10)                     # 30 / 40 = 0.750
    assert report.words_per_source_word(*val) == pytest.approx(0.975)
    text = report.split_length_sentence({"val": val, "test2016": test})
    assert "0.975 in val and 0.750 in" in text and "30.0% longer" in text  # 0.975 / 0.75 = 1.30
    assert "23.1% shorter" in report.split_length_sentence({"val": test, "test2016": val})  # 0.75 / 0.975 - 1
