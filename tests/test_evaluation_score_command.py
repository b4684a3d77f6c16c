"""`tft score`: translation files scored without a model, with intervals and paired tests."""

import gzip
import json
import sys

import pytest

from tf_transformer.cli import main

REFS = ["Ein Mann mit einem orangefarbenen Hut starrt auf etwas.",
        "Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun.",
        "Ein Mädchen in einem Karateanzug bricht einen Stock mit einem Tritt.",
        "Fünf Leute in Winterjacken und mit Helmen stehen im Schnee mit Schneemobilen im Hintergrund.",
        "Leute reparieren das Dach eines Hauses.",
        "Ein hell gekleideter Mann fotografiert eine Gruppe von Männern in dunklen Anzügen und mit Hüten."] * 5
GOOD = [r.replace("Ein ", "Der ", 1) for r in REFS]
BAD = [" ".join(r.split()[:3]) for r in REFS]


@pytest.fixture
def files(tmp_path):
    with gzip.open(tmp_path / "test.de.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(REFS) + "\n")
    (tmp_path / "good.txt").write_text("\n".join(GOOD) + "\n", encoding="utf-8")
    (tmp_path / "bad.txt").write_text("\n".join(BAD) + "\n", encoding="utf-8")
    return tmp_path


def test_score_with_baseline_and_json(files, capsys):
    from tf_transformer.evaluation.bleu import moses_lowercase_bleu, sacre_bleu
    from tf_transformer.evaluation.significance import paired_bootstrap

    code = main(["score", "--reference", str(files / "test.de.gz"), "--baseline", str(files / "bad.txt"),
                 str(files / "good.txt"), "--bootstrap", "300", "--json", str(files / "s.json")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "30 sentences, target language de; 95% intervals from 300 bootstrap resamples" in out
    assert "significant at 0.05" in out and "tok:moses-de" in out
    data = json.loads((files / "s.json").read_text())
    good = data["systems"][str(files / "good.txt")]["scores"]
    assert good["sacrebleu"]["score"] == pytest.approx(sacre_bleu(GOOD, REFS).score, abs=1e-3)
    assert good["bleu_lc_moses"]["score"] == pytest.approx(moses_lowercase_bleu(GOOD, REFS).score, abs=1e-3)
    assert good["bleu_lc_moses"]["interval"]["low"] <= good["bleu_lc_moses"]["score"]
    expected = paired_bootstrap(BAD, GOOD, REFS, samples=300, metrics=["bleu_lc_moses"])["bleu_lc_moses"]
    got = good["bleu_lc_moses"]["against_baseline"]
    assert got["delta"] == pytest.approx(expected.delta, abs=1e-3) and got["delta"] > 20
    assert got["p_value"] == pytest.approx(expected.p_value, abs=1e-4) and got["wins"] == 1.0
    assert data["lang"] == "de" and data["bootstrap"] == {"samples": 300, "seed": 12345}
    assert data["systems"][str(files / "good.txt")]["degenerate"] == {
        "run_ons": None, "run_on_lines": None, "loops": 0, "loop_lines": []}


def test_score_does_not_load_tensorflow(files):
    """Scoring files needs no TensorFlow: a fresh process scores and never imports it."""
    import subprocess

    code = ("import sys; from tf_transformer.cli import main; "
            f"rc = main(['score', '--reference', {str(files / 'test.de.gz')!r}, {str(files / 'good.txt')!r}, "
            "'--bootstrap', '20']); print(rc, 'tensorflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip().splitlines()[-1] == "0 False", done.stdout + done.stderr


def test_score_notes_tokenized_lowercased_files_once(files, capsys):
    tokenized = [" ".join(r.lower().replace(".", " .").split()) for r in REFS]
    (files / "tok.txt").write_text("\n".join(tokenized) + "\n", encoding="utf-8")
    code = main(["score", "--reference", str(files / "test.de.gz"), str(files / "tok.txt"), str(files / "good.txt"),
                 "--bootstrap", "20", "--json", str(files / "s.json")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.count("note: 30 of 30 outputs end in a tokenized period") == 1
    assert out.count("note: the outputs have no capital letter, 30 of 30 references have") == 1
    assert "forgot to detokenize" not in out + err
    systems = json.loads((files / "s.json").read_text())["systems"]
    assert len(systems[str(files / "tok.txt")]["notes"]) == 2 and systems[str(files / "good.txt")]["notes"] == []
    # the lowercased Moses-tokenized BLEU of the tokenized lowercased copy of the references is perfect
    assert systems[str(files / "tok.txt")]["scores"]["bleu_lc_moses"]["score"] == pytest.approx(100.0)


def test_score_without_bootstrap_and_metric_choice(files, capsys):
    code = main(["score", "--reference", str(files / "test.de.gz"), str(files / "good.txt"), "--bootstrap", "0",
                 "--metrics", "chrf,sacrebleu"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "interval" not in out and "chrF2" in out and "sacreBLEU" in out and "Moses" not in out
    assert "degenerate outputs of 30: 0 with a repetition loop" in out


def test_score_counts_degenerate_outputs_with_sources(files, capsys):
    sources = ["A man in an orange hat staring at something."] * 30
    hyps = list(GOOD)
    hyps[3] = "Ein Mann sehr sehr sehr sehr sehr sehr sehr sehr sehr sehr sehr sehr sehr sehr sehr sehr sehr sehr ."
    hyps[7] = "Ein Mann mit einem Hut mit einem Hut mit einem Hut ."
    (files / "src.en").write_text("\n".join(sources) + "\n")
    (files / "loops.txt").write_text("\n".join(hyps) + "\n")
    code = main(["score", "--reference", str(files / "test.de.gz"), "--source", str(files / "src.en"),
                 str(files / "loops.txt"), "--bootstrap", "0", "--json", str(files / "d.json")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert ("degenerate outputs of 30: 1 longer than twice their source (line 4); "
            "2 with a repetition loop (lines 4, 8)") in out
    assert json.loads((files / "d.json").read_text())["systems"][str(files / "loops.txt")]["degenerate"] == {
        "run_ons": 1, "run_on_lines": [4], "loops": 2, "loop_lines": [4, 8]}


def test_score_errors(files, capsys):
    ref = str(files / "test.de.gz")
    (files / "short.txt").write_text("a\nb\n")
    (files / "plain").write_text("\n".join(REFS) + "\n")
    cases = [
        (["--reference", ref, str(files / "short.txt")], "short.txt has 2 lines but --reference"),
        (["--reference", ref, str(files / "none.txt")], "none.txt: no such file"),
        (["--reference", str(files / "plain"), str(files / "good.txt")], "cannot tell the target language"),
        # a format's suffix is no language (it read "txt" as one)
        (["--reference", str(files / "short.txt"), str(files / "short.txt")], "cannot tell the target language"),
        (["--reference", ref, str(files / "good.txt"), "--seed", "-1"], "--seed -1: must be between 0 and"),
        (["--reference", ref, str(files / "good.txt"), "--metrics", "bleu,chrf"], "unknown bleu"),
        (["--reference", ref, str(files / "good.txt"), "--bootstrap", "1"], "--bootstrap 1"),
        (["--reference", ref, str(files / "good.txt"), "--baseline", str(files / "bad.txt"), "--bootstrap", "0"],
         "--baseline needs bootstrap"),
        (["--reference", ref, str(files / "good.txt"), "--baseline", str(files / "short.txt")],
         "--baseline"),
    ]
    for argv, message in cases:
        assert main(["score"] + argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, (argv, err)
    # a gzip name over plain text: named, not a traceback
    (files / "fake.de.gz").write_text("not gzip\n")
    assert main(["score", "--reference", str(files / "fake.de.gz"), str(files / "good.txt")]) == 2
    assert "not a readable gzip file" in capsys.readouterr().err
    # --lang overrides the name
    assert main(["score", "--reference", str(files / "plain"), str(files / "good.txt"), "--lang", "de",
                 "--bootstrap", "0"]) == 0
