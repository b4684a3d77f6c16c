"""What a Keras user expects of the package (issue: run-dir defaults, one CLI grammar, a quiet
log, ``summary()``, a Python API without source reading): each test drives the public surface."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers.tiny_model import load_tiny

# -- Broken before -------------------------------------------------------------------------------


@pytest.mark.parametrize("position_encoding", ["sinusoidal", "learned"])
@pytest.mark.parametrize("how", ["build", "call"])
def test_summary_of_a_built_transformer(position_encoding, how, capsys):
    from tf_transformer.model import Transformer, count_parameters

    model = Transformer(vocab_size=50, d_model=16, num_layers=1, num_heads=2, d_ff=32,
                        position_encoding=position_encoding, max_length=20)
    if how == "build":
        model.build()
    else:
        model((np.ones((2, 5), "int32"), np.ones((2, 4), "int32")))
    model.summary()
    out = capsys.readouterr().out
    assert f"Total params: {count_parameters(model):,}" in out
    assert "encoder (Encoder)" in out and "(None, None, 16)" in out
    assert "unbuilt" not in out


def test_params_counts_any_preset_or_yaml(tmp_path, capsys):
    from tf_transformer.cli import main
    from tf_transformer.model import Transformer, count_parameters

    yaml_path = tmp_path / "mine.yaml"
    yaml_path.write_text("model: {d_model: 32, num_layers: 1, num_heads: 2, d_ff: 64}\n")
    assert main(["params", "--vocab-size", "100", "multi30k_tiny", str(yaml_path)]) == 0
    captured = capsys.readouterr()
    rows = {line.split("|")[1].strip(): line for line in captured.out.splitlines() if line.startswith("| ")}
    mine = Transformer(vocab_size=100, d_model=32, num_layers=1, num_heads=2, d_ff=64)
    mine.build()
    expected = count_parameters(mine)
    assert expected > 20_000
    assert f"| {expected:,} |" in rows[str(yaml_path)]  # under a million: exact counts (not "0.0" M)
    assert "(exact counts)" in captured.out
    assert "d_model=32, N=1, h=2" in rows[str(yaml_path)]
    cells = [c.strip() for c in rows["multi30k_tiny"].split("|")[1:-1]]
    assert cells[3] == cells[5] == ""  # not in Table 3: the paper's columns blank
    # progress before each model is built, on stderr (base is built for the "- base" column)
    assert "building base (1/3)" in captured.err and f"building {yaml_path} (3/3)" in captured.err


def test_params_unknown_preset_is_one_line(capsys):
    from tf_transformer.cli import main

    assert main(["params", "no_such_preset"]) == 2
    err = capsys.readouterr().err
    assert "'no_such_preset' is neither a file nor a preset" in err and "Traceback" not in err


def test_translator_accepts_the_tuners_training_model(assets):
    from tf_transformer.decoding.translator import Translator, load_tokenizer
    from tf_transformer.training.trainer import TrainingModel

    model, tok = load_tiny(assets)
    wrapped = TrainingModel(model)  # what TransformerHyperModel's get_best_models() returns
    texts = ["a dog runs in the park.", "the girl plays."]
    direct = Translator(model, tok, beam_size=2).translate(texts)[0]
    assert Translator(wrapped, load_tokenizer(assets[1], wrapped), beam_size=2).translate(texts)[0] == direct
    with pytest.raises(TypeError, match="neither a tf_transformer Transformer"):
        Translator(object(), tok)


def _teacher_forced_log_prob(model, source_ids, output_ids):
    """log P(output + EOS | source) by one full forward pass (float64 sum)."""
    from tf_transformer.data.tokenizer import BOS_ID, EOS_ID

    target = list(output_ids) + [EOS_ID]
    logits = np.asarray(model((np.array([source_ids], "int32"), np.array([[BOS_ID] + target[:-1]], "int32"))))[0]
    logits = logits.astype("float64")
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
        - logits.max(-1, keepdims=True)
    return float(sum(log_probs[i, t] for i, t in enumerate(target))), len(target)


def test_scores_are_what_the_help_says(assets, tmp_path, capsys):
    """--scores: greedy prints the total log-probability, beam search log P / ((5+|Y|)/6)^alpha
    (|Y| counting EOS), as ``tft translate --help`` says."""
    from tf_transformer.cli import main

    model, tok = load_tiny(assets)
    src = tmp_path / "in.txt"
    src.write_text("a dog runs in the park.\nthe girl plays with a red ball.\n")
    for beam, alpha in ((1, 0.6), (3, 0.6), (3, 0.0)):
        out = tmp_path / f"out{beam}{alpha}.txt"
        assert main(["translate", "--model", assets[0], "--vocab", assets[1], "--beam", str(beam),
                     "--alpha", str(alpha), "--scores", "--input", str(src), "--output", str(out)]) == 0
        for source, line in zip(src.read_text().splitlines(), out.read_text().splitlines()):
            score, text = line.split("\t")
            log_prob, length = _teacher_forced_log_prob(model, tok.encode([source])[0], tok.encode([text])[0])
            expected = log_prob if beam == 1 else log_prob / ((5 + length) / 6) ** alpha
            assert math.isclose(float(score), expected, abs_tol=2e-3), (beam, alpha, line)
    helptext = _help("translate", capsys)
    assert "greedy (--beam 1): the total log-probability" in " ".join(helptext.split())


def _help(command, capsys):
    from tf_transformer.cli import main

    with pytest.raises(SystemExit):
        main([command, "--help"])
    return capsys.readouterr().out


# -- One CLI grammar -----------------------------------------------------------------------------


def test_help_of_every_command_imports_no_tensorflow():
    import subprocess
    import sys

    code = ("import sys\nfrom tf_transformer.cli import COMMANDS, main\nfor c in COMMANDS:\n"
            "    try:\n        main([c, '--help'])\n    except SystemExit:\n        pass\n"
            "print('LOADED', sorted(m for m in ('tensorflow', 'keras', 'tensorflow_text', 'matplotlib') "
            "if m in sys.modules), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stderr
    assert proc.stdout.count("usage: tft ") == len(__import__("tf_transformer.cli").cli.COMMANDS)


def test_config_mistakes_are_reported_before_tensorflow_loads(tmp_path):
    """A bad ``--config`` or ``--set`` (or a missing output) of train, tune, prepare and build-vocab
    is one error line and exit status 2 before the seconds of the TensorFlow import."""
    import subprocess
    import sys

    from tf_transformer.config import load_config
    from tf_transformer.io import write_run_config

    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  d_model: 128\n  num_heads: [3\n")
    run = tmp_path / "run"  # a run to resume under a changed dropout
    run.mkdir()
    write_run_config(load_config("multi30k_tiny", ["data.parallel_pipelines=1"]), run / "config.yaml")
    cases = [
        (["train", "-c", "multi30k_tiny", "--model-dir", str(run), "--set", "model.dropout=0.1"],
         "model.dropout: 0.3 -> 0.1"),
        (["train", "-c", "multi30k_tiny", "--set", "model.d_model=abc"], "model.d_model='abc' must be an integer"),
        (["train", "-c", str(bad)], "not valid YAML"),
        (["tune", "-o", str(tmp_path / "t"), "--set", "model.d_modl=3"], "unknown field model.d_modl"),
        (["tune", "-o", str(tmp_path / "t"), "--max-trials", "0"], "--max-trials 0: must be >= 1"),
        (["prepare", "-c", "multi30k_tiny", "--output", str(tmp_path / "p")], "no vocabulary"),
        (["build-vocab", "-c", "base"], "no output given"),
    ]
    code = ("import sys\nfrom tf_transformer.cli import main\n"
            f"for argv in {[argv for argv, _ in cases]!r}:\n"
            "    print('RC', main(argv), file=sys.stderr, flush=True)\n"
            "print('LOADED', sorted(m for m in ('tensorflow', 'keras') if m in sys.modules), file=sys.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("train: ")]
    assert lines[-1] == "LOADED []", proc.stderr
    errors = [line for line in lines if line.startswith("tft ")]
    assert [line for line in lines if line.startswith("RC ")] == ["RC 2"] * len(cases), proc.stderr
    assert len(errors) == len(cases), proc.stderr
    for (argv, expected), error in zip(cases, errors):
        assert error.startswith(f"tft {argv[0]}: error: ") and expected in error, (argv, error)


def _parsers():
    from tf_transformer.cli import COMMANDS, build_parser

    for name in COMMANDS:
        yield name, build_parser(name).command_parsers[name]


def test_every_help_shows_its_defaults_and_no_markup():
    for name, parser in _parsers():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if not action.option_strings or action.help is None or action.dest == "help":
                continue
            text = formatter._get_help_string(action)
            if action.default not in (None, False, []) and not action.required:
                assert "default" in text.lower(), (name, action.option_strings, text)
        text = parser.format_help()
        for markup in ("``", ":mod:", ":func:", ":class:", "::\n", "**"):
            assert markup not in text, (name, markup)


def test_config_and_set_are_spelled_the_same_everywhere():
    seen = []
    for name, parser in _parsers():
        actions = {a.dest: a for a in parser._actions}
        if "config" in actions:
            seen.append(name)
            assert actions["config"].option_strings == ["-c", "--config"], name
            assert actions["overrides"].option_strings == ["--set"] and actions["overrides"].nargs is None, name
        assert "base_config" not in actions and "beam_size" not in actions, name
    assert set(seen) >= {"build-vocab", "train", "translate", "evaluate", "export", "tune", "ablate", "config"}


def test_decode_settings_are_spelled_the_same_everywhere(capsys):
    # --beam/--alpha/--max-extra-len of tft translate, evaluate and export come from one
    # add_decode_settings: the same flags, types, defaults (None: the config's decode section)
    # and help, which for export also says that the settings are baked into it
    helps = {}
    for name, parser in _parsers():
        actions = {a.dest: a for a in parser._actions}
        if "beam" not in actions or name not in ("translate", "evaluate", "export"):
            continue
        for dest, flag, kind in (("beam", "--beam", int), ("alpha", "--alpha", float),
                                 ("max_extra_len", "--max-extra-len", int)):
            action = actions[dest]
            assert (action.option_strings, action.type, action.default) == ([flag], kind, None), (name, dest)
            helps[name, dest] = action.help
    for dest in ("beam", "alpha", "max_extra_len"):
        assert helps["translate", dest] == helps["evaluate", dest]
        assert "(default: decode." in helps["translate", dest]
        assert helps["export", dest].replace(", baked into the export", "") == helps["translate", dest]
    for command in ("translate", "export"):
        text = " ".join(_help(command, capsys).split())
        for shown in ("--beam BEAM beam size, 1 = greedy decoding", "--alpha ALPHA length penalty exponent",
                      "--max-extra-len MAX_EXTRA_LEN output may be up to input length + this many tokens"):
            assert shown in text, (command, shown)
    assert "greedy decoding, baked into the export (default: decode.beam_size of the config, 4)" in text


def test_set_with_two_values_says_how_to_repeat_it(capsys):
    from tf_transformer.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["train", "-c", "multi30k_small", "--set", "train.train_steps=5", "model.dropout=0.3"])
    assert exit_info.value.code == 2
    assert "repeat it: --set model.dropout=0.3" in capsys.readouterr().err


def test_config_show_prints_the_resolved_yaml(tmp_path, capsys):
    from tf_transformer.cli import main
    from tf_transformer.config import load_config

    assert main(["config", "show", "-c", "multi30k_tiny", "--set", "train.train_steps=7",
                 "--set", "decode.beam_size=5"]) == 0
    shown = tmp_path / "shown.yaml"
    shown.write_text(capsys.readouterr().out)
    again = load_config(str(shown))
    assert again.to_dict() == load_config("multi30k_tiny", ["train.train_steps=7", "decode.beam_size=5"]).to_dict()
    assert again.train.train_steps == 7 and again.decode.beam_size == 5
    assert main(["config", "show", "--set", "model.d_model=500"]) == 2
    assert "model.d_model=500 is not divisible" in capsys.readouterr().err
    assert main(["config", "list"]) == 0
    assert "table3/C3" in capsys.readouterr().out.split()


def test_plain_strips_rest():
    from tf_transformer.cli._common import plain

    text = ("Run it::\n\n    tft x\n\nSee :mod:`tf_transformer.tuning.rows` and :class:`~a.b.Trainer`, "
            "``--list``, **PPL**.")
    assert plain(text) == "Run it:\n\n    tft x\n\nSee tf_transformer.tuning.rows and Trainer, --list, PPL."


# -- The run directory knows its model ---------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(assets, tmp_path_factory):
    import shutil

    d = tmp_path_factory.mktemp("run")
    shutil.copy(assets[0], d / "model.keras")
    shutil.copy(assets[1], d / "vocab.model")
    (d / "config.yaml").write_text("decode: {beam_size: 1, max_extra_length: 5}\n")
    return d


def test_translate_takes_the_run_directory(assets, run_dir, tmp_path, capsys):
    from tf_transformer.cli import main

    src = tmp_path / "in.txt"
    src.write_text("a dog runs in the park.\nthe girl plays.\n")
    assert main(["translate", "--model", str(run_dir), "--input", str(src), "--output", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert f"--vocab {run_dir / 'vocab.model'}" in err and f"--config {run_dir / 'config.yaml'}" in err
    assert "greedy, max +5 tokens" in err  # the run's decode section
    assert main(["translate", "--model", assets[0], "--vocab", assets[1], "--beam", "1", "--max-extra-len", "5",
                 "--input", str(src), "--output", str(tmp_path / "b")]) == 0
    assert (tmp_path / "a").read_text() == (tmp_path / "b").read_text()
    # a .keras file inside the run directory gets the same defaults
    assert main(["translate", "--model", str(run_dir / "model.keras"), "--input", str(src),
                 "--output", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c").read_text() == (tmp_path / "a").read_text()


def test_a_vocabulary_other_than_the_runs_is_refused(assets, run_dir, tmp_path, capsys):
    """``--vocab`` with other pieces than the run's own ``vocab.model`` made the model's ids be
    read as other words, with exit 0; a copy of the run's vocabulary is fine."""
    import shutil

    from tf_transformer.cli import main
    from tf_transformer.data import Tokenizer
    from tf_transformer.data.tokenizer import train_sentencepiece

    src = tmp_path / "in.txt"
    src.write_text("a dog runs in the park.\n")
    size = Tokenizer(assets[1]).vocab_size
    words = "zebra yak xylophone violin umbrella tiger seal rabbit quail parrot owl newt mole lynx koala jaguar"
    sentences = [" ".join(words.split()[i:] + words.split()[:i]) for i in range(16)] * 4
    (tmp_path / "other.model").write_bytes(train_sentencepiece(iter(sentences), size))
    assert main(["translate", "--model", str(run_dir), "--vocab", str(tmp_path / "other.model"),
                 "--input", str(src), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"--vocab {tmp_path / 'other.model'}: not the vocabulary the run was trained with" in err
    assert f"Leave --vocab out to use {run_dir / 'vocab.model'}" in err and not (tmp_path / "out").exists()
    shutil.copy(run_dir / "vocab.model", tmp_path / "copy.model")
    assert main(["translate", "--model", str(run_dir), "--vocab", str(tmp_path / "copy.model"),
                 "--input", str(src), "--output", str(tmp_path / "out")]) == 0


def test_model_directory_without_a_model_is_one_line(tmp_path, capsys):
    from tf_transformer.cli import main

    (tmp_path / "averaged.keras").write_text("")
    assert main(["translate", "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--model {tmp_path}: a directory without model.keras" in err and "averaged.keras" in err


def test_the_vocabulary_taken_from_the_config_is_named(assets, tmp_path, capsys):
    from tf_transformer.cli import main

    config = tmp_path / "c.yaml"
    config.write_text(f"extends: multi30k_small\ndata: {{vocab_model: {assets[1]}}}\ndecode: {{beam_size: 1}}\n")
    (tmp_path / "in.txt").write_text("a dog runs.\n")
    assert main(["translate", "--model", assets[0], "--config", str(config), "--input", str(tmp_path / "in.txt"),
                 "--output", str(tmp_path / "out.txt"), "--quiet"]) == 0
    assert f"tft translate: --vocab {assets[1]} (data.vocab_model of --config {config})" in capsys.readouterr().err


def test_model_vocab_size_follows_the_built_vocabulary(assets):
    from tf_transformer.config import load_config
    from tf_transformer.data.tokenizer import resolve_vocabulary

    cfg = load_config("multi30k_small", [f"data.vocab_model={assets[1]}"])
    assert cfg.model.vocab_size == 8000
    said = []
    tok = resolve_vocabulary(cfg, "unused", log=said.append)
    assert cfg.model.vocab_size == tok.vocab_size == 48
    assert said == [f"train: model.vocab_size=8000 of the config replaced by 48, the size of the vocabulary "
                    f"{assets[1]}"]


# -- plot-attention ----------------------------------------------------------------------------------


def test_attention_labels_and_figure_size():
    from tf_transformer.viz.attention import MAX_INCHES, display_pieces, plot_heatmaps, predicted_pieces

    assert display_pieces(["\u2581Ein", "\u2581Hund", "e", "\u2581"]) == ["Ein", "Hund", "e", "\u2423"]
    assert predicted_pieces(["<s>", "\u2581Ein", "\u2581Hund"]) == ["\u2581Ein", "\u2581Hund", "</s>"]
    rng = np.random.default_rng(0)
    w = rng.random((8, 200, 180))
    w /= w.sum(-1, keepdims=True)
    fig = plot_heatmaps(w, [f"\u2581q{i}" for i in range(200)], [f"k{i}" for i in range(180)],
                        query_label="predicting", key_label="source", head_labels=range(8))
    width, height = fig.get_size_inches()
    assert width <= MAX_INCHES + 1e-6 and height <= MAX_INCHES + 1e-6
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(fig.axes) - len(panels) == 1  # one colourbar
    first = panels[0]
    assert [t.get_text() for t in first.get_yticklabels()][:2] == ["q0", "q1"]
    assert first.get_ylabel() == "predicting" and panels[4].get_xlabel() == "source"
    assert [ax.get_title() for ax in panels[:2]] == ["head 0", "head 1"]


def test_plot_attention_writes_exactly_output(run_dir, tmp_path, capsys):
    from tf_transformer.cli import main

    out = tmp_path / "figs" / "cross.png"
    out.parent.mkdir()
    assert main(["plot-attention", "--model", str(run_dir), "--sentence", "a dog runs.", "--attention", "cross",
                 "--heads", "1", "--output", str(out)]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["cross.png"]
    assert out.read_bytes().startswith(b"\x89PNG")
    assert "1 heads" in capsys.readouterr().out


def test_cli_attention_kinds_are_the_models():
    from tf_transformer.cli.viz import KINDS
    from tf_transformer.viz.attention import KINDS as NAMES

    assert sorted(KINDS) == sorted(NAMES)


# -- A quiet, honest log -----------------------------------------------------------------------------


class _Stream:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty


def test_progress_bar_counts_updates_under_accumulation(capsys):
    """With 3 micro-batches per update, the terminal's bar counts the epoch's 4 updates (Keras'
    own would count 12 batches) and advances once per update."""
    import keras

    from tf_transformer.config import TrainConfig
    from tf_transformer.training.progress import UpdateProgressBar, resolve_verbose

    train = TrainConfig(train_steps=10, steps_per_epoch=4, log_every_steps=3)
    verbose, extra = resolve_verbose("auto", train, stream=_Stream(True), accumulation_steps=3)
    assert verbose == 0 and len(extra) == 1 and isinstance(extra[0], UpdateProgressBar)
    assert resolve_verbose(1, train, stream=_Stream(False), accumulation_steps=3)[0] == 0
    assert resolve_verbose(2, train, stream=_Stream(False), accumulation_steps=3) == (2, [])

    class _Model:
        optimizer = keras.optimizers.Adam()

    bar = extra[0]
    bar.set_model(_Model())
    bar.set_params({"steps": 12, "epochs": 3, "verbose": 0})
    seen = []
    bar.on_epoch_begin(0)
    for batch in range(12):
        if batch % 3 == 2:  # the last micro-batch of an update applies it
            _Model.optimizer.iterations.assign_add(1)
        bar.on_train_batch_end(batch, {"loss": 5.0 - batch / 10})
        seen.append(bar._seen)
    bar.on_epoch_end(0, {"loss": 3.9})
    assert seen == [0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4]
    out = capsys.readouterr().out
    assert "Epoch 1/3" in out and "4/4" in out and "12/12" not in out and "loss" in out


def test_progress_lines_when_stdout_is_not_a_terminal(monkeypatch):
    import types

    from tf_transformer.config import TrainConfig
    from tf_transformer.training.progress import ProgressLines, resolve_verbose

    train = TrainConfig(train_steps=10, steps_per_epoch=4, log_every_steps=3)
    assert resolve_verbose("auto", train, stream=_Stream(True)) == (1, [])
    verbose, extra = resolve_verbose("auto", train, stream=_Stream(False))
    assert verbose == 0 and len(extra) == 1 and isinstance(extra[0], ProgressLines)
    assert resolve_verbose("auto", train, enabled=False, stream=_Stream(False)) == (0, [])  # not the chief
    assert resolve_verbose(2, train, stream=_Stream(False)) == (2, [])

    clock = [100.0]
    monkeypatch.setattr("tf_transformer.training.progress.time.perf_counter", lambda: clock[0])
    lines = []
    progress = ProgressLines(3, 10, 3, write=lines.append)
    model = types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=np.int64(0), learning_rate=1e-3))
    model.target_tokens_seen = lambda: 100.0 * int(model.optimizer.iterations)  # 100 target tokens per update
    progress.set_model(model)
    progress.on_train_begin()
    progress.on_epoch_begin(0)
    for step in range(1, 5):  # two Keras batches per update (gradient accumulation): lines once per update
        for micro in range(2):
            clock[0] += 0.25  # 2 updates/s
            model.optimizer.iterations = np.int64(step if micro else step - 1)  # counted after the update
            progress.on_train_batch_end(0, {"loss": 2.5, "accuracy": 0.25})
    clock[0] += 17.5  # validation and the other callbacks' epoch-end work after the last update
    progress.on_epoch_end(0, {"loss": 2.0, "val_loss": 1.75})
    # 3 updates in 1.5 s: 2 updates/s, 200 target tokens/s, 7 updates left at that pace: 3.5 s
    assert lines == ["update 3/10  epoch 1/3  loss 2.5000  accuracy 0.2500  lr 1.00e-03  2.00 updates/s  "
                     "200 tgt tokens/s  ETA 4 s",
                     "epoch 1/3 (update 4, epoch end 17.5 s): loss 2.0000  val_loss 1.7500"]
    # the next interval's rate includes that epoch end: updates 4-6 in 19 s
    progress.on_epoch_begin(1)
    for step in (5, 6):
        clock[0] += 0.5
        model.optimizer.iterations = np.int64(step)
        progress.on_train_batch_end(0, {"loss": 2.0})
    # the ETA follows the sitting's pace so far: 6 updates in 20.5 s, 4 left: 13.7 s
    assert lines[2] == "update 6/10  epoch 2/3  loss 2.0000  lr 1.00e-03  0.16 updates/s  16 tgt tokens/s  ETA 14 s"


def test_progress_eta_wording_and_the_time_budget(monkeypatch):
    import types

    from tf_transformer.training.progress import ProgressLines, _eta

    assert [_eta(3.5), _eta(1000), _eta(9000)] == ["4 s", "17 min", "2 h 30 min"]
    # 100,000 updates at 1/s would take a day; a 12-minute budget ends the sitting first
    clock = [0.0]
    monkeypatch.setattr("tf_transformer.training.progress.time.perf_counter", lambda: clock[0])
    lines = []
    progress = ProgressLines(100, 100_000, 1000, write=lines.append, max_minutes=12)
    model = types.SimpleNamespace(optimizer=types.SimpleNamespace(iterations=np.int64(0), learning_rate=1e-3))
    progress.set_model(model)
    progress.on_train_begin()
    clock[0], model.optimizer.iterations = 120.0, np.int64(100)
    progress.on_train_batch_end(0, {})
    assert lines[-1].endswith("ETA 10 min (train.max_minutes)"), lines


def test_tensorflow_start_up_lines_are_filtered_and_nothing_else():
    from tf_transformer.cli._quiet import is_noise

    assert is_noise("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR")
    assert is_noise("I0000 00:00:1796151256.033911   31849 cudart_stub.cc:31] Could not find cuda drivers on your "
                    "machine, GPU will not be used.")
    assert not is_noise("E0000 00:00:1796151256.033911   31849 some_kernel.cc:12] Out of memory")
    assert not is_noise("Traceback (most recent call last):")


# -- Evaluation and tuning say what they mean ---------------------------------------------------------


def test_evaluation_warns_when_most_outputs_are_empty():
    from tf_transformer.evaluation.bleu import empty_outputs

    sources = ["a", "b", "c", "", "d"]
    assert empty_outputs(["x", "", "y", "", "z"], sources) is None  # 1 of 4 asked
    assert empty_outputs(["x", "", "", "", "z"], sources) is None  # 2 of 4: not most
    text = empty_outputs(["", "", "", "", "z"], sources)
    assert text.startswith("3 of 4 translations (75%) are empty")


def test_notes_on_tokenized_and_uncased_outputs():
    from tf_transformer.evaluation.bleu import tokenized_outputs, uncased_outputs

    detok = ["Ein Hund läuft."] * 200
    tok = ["ein hund läuft ."] * 200
    assert tokenized_outputs(detok) is None
    assert tokenized_outputs(tok[:99] + detok[:101]) is None  # 99 of 200: below sacreBLEU's 100
    assert tokenized_outputs(tok[:100] + detok[:100]).startswith("100 of 200 outputs end in a tokenized period")
    assert tokenized_outputs(tok[:5] + detok[:5]) is not None  # a short file: half its lines, at least 5
    assert tokenized_outputs(tok[:4] + detok[:4]) is None
    assert tokenized_outputs(tok[:5] + detok[:6]) is None  # 5 of 11: not half
    refs = ["Ein Hund rennt.", "Zwei Katzen.", "drei mäuse."]
    assert uncased_outputs(["ein hund läuft .", "zwei katzen .", "drei mäuse ."], refs).startswith(
        "the outputs have no capital letter, 2 of 3 references have")
    assert uncased_outputs(["ein hund läuft .", "Zwei katzen .", "x"], refs) is None  # one capital: cased
    assert uncased_outputs(["a", "b", "c"], ["a", "B", "c"]) is None  # most references lowercase too


def test_bleu_metrics_score_tokenized_text_as_sacrebleu_does_without_its_log_lines(caplog):
    """force=True only silences sacreBLEU's "forgot to detokenize" lines: same score, same signature."""
    import logging

    from sacrebleu.metrics import BLEU

    from tf_transformer.evaluation.bleu import METRICS

    hyps = ["ein hund läuft im schnee ."] * 60 + ["ein mann fährt rad ."] * 60
    refs = ["Ein Hund rennt im Schnee."] * 60 + ["Ein Mann fährt Fahrrad."] * 60
    for key, plain in (("sacrebleu", BLEU()), ("bleu_lc", BLEU(lowercase=True, tokenize="13a"))):
        with caplog.at_level(logging.WARNING, logger="sacrebleu"):
            caplog.clear()
            expected = plain.corpus_score(hyps, [refs])
            assert "tokenized period" in caplog.text  # sacreBLEU's own check fires on this text
            caplog.clear()
            got = METRICS[key](hyps, refs)
            assert caplog.text == ""
        assert got.score == pytest.approx(expected.score, abs=1e-9)
        assert got.signature == str(plain.get_signature())


def test_signatures_name_each_field_once():
    from tf_transformer.evaluation.bleu import evaluate_translations

    scores = evaluate_translations(["Ein Hund läuft im Schnee."], ["Ein Hund rennt im Schnee."])
    for key, score in scores.items():
        names = [part.split(":", 1)[0] for part in score.signature.split("|")]
        assert len(names) == len(set(names)), (key, score.signature)
    assert "tok:13a+compound-split(##AT##-##AT##)" in scores["bleu_paper"].signature.split("|")
    assert "case:mixed" in scores["bleu_paper"].signature.split("|")
    assert "tok:moses-de" in scores["bleu_lc_moses"].signature.split("|")


def test_trial_numbers_are_keras_tuners():
    from tf_transformer.tuning.search import trial_number

    # Keras Tuner prints "Search: Running Trial #1" for trial id "00" (and "0000" under Hyperband)
    assert [trial_number(t) for t in ("00", "01", "0011", "x")] == ["#1", "#2", "#12", "x"]


# -- The Python API ------------------------------------------------------------------------------------


def _readme_python_script() -> str:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = text.split("### From Python", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_from_python_script_runs(tmp_path):
    """The README's "From Python" script, verbatim, in a fresh process (nothing imported first)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = _readme_python_script()
    assert "keras.saving.load_model" in script and ".translate(" in script and "make_dataset" in script
    (tmp_path / "script.py").write_text(script)
    repo = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "script.py"], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = eval(proc.stdout.strip().splitlines()[-1])  # the list of two translations
    assert isinstance(printed, list) and len(printed) == 2 and all(isinstance(t, str) for t in printed)
    assert "Epoch 3/3" in proc.stdout and "val_loss" in proc.stdout
    assert (tmp_path / "py-run" / "model.keras").is_file() and (tmp_path / "py-run" / "spm.model").is_file()


def test_keras_load_model_after_importing_the_package_only(assets):
    import subprocess
    import sys

    code = ("import sys, tf_transformer\nassert 'keras' not in sys.modules\nimport keras\n"
            f"m = keras.saving.load_model({assets[0]!r})\nprint(type(m).__name__, m.vocab_size)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["Transformer", "48"]


def test_make_dataset_from_pairs_without_a_config(assets, tmp_path, capsys):
    from helpers.tiny_model import toy_sentences

    from tf_transformer.data import BOS_ID, EOS_ID, make_dataset
    from tf_transformer.decoding.translator import load_tokenizer
    from tf_transformer.errors import DataError

    tok = load_tokenizer(assets[1])
    sources, targets = toy_sentences(50, seed=3), toy_sentences(50, seed=4)
    ds = make_dataset((sources, targets), tokenizer=tok, training=False, tokens_per_batch=256, verbose=False)
    seen = []
    for (src, tgt_in), tgt_out in ds:
        src, tgt_in, tgt_out = src.numpy(), tgt_in.numpy(), tgt_out.numpy()
        assert src.size <= 256 and tgt_out.size <= 256
        for s, ti, to in zip(src, tgt_in, tgt_out):
            assert ti[0] == BOS_ID and EOS_ID in to
            seen.append((tuple(int(i) for i in s if i), tuple(int(i) for i in to if i and i != EOS_ID)))
    expected = {(tuple(tok.encode([s])[0]), tuple(tok.encode([t])[0])) for s, t in zip(sources, targets)}
    assert len(seen) == 50 and set(seen) == expected
    # the same pairs as files
    (tmp_path / "a.txt").write_text("\n".join(sources) + "\n")
    (tmp_path / "b.txt").write_text("\n".join(targets) + "\n")
    capsys.readouterr()
    from_files = make_dataset((str(tmp_path / "a.txt"), str(tmp_path / "b.txt")), tokenizer=tok, training=False,
                              tokens_per_batch=256)
    assert sum(int(x[1].shape[0]) for x in from_files) == 50
    # evaluation batches of pairs are not called the training data in the messages
    said = "".join(capsys.readouterr())
    assert "data valid: read 50 pairs" in said and "data train" not in said, said
    make_dataset((sources, targets), tokenizer=tok, tokens_per_batch=256)
    assert "data train: read 50 pairs" in "".join(capsys.readouterr())
    with pytest.raises(DataError, match="50 sources but 49 targets"):
        make_dataset((sources, targets[:-1]), tokenizer=tok)
    # a line break inside an in-memory sentence is a space, as \n always was (\r joined two words)
    broken = make_dataset((["a dog\rruns.", "a cat\r\nsits."], ["a\nball.", "red"]), tokenizer=tok, training=False,
                          tokens_per_batch=256, verbose=False)
    got = sorted(tuple(int(i) for i in s if i) for (src, _), _ in broken for s in src.numpy())
    assert got == sorted(tuple(ids) for ids in tok.encode(["a dog runs.", "a cat sits."]))


def test_make_optimizer_keyword_arguments():
    from tf_transformer.training import TransformerSchedule, make_optimizer

    opt = make_optimizer(d_model=256, warmup_steps=400, adam_beta_2=0.997)
    assert opt.beta_2 == pytest.approx(0.997) and opt.beta_1 == pytest.approx(0.9)
    schedule = opt.get_config()["learning_rate"]["config"]
    assert (schedule["d_model"], schedule["warmup_steps"]) == (256, 400)
    assert isinstance(TransformerSchedule.from_config(schedule), TransformerSchedule)
    with pytest.raises(TypeError, match="unknown TrainConfig field"):
        make_optimizer(d_model=256, warmpu_steps=400)


def test_model_translate_is_the_translator(assets):
    from tf_transformer.decoding.translator import Translator

    model, tok = load_tiny(assets)
    texts = ["a dog runs in the park.", "", "the girl plays."]
    expected = Translator(model, tok, beam_size=2).translate(texts)[0]
    assert model.translate(texts, tok, beam_size=2) == expected
    assert model.translate(texts[0], tok, beam_size=2) == expected[0]


def _reproduce(run, timeout, **env):
    """tools/reproduce_multi30k.sh RUN with these environment variables added; its result."""
    import os
    import subprocess
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "tools" / "reproduce_multi30k.sh"
    return subprocess.run([str(script), str(run)], capture_output=True, text=True, timeout=timeout, check=False,
                          env=dict(os.environ, **env))


def test_reproduce_script_names_a_python_without_the_stack(tmp_path):
    """tools/reproduce_multi30k.sh run with a Python that lacks the packages stops at once with a
    message naming that Python and the fix, before it creates the run directory (no traceback
    from deep inside the training command)."""
    fake = tmp_path / "python-without-keras"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    run = tmp_path / "run"
    out = _reproduce(run, 60, PY=str(fake))
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"reproduce: {fake} cannot import keras" in out.stderr and "make install" in out.stderr
    assert "Traceback" not in out.stderr and not run.exists()


def test_reproduce_script_trains_the_config_it_is_given(tmp_path):
    """CONFIG picks the preset the reproduction trains; an unknown one stops with tft's one-line
    message listing the presets, before anything is written."""
    import sys

    run = tmp_path / "run"
    out = _reproduce(run, 300, PY=sys.executable, CONFIG="multi30k_tiny_fairsek")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "reproduce: training multi30k_tiny_fairsek into" in out.stderr
    assert "config 'multi30k_tiny_fairsek' is neither a file nor a preset" in out.stderr
    assert "multi30k_tiny_fairseq" in out.stderr  # the presets it could have meant
    assert "Traceback" not in out.stderr and not run.exists()
