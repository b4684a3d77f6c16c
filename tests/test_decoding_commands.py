"""`tft translate` and the Translator: order restored, empty lines, truncation, invalid UTF-8."""

import ast
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from helpers.tiny_model import toy_sentences

from tf_transformer.decoding.translator import (
    ProgressBar,
    Translator,
    read_lines,
)
from tf_transformer.errors import UserError


@pytest.fixture(scope="module")
def translator(tiny):
    return Translator(*tiny, beam_size=3, alpha=0.6, max_extra_length=5, batch_size=64)


def test_read_lines_replaces_invalid_utf8():
    lines, bad = read_lines(b"ok\r\nbad \xff\xfe here\n\ncaf\xc3\xa9\n")
    assert lines == ["ok", "bad \ufffd\ufffd here", "", "caf\u00e9"]
    assert bad == [2]
    assert read_lines(b"") == ([], [])
    assert read_lines(b"no newline") == (["no newline"], [])


def test_batch_of_64_mixed_lengths_keeps_order(translator):
    texts = toy_sentences(60, seed=5)
    texts[3] = ""
    texts[10] = "   "
    texts[20] = " ".join(["the dog runs in the park"] * 30)  # far over max_length=64 tokens
    texts += ["a", "", "dog", "a red ball in the blue water with the girl and the boy"]
    assert len(texts) == 64
    outputs, scores, stats = translator.translate(texts)
    assert len(outputs) == 64
    assert outputs[3] == "" and outputs[10] == "" and outputs[61] == ""
    assert stats.truncated == 1
    assert stats.decoded == 61
    # the tiny model copies its input (imperfectly): real outputs, of varied lengths
    lengths = {len(o.split()) for o in outputs if o}
    assert sum(1 for o in outputs if o) > 40 and len(lengths) > 3
    # Each sentence decoded alone gives the same translation as inside the sorted batch.
    for i in (0, 7, 20, 60, 62, 63):
        alone, alone_scores, _ = translator.translate([texts[i]])
        assert alone[0] == outputs[i]
        assert alone_scores[0] == pytest.approx(scores[i], abs=1e-3)


def test_workers_decode_batches_at_once_with_the_same_results(tiny):
    # Batches of 8 from 3 threads at once: the same outputs and scores, in input order, as
    # one batch after the other; progress counts every sentence.
    model, tok = tiny
    texts = toy_sentences(45, seed=11) + [""]
    one, many = (Translator(model, tok, beam_size=2, max_extra_length=5, batch_size=8, workers=w) for w in (1, 3))
    done = []
    outputs, scores, stats = many.translate(texts, progress=done.append)
    assert (outputs, scores) == one.translate(texts)[:2]
    assert sum(done) == 46 and stats.batches == 6 and stats.decoded == 45
    with pytest.raises(UserError, match="workers=0"):
        Translator(model, tok, workers=0)


def test_output_length_rule(translator):
    src = translator.tokenizer.encode(["a dog"])[0]
    outs, _, _ = translator.translate_ids([src, list(range(4, 40)) * 3])
    assert len(outs[0]) <= len(src) + 5
    assert len(outs[1]) <= translator.limit


def test_cli_translate_files(assets, tmp_path, capsys):
    from tf_transformer.cli import main

    src = tmp_path / "in.txt"
    src.write_bytes(b"a dog runs.\n\nthe cat \xff sits.\n" + b"a boy " * 80 + b"\n")
    out = tmp_path / "out.txt"
    code = main(["translate", "--model", assets[0], "--vocab", assets[1], "--input", str(src), "--output",
                 str(out), "--beam", "2", "--max-extra-len", "4", "--quiet"])
    assert code == 0
    lines = out.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 5 and lines[-1] == "" and lines[1] == ""
    err = capsys.readouterr().err
    assert "1 line(s) of" in err and "invalid UTF-8 (line 3)" in err
    assert "cut to it" in err
    assert f"wrote 4 translations to {out}" in err


def test_cli_translate_reads_gzip_input_as_text(assets, tmp_path, capsys):
    """A ``.gz`` input is decompressed, as ``train``, ``evaluate`` and ``score`` read it; a file
    named ``.gz`` that is not gzip is refused rather than translated as bytes."""
    import gzip

    from tf_transformer.cli import main

    text = b"a dog runs.\nthe cat sits on a mat.\n"
    (tmp_path / "in.txt").write_bytes(text)
    (tmp_path / "in.txt.gz").write_bytes(gzip.compress(text))
    common = ["--model", assets[0], "--vocab", assets[1], "--beam", "2", "--max-extra-len", "4", "--quiet"]
    for name in ("in.txt", "in.txt.gz"):
        assert main(["translate", *common, "--input", str(tmp_path / name), "--output",
                     str(tmp_path / f"{name}.out")]) == 0
    plain, unzipped = ((tmp_path / f"{n}.out").read_text(encoding="utf-8") for n in ("in.txt", "in.txt.gz"))
    assert plain == unzipped and len(plain.splitlines()) == 2
    # and an output named .gz is written compressed
    assert main(["translate", *common, "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "o.gz")]) == 0
    assert gzip.decompress((tmp_path / "o.gz").read_bytes()).decode("utf-8") == plain
    assert "invalid UTF-8" not in capsys.readouterr().err
    (tmp_path / "fake.gz").write_bytes(text)
    assert main(["translate", *common, "--input", str(tmp_path / "fake.gz")]) == 2
    assert "fake.gz: not a readable gzip file" in capsys.readouterr().err


def test_cli_refuses_an_unwritable_output_before_decoding(assets, tmp_path, capsys, monkeypatch):
    """``--output`` under a file, or naming a folder, is refused before the model is loaded, so no
    decoding is lost to it; the message names the path and what is wrong."""
    from tf_transformer.cli import decode, main

    (tmp_path / "in.txt").write_text("a dog runs.\n", encoding="utf-8")
    loaded = []
    monkeypatch.setattr(decode, "build_translator", lambda args: loaded.append(args) or 1 / 0)
    common = ["--model", assets[0], "--vocab", assets[1], "--input", str(tmp_path / "in.txt")]
    assert main(["translate", *common, "--output", str(tmp_path / "in.txt" / "out.de")]) == 2
    assert f"{tmp_path / 'in.txt'} is a file, not a folder" in capsys.readouterr().err
    assert main(["translate", *common, "--output", str(tmp_path)]) == 2
    assert "a folder; give a file name" in capsys.readouterr().err
    assert main(["evaluate", "--model", assets[0], "--vocab", assets[1], "--source", str(tmp_path / "in.txt"),
                 "--reference", str(tmp_path / "in.txt"), "--json", str(tmp_path / "in.txt" / "s.json")]) == 2
    assert "--json" in capsys.readouterr().err
    assert loaded == []


def test_atomic_write_errors_name_the_destination_not_the_temporary_file(tmp_path):
    from tf_transformer.errors import WriteError
    from tf_transformer.io import PARTIAL_PREFIX, atomic_write

    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "x").write_text("keep")
    with pytest.raises(WriteError) as caught:
        atomic_write(tmp_path / "taken", "text")  # a file over a non-empty folder: the rename fails
    assert str(tmp_path / "taken") in str(caught.value) and PARTIAL_PREFIX not in str(caught.value)
    assert (tmp_path / "taken" / "x").read_text() == "keep"


def test_cli_errors(assets, tmp_path, capsys, monkeypatch):
    from tf_transformer.cli import main

    assert main(["translate", "--model", str(tmp_path / "nope.keras"), "--vocab", assets[1]]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["translate", "--model", assets[0], "--vocab", assets[1], "--beam", "0",
                 "--input", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err
    (tmp_path / "x.txt").write_text("a\n")
    assert main(["translate", "--model", assets[0], "--vocab", assets[1], "--beam", "0",
                 "--input", str(tmp_path / "x.txt")]) == 2
    assert "--beam" in capsys.readouterr().err
    # --threads 0 is valid (TensorFlow's own pools), so a negative count is told ">= 0"
    assert main(["translate", "--model", assets[0], "--vocab", assets[1], "--threads", "-1",
                 "--input", str(tmp_path / "x.txt")]) == 2
    assert "--threads -1: must be >= 0 (0: TensorFlow's own default)" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", None)  # a process started with its stdin closed (`<&-`)
    assert main(["translate", "--model", assets[0], "--vocab", assets[1]]) == 2
    assert "no input: stdin is closed; give --input FILE or pipe the lines in" in capsys.readouterr().err
    assert main(["translate", "--model", assets[0], "--vocab", assets[1], "--stream", "--chunk-lines", "5",
                 "--input", str(tmp_path / "x.txt")]) == 2
    assert "--chunk-lines sets how much of a whole input is decoded at a time; --stream" in capsys.readouterr().err


def test_progress_bar_lines(tmp_path):
    import io

    stream = io.StringIO()
    bar = ProgressBar(1000, "translate", stream=stream)
    for _ in range(10):
        bar.update(100)
    bar.close()
    text = stream.getvalue()
    assert "1,000/1,000" in text and text.count("\n") >= 10
    quiet = io.StringIO()
    ProgressBar(10, "translate", stream=quiet).update(10)
    assert quiet.getvalue() == ""


@pytest.mark.slow
def test_cli_translate_stdin_stdout(assets):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-m", "tf_transformer.cli", "translate", "--model", assets[0],
                           "--vocab", assets[1], "--beam", "1", "--threads", "1", "--timings"],
                          input=b"a dog.\n\nthe girl plays\n", capture_output=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode("utf-8").split("\n")
    assert len(out) == 4 and out[1] == "" and out[3] == ""
    assert b"wrote 3 translations to stdout" in proc.stderr
    # --timings: every phase of the process, in order, adding up to the total
    line = next(x for x in proc.stderr.decode().splitlines() if x.startswith("tft translate: timings: "))
    phases = re.findall(r"(?:^|, |; )([a-zA-Z][^,;(]*?) (\d+\.\d\d) s", line.split(": ", 2)[2])
    names = [n for n, _ in phases]
    assert names == ["Python and tft start-up", "TensorFlow import", "model and vocabulary",
                     "tracing the decoding graph", "reading the input", "decoding", "writing"], line
    parts = [float(v) for _, v in phases]
    total = float(re.search(r"; (\d+\.\d\d) s in all$", line).group(1))
    assert abs(sum(parts) - total) < 0.05 and parts[1] > 0.5, line
    first = float(re.search(r"decoding [\d.]+ s \(first batch done after (\d+\.\d\d) s\)", line).group(1))
    assert 0 < first <= parts[5] + 0.01, line


def _lines_of(stream):
    """A queue that receives ``stream``'s lines as they come (``None`` at its end)."""
    import queue
    import threading

    lines = queue.Queue()

    def pump():
        for line in iter(stream.readline, b""):
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def test_stream_batches_the_lines_that_wait_and_raises_what_the_reader_met():
    """--stream's reader: in order, never more than the most per batch; lines read while the
    consumer is busy come together in full batches; an error of the reading reaches the
    consumer after the lines before it."""
    import io
    import time

    from tf_transformer.cli.decode import _arrived

    lines = [f"line {i}\n".encode() for i in range(11)]
    batches = _arrived(io.BytesIO(b"".join(lines)), 4)
    got = [next(batches)]
    time.sleep(0.3)
    for batch in batches:  # a slow consumer: the reader has filled the queue (8 lines) meanwhile
        got.append(batch)
        time.sleep(0.3)
    assert [line for batch in got for line in batch] == lines
    rest = 11 - len(got[0])
    assert [len(b) for b in got[1:]] == [4] * (rest // 4) + ([rest % 4] if rest % 4 else [])
    assert [len(b) for b in _arrived(io.BytesIO(b"".join(lines)), 1)] == [1] * 11
    assert list(_arrived(io.BytesIO(b""), 4)) == []

    class Broken:
        def __init__(self):
            self.left = [b"a\n", b"b\n"]

        def readline(self):
            if self.left:
                return self.left.pop(0)
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")

    seen = []
    with pytest.raises(EOFError, match="end-of-stream marker"):
        for batch in _arrived(Broken(), 4):
            seen += batch
    assert seen == [b"a\n", b"b\n"]


def test_cli_translate_stream_answers_each_line_before_the_next_is_written(assets, tmp_path, capsys):
    """--stream on a pipe that stays open: each translation arrives while the process still
    waits for the next line (the batch path waits for the input's end), and the outputs are
    those of the batch path decoding one line at a time. At a terminal (a pty) streaming is the
    default, a ready line says what to do, and Ctrl-D ends."""
    import gzip
    import pty

    from tf_transformer.cli import main

    lines = [b"a dog runs.", b"the cat \xff sits.", b"", b"the girl plays in the water"]
    flags = ["--model", assets[0], "--vocab", assets[1], "--beam", "2"]
    (tmp_path / "in.txt").write_bytes(b"\n".join(lines) + b"\n")
    assert main(["translate", *flags, "--input", str(tmp_path / "in.txt"), "--output", str(tmp_path / "ref.txt"),
                 "--batch-size", "1", "--quiet"]) == 0
    want = [line + "\n" for line in (tmp_path / "ref.txt").read_text(encoding="utf-8").split("\n")[:-1]]
    assert len(want) == 4 and want[2] == "\n" and all(want[i] != "\n" for i in (0, 1, 3))
    assert main(["translate", *flags, "--stream", "--timings"]) == 2  # refused before the model loads
    assert "--timings times the phases of a whole input" in capsys.readouterr().err
    # a file in, a gzip file out, line by line: the same text
    assert main(["translate", *flags, "--stream", "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "s.txt.gz")]) == 0
    assert gzip.decompress((tmp_path / "s.txt.gz").read_bytes()).decode("utf-8") == "".join(want)

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-m", "tf_transformer.cli", "translate", *flags, "--threads", "1"]
    proc = subprocess.Popen([*command, "--stream"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    try:
        out = _lines_of(proc.stdout)
        got = []
        for line in lines:
            proc.stdin.write(line + b"\n")
            proc.stdin.flush()
            got.append(out.get(timeout=240).decode("utf-8"))  # before the next line exists
        proc.stdin.close()
        assert out.get(timeout=60) is None and proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read().decode()
    assert got == want, err
    assert "line 2 of <stdin> had invalid UTF-8" in err and "wrote 4 translations to stdout" in err
    assert "as they came: 4 batches" in err and "ready" not in err  # one at a time, as written; no prompt

    controller, terminal = pty.openpty()
    proc = subprocess.Popen(command, stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    os.close(terminal)
    try:
        said = _lines_of(proc.stderr)
        ready = said.get(timeout=240).decode()
        assert ready.startswith("tft translate: ready (beam 2,") and "Ctrl-D ends" in ready, ready
        os.write(controller, b"a dog runs.\n")
        assert proc.stdout.readline().decode() == want[0]
        os.write(controller, b"\x04")  # Ctrl-D at the start of a line: the end of the input
        assert proc.wait(timeout=60) == 0
        assert "wrote 1 translations to stdout" in said.get(timeout=10).decode()
    finally:
        os.close(controller)
        if proc.poll() is None:
            proc.kill()


def test_resume_goes_on_after_an_interruption_and_refuses_another_run(assets, tmp_path, capsys, monkeypatch):
    """tft translate --resume writes chunk by chunk with a progress record: interrupted in its
    third chunk, with half a chunk's bytes left behind, a rerun cuts them off and goes on; the
    file then equals an uninterrupted run's (plain and gzip, 1-best and n-best); a finished run
    reruns as a no-op; another decoding setting, another input, a foreign output file and stdin
    are refused before anything is written."""
    import gzip

    from tf_transformer.cli import main

    texts = toy_sentences(11, seed=21)
    texts[4] = ""
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    flags = ["translate", "--model", assets[0], "--vocab", assets[1], "--input", str(src), "--beam", "2",
             "--max-extra-len", "6", "--quiet"]
    real = Translator.translate
    for extra, name in (([], "out.txt"), (["--n-best", "2"], "nbest.txt.gz")):
        assert main([*flags, *extra, "--output", str(tmp_path / f"ref-{name}")]) == 0
        want = (tmp_path / f"ref-{name}").read_bytes()
        want = gzip.decompress(want) if name.endswith(".gz") else want
        out = tmp_path / name
        calls = []

        def failing(self, lines, progress=None):
            calls.append(len(lines))
            if len(calls) == 3:
                raise KeyboardInterrupt
            return real(self, lines, progress=progress)

        monkeypatch.setattr(Translator, "translate", failing)
        assert main([*flags, *extra, "--output", str(out), "--resume", "--chunk-lines", "4"]) == 130
        monkeypatch.setattr(Translator, "translate", real)
        record = json.loads((tmp_path / (name + ".progress.json")).read_text())
        assert calls == [4, 4, 3] and record["done"] == 8 and not record["finished"]
        with open(out, "ab") as f:
            f.write(b"half a chunk")  # what an interrupted write could leave
        capsys.readouterr()
        assert main([*flags, *extra, "--output", str(out), "--resume", "--chunk-lines", "4"]) == 0
        assert "lines 1-8 of 11 were translated by an earlier run; going on from line 9" in capsys.readouterr().err
        got = out.read_bytes()
        assert (gzip.decompress(got) if name.endswith(".gz") else got) == want
        assert json.loads((tmp_path / (name + ".progress.json")).read_text())["finished"]
        assert main([*flags, *extra, "--output", str(out), "--resume", "--chunk-lines", "4"]) == 0
        assert "is complete (11 lines" in capsys.readouterr().err and out.read_bytes() == got

    # refused: another setting, another input, a file not begun by --resume, stdin
    out = tmp_path / "again.txt"
    monkeypatch.setattr(Translator, "translate", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    assert main([*flags, "--output", str(out), "--resume"]) == 130
    monkeypatch.setattr(Translator, "translate", real)
    capsys.readouterr()
    assert main([*flags, "--beam", "3", "--output", str(out), "--resume"]) == 2  # the last --beam counts
    assert "was begun by another run (decoding: \"beam 2," in capsys.readouterr().err
    src.write_text("\n".join(texts[:5]) + "\n", encoding="utf-8")
    assert main([*flags, "--output", str(out), "--resume"]) == 2
    assert "(input: " in capsys.readouterr().err and out.read_bytes() == b""
    assert main([*flags, "--output", str(tmp_path / "ref-out.txt"), "--resume"]) == 2
    assert "exists and has no progress record" in capsys.readouterr().err
    assert main([*flags[:5], "--output", str(out), "--resume"]) == 2  # stdin
    assert "--resume goes on with an interrupted translation of one file into another" in capsys.readouterr().err
    # written scores differ in their last digit with the batches: another --chunk-lines is refused there
    scored = tmp_path / "scored.txt"
    monkeypatch.setattr(Translator, "translate", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    assert main([*flags, "--scores", "--output", str(scored), "--resume", "--chunk-lines", "4"]) == 130
    monkeypatch.setattr(Translator, "translate", real)
    capsys.readouterr()
    assert main([*flags, "--scores", "--output", str(scored), "--resume", "--chunk-lines", "5"]) == 2
    assert "was begun by another run (batches: " in capsys.readouterr().err


def test_n_best_lists_start_with_the_one_best_translation(tiny, assets, tmp_path, capsys):
    """Translator(n_best=3): per sentence up to 3 distinct translations, best first, the first
    the 1-best translation with its score; an empty line gives [""]. tft translate --n-best
    writes them as 'LINE ||| translation ||| score'; an n-best over the beam size is refused
    before the model loads."""
    from tf_transformer.cli import main
    from tf_transformer.decoding.translator import translate

    texts = toy_sentences(12, seed=9) + ["", "a dog runs in the park."]
    one = Translator(*tiny, beam_size=4, alpha=0.6, max_extra_length=5)
    best, best_scores, _ = one.translate(texts)
    lists, scores, stats = Translator(*tiny, beam_size=4, alpha=0.6, max_extra_length=5, n_best=3).translate(texts)
    assert len(lists) == len(texts) and stats.decoded == len(texts) - 1
    assert lists[12] == [""] and scores[12] == [0.0]
    for i in range(len(texts)):
        if i == 12:
            continue
        assert 1 <= len(lists[i]) <= 3 and len(scores[i]) == len(lists[i])
        assert lists[i][0] == best[i] and scores[i][0] == pytest.approx(best_scores[i], abs=1e-4)
        assert scores[i] == sorted(scores[i], reverse=True)
    assert sum(len(x) == 3 for x in lists) >= 10  # full lists, but where +5 tokens cut the search short
    assert any(len(set(x)) > 1 for x in lists)  # different subword sequences, mostly different texts
    assert translate(tiny[0], texts[:2], tiny[1], n_best=2, max_extra_length=5) == [x[:2] for x in lists[:2]]
    with pytest.raises(UserError, match="n_best=5: must be between 1 and beam_size=4"):
        Translator(*tiny, beam_size=4, n_best=5)

    src = tmp_path / "in.txt"
    src.write_text("a dog runs.\n\nthe girl plays\n")
    out = tmp_path / "out.txt"
    flags = ["translate", "--model", assets[0], "--vocab", assets[1], "--input", str(src), "--quiet"]
    assert main([*flags, "--output", str(out), "--beam", "3", "--n-best", "2", "--max-extra-len", "5"]) == 0
    rows = [line.split(" ||| ") for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r[0] for r in rows] == ["0", "0", "1", "2", "2"] and rows[2][1:] == ["", "0.0000"]
    assert all(len(r) == 3 and float(r[2]) <= 0 for r in rows) and float(rows[0][2]) >= float(rows[1][2])
    ref = tmp_path / "ref.txt"
    assert main([*flags, "--output", str(ref), "--beam", "3", "--max-extra-len", "5"]) == 0
    assert [rows[0][1], rows[3][1]] == [x for x in ref.read_text(encoding="utf-8").splitlines() if x]
    capsys.readouterr()
    assert main([*flags, "--beam", "2", "--n-best", "3"]) == 2
    assert "--n-best 3: must be between 1 and the beam size (2; --beam)" in capsys.readouterr().err


def test_epsilon_sampling_from_the_command_line(tiny, assets, tmp_path, capsys):
    """tft translate --sample --sample-epsilon E writes what Translator(epsilon=E) samples; a cut
    above every probability leaves the most probable token: greedy's outputs whatever the seed;
    the flag is checked (range, --sample, CTranslate2)."""
    from tf_transformer.cli import main

    texts = toy_sentences(10, seed=17)
    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts) + "\n")
    flags = ["translate", "--model", assets[0], "--vocab", assets[1], "--input", str(src), "--max-extra-len", "8",
             "--quiet"]
    assert main([*flags, "--sample", "--seed", "2", "--sample-epsilon", "0.05", "--output", str(tmp_path / "e")]) == 0
    want = Translator(*tiny, beam_size=1, max_extra_length=8, sample=True, seed=2, epsilon=0.05).translate(texts)[0]
    assert (tmp_path / "e").read_text().splitlines() == want
    assert "of probability >= 0.05" in capsys.readouterr().err
    greedy = Translator(*tiny, beam_size=1, max_extra_length=8).translate(texts)[0]
    for seed in (1, 2):
        assert Translator(*tiny, beam_size=1, max_extra_length=8, sample=True, seed=seed,
                          epsilon=0.99).translate(texts)[0] == greedy
    for bad, message in ((["--sample-epsilon", "0.1"], "--sample-epsilon: applies to --sample only"),
                         (["--sample", "--sample-epsilon", "1"], "--sample-epsilon 1: must be >= 0 and < 1"),
                         (["--sample", "--sample-epsilon", "0.1", "--engine", "ctranslate2", "--model", "x"],
                          "--sample-epsilon: CTranslate2's sampler has no epsilon cut")):
        assert main([*flags, *bad]) == 2
        assert message in capsys.readouterr().err


def test_sampling_is_seeded_and_its_flags_are_checked(tiny, assets, tmp_path, capsys):
    """Translator(sample=True): the same seed gives the same translations, another seed others;
    a near-zero temperature gives the greedy ones; tft translate --sample likewise, and the
    sampling flags are refused where they would do nothing or cannot apply."""
    from tf_transformer.cli import main

    texts = toy_sentences(24, seed=11)
    greedy, _, _ = Translator(*tiny, beam_size=1, max_extra_length=8, batch_size=8).translate(texts)
    draw = lambda **kw: Translator(*tiny, beam_size=1, max_extra_length=8, batch_size=8, sample=True,  # noqa: E731
                                   **kw).translate(texts)[0]
    first = draw(seed=1)
    assert draw(seed=1) == first
    assert sum(a != b for a, b in zip(draw(seed=2), first)) >= 6
    assert sum(a != b for a, b in zip(first, greedy)) >= 6
    assert sum(a == b for a, b in zip(draw(seed=1, temperature=1e-3), greedy)) >= 22  # argmax, bar exact ties
    assert sum(a != b for a, b in zip(draw(seed=1, top_k=2), first)) >= 1
    # a sentence draws the same alone, in any batch, with any batch size or number of threads,
    # and wherever it comes in the input (given twice: the same draw twice)
    alone = Translator(*tiny, beam_size=1, max_extra_length=8, batch_size=1, sample=True, seed=1)  # 1 per batch
    assert alone.translate(texts[:8])[0] == first[:8]
    mixed = texts[8:] + texts[:8] + texts[3:5]
    again = Translator(*tiny, beam_size=1, max_extra_length=8, batch_size=5, workers=2, sample=True,
                       seed=1).translate(mixed)[0]
    assert again == first[8:] + first[:8] + first[3:5]
    # several samples per sentence: the first is the single sample, the others drawn apart; a
    # sentence's list is the same in any batch
    lists, list_scores, _ = Translator(*tiny, beam_size=1, max_extra_length=8, batch_size=8, sample=True, seed=1,
                                       n_best=3).translate(texts)
    assert [x[0] for x in lists] == first and all(len(x) == 3 and len(sc) == 3 for x, sc in zip(lists, list_scores))
    assert sum(len(set(x)) > 1 for x in lists) >= 12
    assert Translator(*tiny, beam_size=1, max_extra_length=8, batch_size=5, sample=True, seed=1,
                      n_best=3).translate(texts[::-1])[0] == lists[::-1]
    # a nucleus this small holds only the most probable token: greedy's outputs, whatever the seed
    assert draw(seed=1, top_p=1e-6) == draw(seed=2, top_p=1e-6) == greedy
    assert sum(a != b for a, b in zip(draw(seed=1, top_p=0.5), first)) >= 1
    with pytest.raises(UserError, match="sample=True draws one token at a time: it needs beam_size=1, not 4"):
        Translator(*tiny, beam_size=4, sample=True)
    with pytest.raises(UserError, match="top_p=0: sampling needs 0 < top_p <= 1"):
        Translator(*tiny, beam_size=1, sample=True, top_p=0)

    src = tmp_path / "in.txt"
    src.write_text("\n".join(texts[:6]) + "\n")
    flags = ["translate", "--model", assets[0], "--vocab", assets[1], "--input", str(src), "--max-extra-len", "8"]
    outs = []
    for name in ("a", "b"):
        assert main([*flags, "--output", str(tmp_path / name), "--sample", "--seed", "3", "--sample-topk", "5"]) == 0
        outs.append((tmp_path / name).read_text(encoding="utf-8"))
    assert outs[0] == outs[1] and len(outs[0].splitlines()) == 6
    assert "(sampling from the top 5, temperature 1, seed 3, max +8 tokens;" in capsys.readouterr().err
    assert main([*flags, "--output", str(tmp_path / "c"), "--sample", "--sample-topp", "1e-6", "--seed", "4"]) == 0
    assert (tmp_path / "c").read_text(encoding="utf-8").splitlines() == greedy[:6]
    assert "(sampling from all tokens (nucleus 1e-06), temperature 1, seed 4," in capsys.readouterr().err
    assert main([*flags, "--output", str(tmp_path / "d"), "--sample", "--seed", "1", "--n-best", "3"]) == 0
    rows = [line.split(" ||| ") for line in (tmp_path / "d").read_text(encoding="utf-8").splitlines()]
    assert [int(r[0]) for r in rows] == [i for i in range(6) for _ in range(3)]
    assert [r[1] for r in rows] == [x for lst in lists[:6] for x in lst]
    assert ", 3 samples per line;" in capsys.readouterr().err
    for extra, said in ((["--sample", "--beam", "4"], "--sample draws one token at a time: leave out --beam"),
                        (["--temperature", "0.5"], "--temperature: applies to --sample only"),
                        (["--sample-topp", "0.9"], "--sample-topp: applies to --sample only"),
                        (["--sample", "--sample-topp", "0"], "--sample-topp 0: must be > 0 and <= 1"),
                        (["--sample", "--sample-topp", "1.5"], "--sample-topp 1.5: must be > 0 and <= 1"),
                        (["--sample", "--temperature", "0"], "--temperature 0: must be > 0"),
                        # log-probabilities / 1e-39 overflow to -inf: it wrote empty lines scored -inf
                        (["--sample", "--temperature", "1e-39"], "--temperature 1e-39: must be >= 1e-06"),
                        (["--sample", "--alpha", "0.9"], "--alpha: beam search setting; --sample draws one token"),
                        (["--sample", "--stop-rule", "bound", "--alpha", "1"], "--alpha, --stop-rule: beam search "
                                                                               "settings")):
        assert main([*flags, *extra]) == 2, extra
        assert said in capsys.readouterr().err, extra
    with pytest.raises(UserError, match="temperature=1e-39: below 1e-06 a draw is the most probable token"):
        Translator(*tiny, beam_size=1, sample=True, temperature=1e-39)
    # greedy search ranks nothing: --alpha is said not to apply, not refused (sweeps over --beam include 1)
    assert main([*flags, "--output", str(tmp_path / "e"), "--beam", "1", "--alpha", "2"]) == 0
    assert "note: --alpha does not apply to greedy search (--beam 1)" in capsys.readouterr().err
    assert (tmp_path / "e").read_text(encoding="utf-8").splitlines() == greedy[:6]


def test_score_is_the_log_probability_decoding_gives_its_own_output(tiny):
    """Translator.score_ids of an output equals what the search scored it with: greedy's total
    log-probability (EOS included), beam search's divided by the length penalty
    ((5 + |Y|) / 6) ** alpha; batch composition does not change a score; empty sources are
    not scored, over-long pairs are cut and counted; score() is score_ids() of the encoded texts."""
    import numpy as np

    from tf_transformer.decoding.beam_search import length_penalty

    model, tok = tiny
    texts = toy_sentences(20, seed=13)
    sources = tok.encode(texts)
    for beam in (1, 3):
        tr = Translator(model, tok, beam_size=beam, alpha=0.6, max_extra_length=10, batch_size=8)
        outputs, scores, _ = tr.translate_ids(sources)
        log_probs, tokens, stats = tr.score_ids(sources, outputs)
        ended = [i for i, o in enumerate(outputs) if len(o) < len(sources[i]) + 10]  # ended with EOS, not cut
        assert len(ended) >= 10 and stats.decoded == 20 and stats.truncated == 0
        for i in ended:
            assert tokens[i] == len(outputs[i]) + 1
            penalty = 1.0 if beam == 1 else float(length_penalty(float(tokens[i]), 0.6))
            assert log_probs[i] / penalty == pytest.approx(scores[i], abs=2e-4), (beam, i)
    alone = [tr.score_ids([sources[i]], [outputs[i]])[0][0] for i in (0, 7, 19)]
    np.testing.assert_allclose(alone, [log_probs[i] for i in (0, 7, 19)], atol=1e-4)
    texts_out, _, _ = tr.translate(texts)
    np.testing.assert_allclose(tr.score(texts, texts_out)[0], tr.score_ids(sources, tok.encode(texts_out))[0],
                               atol=1e-5)
    lp, n, stats = tr.score(["", "a dog runs.", " ".join(["the dog runs"] * 40)], ["Ein Hund.", "", "x"])
    assert np.isnan(lp[0]) and n[0] == 0 and n[1] == 1 and lp[1] < 0  # an empty target: log P(EOS | source)
    assert stats.truncated == 1 and stats.decoded == 2
    with pytest.raises(UserError, match="2 sources but 1 targets"):
        tr.score(["a", "b"], ["c"])


def test_cli_score_target_writes_each_pairs_log_probability(tiny, assets, tmp_path, capsys):
    """tft translate --score-target: one 'log P, per token, tokens' line per input line, the
    figures of Translator.score; a target file of another length is refused naming both
    counts, flags that do not apply to scoring before the model loads."""
    from tf_transformer.cli import main

    sources = ["a dog runs.", "", "the girl plays in the water."]
    targets = ["ein hund rennt.", "egal", "das mädchen spielt."]
    (tmp_path / "s.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "t.de").write_text("\n".join(targets) + "\n", encoding="utf-8")
    flags = ["translate", "--model", assets[0], "--vocab", assets[1], "--input", str(tmp_path / "s.en")]
    assert main([*flags, "--score-target", str(tmp_path / "t.de"), "--output", str(tmp_path / "out")]) == 0
    rows = [line.split("\t") for line in (tmp_path / "out").read_text().splitlines()]
    log_probs, tokens, _ = Translator(*tiny).score(sources, targets)
    assert rows[1] == ["nan", "nan", "0"] and len(rows) == 3
    for i in (0, 2):
        assert float(rows[i][0]) == pytest.approx(log_probs[i], abs=1e-3) and int(rows[i][2]) == tokens[i]
        assert float(rows[i][1]) == pytest.approx(log_probs[i] / tokens[i], abs=1e-3)
    assert "scored 2 of 3 pairs" in capsys.readouterr().err
    (tmp_path / "short.de").write_text("ein hund.\n")
    assert main([*flags, "--score-target", str(tmp_path / "short.de")]) == 2
    assert "has 1 lines but" in capsys.readouterr().err
    assert main([*flags, "--score-target", str(tmp_path / "t.de"), "--n-best", "2", "--sample"]) == 2
    assert "--n-best, --sample do not apply to it" in capsys.readouterr().err
    assert main([*flags, "--score-target", str(tmp_path / "t.de"), "--beam", "3", "--alpha", "0.1",
                 "--max-extra-len", "0", "--stop-rule", "bound", "--chunk-lines", "1"]) == 2
    assert ("--beam, --alpha, --stop-rule, --max-extra-len, --chunk-lines do not apply to it"
            in capsys.readouterr().err)


def test_decoding_environment_only_for_the_decoding_commands_and_never_over_the_users():
    # quiet_environment(command) (run by main before anything imports TensorFlow): oneDNN off
    # for translate and evaluate, untouched for training, a user's own value kept; nothing at
    # all once TensorFlow is imported. A fresh process, since this one has TensorFlow.
    code = ("import os, sys\n"
            "from tf_transformer.cli._quiet import quiet_environment\n"
            "assert 'tensorflow' not in sys.modules\n"
            "seen = []\n"
            "for command, user in (('train', None), ('config', None), ('translate', None), ('evaluate', None),"
            " ('translate', '1')):\n"
            "    os.environ.pop('TF_ENABLE_ONEDNN_OPTS', None)\n"
            "    if user: os.environ['TF_ENABLE_ONEDNN_OPTS'] = user\n"
            "    quiet_environment(command)\n"
            "    seen.append(os.environ.get('TF_ENABLE_ONEDNN_OPTS'))\n"
            "os.environ.pop('TF_ENABLE_ONEDNN_OPTS')\n"
            "sys.modules['tensorflow'] = object()\n"
            "quiet_environment('translate')\n"
            "seen.append(os.environ.get('TF_ENABLE_ONEDNN_OPTS'))\n"
            "print(seen)\n")
    assert _run_without_onednn_setting(code) == "[None, None, '0', '0', '1', None]"


def _run_without_onednn_setting(code: str) -> str:
    """``code`` in a fresh interpreter whose environment has no TF_ENABLE_ONEDNN_OPTS; its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return proc.stdout.decode().strip()


def test_public_decoding_environment_imports_no_tensorflow():
    # tf_transformer.decoding.decoding_environment is what scripts that only decode call first:
    # importing it must not import TensorFlow (which would read its environment too early).
    code = ("import os, sys\n"
            "from tf_transformer.decoding import DECODING_ENVIRONMENT, decoding_environment\n"
            "assert 'tensorflow' not in sys.modules, 'imported TensorFlow'\n"
            "decoding_environment()\n"
            "print(DECODING_ENVIRONMENT, os.environ.get('TF_ENABLE_ONEDNN_OPTS'))\n")
    assert _run_without_onednn_setting(code) == "{'TF_ENABLE_ONEDNN_OPTS': '0'} 0"


def test_import_tensorflow_skips_matplotlib_and_sets_threads():
    # In a fresh process: TensorFlow (and Keras) imported without matplotlib, TensorFlow's
    # thread pools set, and matplotlib importable as usual afterwards.
    code = ("import sys, importlib.util\n"
            "from tf_transformer.cli.decode import import_tensorflow\n"
            "import_tensorflow(2)\n"
            "import tensorflow as tf, keras\n"
            "assert 'matplotlib' not in sys.modules, 'matplotlib was imported'\n"
            "assert tf.config.threading.get_intra_op_parallelism_threads() == 1\n"
            "assert tf.config.threading.get_inter_op_parallelism_threads() == 2\n"
            "if importlib.util.find_spec('matplotlib'):\n"
            "    import matplotlib.pyplot\n"
            "print('ok')\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == b"ok", proc.stderr.decode()[-2000:]


@pytest.mark.slow
def test_cli_translate_defaults_to_one_thread_per_usable_core(assets):
    # Without --threads: one decoding thread per core of the affinity mask (here 1 or 2 of
    # them), one thread per op; the same output as an explicit --threads 1. TensorFlow runs
    # without oneDNN unless the user's environment asks for it, with the same output.
    cores = sorted(os.sched_getaffinity(0))[:2] if hasattr(os, "sched_getaffinity") else None
    if not cores:
        pytest.skip("no CPU affinity on this platform")
    code = ("import os, sys, io\n"
            f"os.sched_setaffinity(0, {cores!r})\n"
            "sys.stdin = io.TextIOWrapper(io.BytesIO(b'a dog.\\nthe girl plays\\n'))\n"
            "from tf_transformer.cli import main\n"
            f"code = main(['translate', '--model', {assets[0]!r}, '--vocab', {assets[1]!r}, '--beam', '1',"
            " '--quiet'])\n"
            "import tensorflow as tf\n"
            "from tensorflow.python.util import _pywrap_util_port\n"
            "print('threads', tf.config.threading.get_intra_op_parallelism_threads(),"
            " tf.config.threading.get_inter_op_parallelism_threads(), code, file=sys.stderr)\n"
            "print('onednn', _pywrap_util_port.IsMklEnabled(), file=sys.stderr)\n"
            # the whole `tft translate` path (main imports TensorFlow before the command runs)
            # leaves matplotlib unimported
            "print('matplotlib imported:', 'matplotlib' in sys.modules, file=sys.stderr)\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    env.pop("TF_ENABLE_ONEDNN_OPTS", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert f"threads 1 {len(cores)} 0" in proc.stderr.decode()
    assert "onednn False" in proc.stderr.decode()
    assert "matplotlib imported: False" in proc.stderr.decode()
    onednn = subprocess.run([sys.executable, "-c", code], capture_output=True, env=dict(env, TF_ENABLE_ONEDNN_OPTS="1"),
                            timeout=300, check=False)
    assert onednn.returncode == 0 and "onednn True" in onednn.stderr.decode(), onednn.stderr.decode()[-2000:]
    assert onednn.stdout == proc.stdout
    explicit = subprocess.run([sys.executable, "-m", "tf_transformer.cli", "translate", "--model", assets[0],
                               "--vocab", assets[1], "--beam", "1", "--threads", "1", "--quiet"],
                              input=b"a dog.\nthe girl plays\n", capture_output=True, env=env, timeout=300, check=False)
    assert explicit.returncode == 0 and proc.stdout == explicit.stdout and proc.stdout.count(b"\n") == 2


@pytest.mark.slow
def test_tft_translate_process_exits_at_once_with_its_status_and_every_line_written(assets, tmp_path):
    # `tft translate` leaves with os._exit after flushing (tf_transformer.cli.entry): the
    # exit status and the error line on stderr still come out; other commands exit normally.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-m", "tf_transformer.cli", "translate", "--model",
                           str(tmp_path / "missing.keras"), "--vocab", str(tmp_path / "v.model")],
                          input=b"a dog.\n", capture_output=True, env=env, timeout=300, check=False)
    assert proc.returncode == 2
    assert proc.stderr.decode().strip().endswith(
        f"tft translate: error: --model {tmp_path / 'missing.keras'}: no such file or directory (expected a run "
        "directory written by tft train, or a .keras file)"), proc.stderr.decode()[-1000:]
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('atexit ran', file=sys.stderr))\n"
            "sys.argv = ['tft'] + sys.argv[1:]\n"
            "from tf_transformer.cli import entry\n"
            "entry()\n")
    translate = ["translate", "--model", assets[0], "--vocab", assets[1], "--beam", "1", "--threads", "1"]
    for argv, ran in ((translate, False), (["config", "list"], True)):
        proc = subprocess.run([sys.executable, "-c", code, *argv], input=b"a dog.\nthe girl plays\n",
                              capture_output=True, env=env, timeout=300, check=False)
        assert proc.returncode == 0 and proc.stdout, proc.stderr.decode()[-1000:]
        assert (b"atexit ran" in proc.stderr) is ran
    assert proc.stdout.count(b"\n") > 2  # the preset list
    out = subprocess.run([sys.executable, "-c", code, *translate], input=b"a dog.\nthe girl plays\n",
                         capture_output=True, env=env, timeout=300, check=False)
    assert out.stdout.count(b"\n") == 2 and b"wrote 2 translations to stdout" in out.stderr
    # tft evaluate too: its files written whole, its table on stdout, no atexit handlers run
    (tmp_path / "src.en").write_text("a dog.\nthe girl plays\n")
    (tmp_path / "ref.de").write_text("ein Hund.\ndas Mädchen spielt\n")
    evaluate = ["evaluate", "--model", assets[0], "--vocab", assets[1], "--beam", "1", "--threads", "1",
                "--source", str(tmp_path / "src.en"), "--reference", str(tmp_path / "ref.de"),
                "--output", str(tmp_path / "hyp.de"), "--json", str(tmp_path / "scores.json")]
    ev = subprocess.run([sys.executable, "-c", code, *evaluate], capture_output=True, env=env, timeout=300,
                        check=False)
    assert ev.returncode == 0 and b"atexit ran" not in ev.stderr, ev.stderr.decode()[-1000:]
    assert b"sacreBLEU" in ev.stdout
    assert (tmp_path / "hyp.de").read_text(encoding="utf-8").count("\n") == 2
    payload = json.loads((tmp_path / "scores.json").read_text())
    assert payload["sentences"] == 2 and 0 <= payload["scores"]["sacrebleu"]["score"] <= 100


def test_stop_rule_beam_finished_never_beats_the_exact_search(tiny):
    """The exact search (stop_rule "bound") returns the best-scoring hypothesis; stopping at
    the beam-th ending returns one scoring at most as well, often the same one."""
    sources = [s for s in tiny[1].encode(toy_sentences()[:40]) if s]
    got = {rule: Translator(*tiny, beam_size=3, alpha=1.4, max_extra_length=8, stop_rule=rule).translate_ids(sources)
           for rule in ("bound", "beam_finished")}
    exact, first = got["bound"][1], got["beam_finished"][1]
    assert all(f <= e + 1e-5 for f, e in zip(first, exact))
    same = sum(a == b for a, b in zip(got["bound"][0], got["beam_finished"][0]))
    assert same > len(sources) // 2
    with pytest.raises(UserError, match="stop_rule='first'"):
        Translator(*tiny, stop_rule="first")


def test_cli_stop_rule(assets, tmp_path, capsys):
    from tf_transformer.cli import main

    src = tmp_path / "in.txt"
    src.write_text("a dog runs.\nthe cat sits.\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert main(["translate", "--model", assets[0], "--vocab", assets[1], "--input", str(src), "--output",
                 str(out), "--beam", "2", "--stop-rule", "beam_finished", "--quiet"]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 2
    assert main(["translate", "--model", assets[0], "--vocab", assets[1], "--input", str(src),
                 "--config", "multi30k_small", "--set", "decode.stop_rule=first"]) == 2
    assert "decode.stop_rule='first' must be one of 'bound', 'beam_finished'" in capsys.readouterr().err
    assert main(["translate", "--engine", "ctranslate2", "--model", str(tmp_path), "--stop-rule", "bound"]) == 2
    assert "--stop-rule bound: only for --engine tensorflow" in capsys.readouterr().err


def test_model_translate_takes_the_stop_rule(tiny):
    """``model.translate(..., stop_rule=...)`` and ``decoding.translate`` give what ``Translator``
    (``tft translate``) gives with that rule, so a config's ``decode.stop_rule: beam_finished``
    is reproducible from Python; the default is ``"bound"``, as ``Translator``'s."""
    from tf_transformer.decoding import translate

    model, tok = tiny
    texts = toy_sentences(40)
    settings = dict(beam_size=3, alpha=1.4, max_extra_length=8)
    by_rule = {rule: Translator(model, tok, stop_rule=rule, **settings).translate(texts)[0]
               for rule in ("bound", "beam_finished")}
    assert by_rule["bound"] != by_rule["beam_finished"]  # the rule matters for these sentences
    for rule, expected in by_rule.items():
        assert model.translate(texts, tok, stop_rule=rule, **settings) == expected
        assert translate(model, texts, tok, stop_rule=rule, **settings) == expected
    assert model.translate(texts, tok, **settings) == by_rule["bound"]
    assert model.translate(texts[0], tok, stop_rule="beam_finished", **settings) == by_rule["beam_finished"][0]
    with pytest.raises(UserError, match="stop_rule='first'"):
        model.translate(texts[:1], tok, stop_rule="first")


def example_lines(doc):
    """The lines of a docstring's ``Example::`` block as ``(code, shown)``: ``shown`` is the
    value its ``#`` comment shows (the part before any ``:``), or None."""
    block = textwrap.dedent(doc.split("Example::", 1)[1]).strip().splitlines()
    for line in block:
        code, _, comment = line.partition("#")
        yield code.strip(), (comment.split(":")[0].strip() or None) if comment else None


def test_translator_docstring_example_returns_what_it_shows(tiny):
    """The ``Example::`` of ``Translator``'s docstring, run line by line on the tiny model: each
    commented line's value has the shape its comment shows (the tiny model copies rather than
    translating, so a list of translations is checked for its length and its empty strings)."""
    model, tok = tiny
    env = {"Translator": Translator, "model": model, "tok": tok}
    shown = 0
    for code, comment in example_lines(Translator.__doc__):
        if comment is None:
            exec(code, env)
            continue
        value, expected = eval(code, env), ast.literal_eval(comment)
        if isinstance(expected, list):
            assert isinstance(value, list) and len(value) == len(expected)
            assert all(isinstance(v, str) for v in value)
            assert [v == "" for v in value] == [e == "" for e in expected]
        else:
            assert value == expected
        shown += 1
    assert shown == 2
