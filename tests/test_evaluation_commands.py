"""`tft evaluate` end to end with the tiny copy model (its references are its inputs)."""

import json

import pytest
from helpers.tiny_model import toy_sentences


def test_evaluate_source_reference(assets, tmp_path, capsys):
    from tf_transformer.cli import main

    sents = toy_sentences(30, seed=42)
    (tmp_path / "src.txt").write_text("\n".join(sents) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(sents) + "\n")
    code = main(["evaluate", "--model", assets[0], "--vocab", assets[1], "--source", str(tmp_path / "src.txt"),
                 "--reference", str(tmp_path / "ref.txt"), "--beam", "2", "--output", str(tmp_path / "hyp.txt"),
                 "--json", str(tmp_path / "s.json"), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.strip().split("\n")
    assert lines[0].startswith("# ") and "30 sentences" in lines[0] and "beam 2" in lines[0]
    labels = [line.split("  ")[0].strip() for line in lines[1:6]]
    assert labels == ["sacreBLEU (detok, cased)", "chrF2", "BLEU lowercased (13a)", "BLEU lowercased (Moses tok)",
                      "BLEU tok+compound (paper)"]
    assert "case:mixed" in lines[1] and "version:" in lines[1]
    assert lines[6].startswith("degenerate outputs of 30: ") and "longer than twice their source" in lines[6]
    hyps = (tmp_path / "hyp.txt").read_text().split("\n")
    assert len(hyps) == 31
    data = json.loads((tmp_path / "s.json").read_text())
    # the (weak) copy model's outputs match their own references better than shuffled ones
    from tf_transformer.evaluation.bleu import chrf

    assert data["scores"]["chrf"]["score"] == pytest.approx(chrf(hyps[:30], sents).score, abs=1e-3)
    assert data["scores"]["chrf"]["score"] > chrf(hyps[:30], sents[1:] + sents[:1]).score + 5
    assert "wrote hypotheses to" in err and "sacreBLEU" in err
    from tf_transformer.evaluation.degenerate import degenerate_outputs

    assert data["degenerate"] == degenerate_outputs(hyps[:30], sents).as_dict()


def test_evaluate_split_from_config(assets, tmp_path, capsys):
    from tf_transformer.cli import main

    sents = toy_sentences(12, seed=7)
    for name in ("train.en", "train.de", "test.en", "test.de"):
        (tmp_path / name).write_text("\n".join(sents) + "\n")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "data:\n  source: text\n"
        f"  train_source: {tmp_path / 'train.en'}\n  train_target: {tmp_path / 'train.de'}\n"
        f"  test_source: {tmp_path / 'test.en'}\n  test_target: {tmp_path / 'test.de'}\n"
        "decode:\n  beam_size: 3\n  alpha: 1.0\n")
    code = main(["evaluate", "--model", assets[0], "--vocab", assets[1], "--config", str(cfg), "--split", "test",
                 "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "12 sentences" in out and "beam 3, alpha 1" in out


def test_evaluate_errors(assets, tmp_path, capsys):
    from tf_transformer.cli import main

    (tmp_path / "a.txt").write_text("x\ny\n")
    (tmp_path / "b.txt").write_text("x\n")
    base = ["evaluate", "--model", assets[0], "--vocab", assets[1]]
    assert main(base + ["--source", str(tmp_path / "a.txt")]) == 2
    assert "go together" in capsys.readouterr().err
    assert main(base + ["--source", str(tmp_path / "a.txt"), "--reference", str(tmp_path / "b.txt")]) == 2
    assert "has 2 lines but --reference" in capsys.readouterr().err
    assert main(base + ["--source", str(tmp_path / "zz.txt"), "--reference", str(tmp_path / "b.txt")]) == 2
    assert "zz.txt: no such file" in capsys.readouterr().err


def test_evaluate_bootstrap_and_baseline(assets, tmp_path, capsys):
    """--baseline compares the model's outputs with a file's on the same resampled sets (here
    the shuffled references, far worse): the interval and the comparison equal the library's;
    a gzip reference is read as text."""
    import gzip

    from tf_transformer.cli import main
    from tf_transformer.evaluation.significance import bootstrap_intervals, paired_bootstrap

    sents = toy_sentences(30, seed=42)
    (tmp_path / "src.txt").write_text("\n".join(sents) + "\n")
    with gzip.open(tmp_path / "ref.de.gz", "wt") as f:
        f.write("\n".join(sents) + "\n")
    worse = sents[1:] + sents[:1]
    (tmp_path / "base.txt").write_text("\n".join(worse) + "\n")
    code = main(["evaluate", "--model", assets[0], "--vocab", assets[1], "--source", str(tmp_path / "src.txt"),
                 "--reference", str(tmp_path / "ref.de.gz"), "--beam", "2", "--output", str(tmp_path / "hyp.txt"),
                 "--baseline", str(tmp_path / "base.txt"), "--bootstrap", "200", "--json", str(tmp_path / "s.json"),
                 "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "95% intervals from 200 bootstrap resamples" in out and "against the baseline" in out
    hyps = (tmp_path / "hyp.txt").read_text().split("\n")[:30]
    data = json.loads((tmp_path / "s.json").read_text())["scores"]["chrf"]
    interval = bootstrap_intervals(hyps, sents, samples=200, metrics=["chrf"])["chrf"]
    comparison = paired_bootstrap(worse, hyps, sents, samples=200, metrics=["chrf"])["chrf"]
    assert data["interval"]["low"] == pytest.approx(interval.low, abs=1e-3)
    assert data["against_baseline"]["delta"] == pytest.approx(comparison.delta, abs=1e-3) and comparison.delta > 5
    assert data["against_baseline"]["p_value"] < 0.05 and data["against_baseline"]["file"].endswith("base.txt")

    (tmp_path / "short.txt").write_text("x\n")
    assert main(["evaluate", "--model", assets[0], "--vocab", assets[1], "--source", str(tmp_path / "src.txt"),
                 "--reference", str(tmp_path / "ref.de.gz"), "--baseline", str(tmp_path / "short.txt")]) == 2
    assert "short.txt has 1 lines but" in capsys.readouterr().err
