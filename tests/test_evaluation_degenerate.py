"""Degenerate outputs: run-ons and repetition loops, with their line numbers."""


def test_degenerate_line_numbers():
    from tf_transformer.evaluation.degenerate import degenerate_outputs

    sources = ["a man sleeps", "two dogs", "", "a long source sentence of seven words"]
    hyps = ["ein Mann schläft", "zwei Hunde sehr sehr sehr sehr sehr", "ein Wort zwei", "und und und"]
    d = degenerate_outputs(hyps, sources)
    assert d.run_ons == [2, 3] and d.loops == [2, 4] and d.outputs == 4
    assert d.line() == ("degenerate outputs of 4: 2 longer than twice their source (lines 2, 3); "
                        "2 with a repetition loop (lines 2, 4)")
    assert degenerate_outputs(hyps).run_ons is None
    many = degenerate_outputs(["so so so"] * 9)
    assert many.line(show=3).endswith("(lines 1, 2, 3, ... (6 more))")
