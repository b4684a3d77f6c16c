"""What the command modules share: rewording library errors in terms of the flags, the arguments
every command spells the same way, the help formatter, and a run directory's defaults."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import time
from pathlib import Path
from typing import Iterator, Mapping

from tf_transformer.config.schema import STOP_RULES, Config
from tf_transformer.errors import UserError


def reword(error: UserError, words: Mapping[str, str]) -> UserError:
    """``error`` (same class) with the library word of ``words`` it starts with replaced by
    that word's flag (the library names the argument an error is about first)."""
    text = str(error)
    for word, flag in words.items():
        if text.startswith(word):
            return type(error)(flag + text[len(word):])
    return error


@contextlib.contextmanager
def flags(words: Mapping[str, str]) -> Iterator[None]:
    """Re-raise a :class:`UserError` of the block with :func:`reword`'s ``words``, e.g.
    ``flags({"model ": "--model "})``: the library says "model PATH: no such file", the
    command line "--model PATH: no such file"."""
    try:
        yield
    except UserError as e:
        raise reword(e, words) from None


def process_age() -> float | None:
    """Seconds since this process started (Linux: from ``/proc``); None where unknown."""
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            ticks = float(f.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return max(uptime - ticks / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class PhaseClock:
    """Wall-clock seconds of a command's phases, for ``--timings``: :meth:`mark` ends the
    current phase; the first one, where the operating system says when the process began,
    is Python's own start-up and the ``tft`` imports before the clock was made."""

    def __init__(self):
        age = process_age()
        self.phases: list[tuple[str, float, str]] = [] if age is None else [("Python and tft start-up", age, "")]
        self._last = time.perf_counter()

    def mark(self, name: str, note: str = "") -> None:
        """End phase ``name``; ``note`` is printed after its seconds, in parentheses."""
        now = time.perf_counter()
        self.phases.append((name, now - self._last, note))
        self._last = now

    def summary(self) -> str:
        total = sum(s for _, s, _ in self.phases)
        return (", ".join(f"{name} {s:.2f} s" + (f" ({note})" if note else "") for name, s, note in self.phases)
                + f"; {total:.2f} s in all")


# -- one grammar for every command --------------------------------------------------------------

#: What ``--set`` does, the same words in every command's help.
SET_HELP = ("override one config field, YAML value; repeat the flag for more, e.g. "
            "--set train.train_steps=500 --set model.dropout=0.3")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs kept as written (examples, tables) and every option's default shown: options
    whose help does not already say its default get ``(default: VALUE)``; an option defaulting
    to nothing must say in its help where its value comes from."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (not action.option_strings or action.required or "default" in text.lower()
                or action.default in (None, False, [], argparse.SUPPRESS)):
            return text
        return text + " (default: %(default)s)"


def checked_config(args: argparse.Namespace, early) -> Config:
    """``args._cfg`` as the command's ``early`` step made it. ``main`` runs that step before
    TensorFlow is imported; a caller of the run function alone (a test, a script) gets it here."""
    if getattr(args, "_cfg", None) is None:
        early(args)
    return args._cfg


def add_config_arguments(parser: argparse.ArgumentParser, *, required: bool = False, default: str | None = None,
                         what: str = "") -> None:
    """``-c/--config`` and ``--set`` (one ``section.field=value`` per flag), the same in every command."""
    if required:
        text = "preset name (multi30k_small, base, table3/C3, ...; tft config list) or YAML file"
    elif default:
        text = "preset name or YAML file"
    else:
        text = "preset name or YAML file" + (what or "")
    parser.add_argument("-c", "--config", required=required, default=default, metavar="PRESET_OR_YAML", help=text)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help=SET_HELP)


def add_decode_settings(parser: argparse.ArgumentParser, *, baked_into: str = "") -> None:
    """``--beam``, ``--alpha``, ``--max-extra-len`` and ``--stop-rule``, the same in every command that decodes or
    exports; each defaults to ``None``: the ``decode`` section of ``--config`` gives it
    (``decode_settings`` in :mod:`tf_transformer.cli.decode`). ``baked_into``: what the settings
    are written into instead of being used at once (``tft export``: "the export"), said in
    each option's help."""
    baked = f", baked into {baked_into}" if baked_into else ""
    parser.add_argument("--beam", type=int, default=None,
                        help=f"beam size, 1 = greedy decoding{baked} (default: decode.beam_size of the config, 4)")
    parser.add_argument("--alpha", type=float, default=None,
                        help=f"length penalty exponent{baked} (default: decode.alpha of the config, 0.6)")
    parser.add_argument("--max-extra-len", type=int, default=None,
                        help=f"output may be up to input length + this many tokens{baked} (default: "
                             "decode.max_extra_length of the config, 50)")
    parser.add_argument("--stop-rule", choices=STOP_RULES, default=None,
                        help=f"when beam search stops a sentence{baked}: bound = the paper's early stop, "
                             "exact under the length penalty; beam_finished = also once beam-size hypotheses "
                             "have ended (fairseq's, OpenNMT's and CTranslate2's rule: fewer steps, and no "
                             "long loops at a large --alpha) (default: decode.stop_rule of the config, bound)")


def _role(match) -> str:
    target = match.group(1)
    return target[1:].rsplit(".", 1)[-1] if target.startswith("~") else target


def plain(text: str) -> str:
    """A docstring's reStructuredText made readable in ``--help``: ``x`` for ````x```` and
    ``:role:`x```, and the ``::`` that introduces an example block becomes ``:``."""
    text = re.sub(r":[a-z]+:`([^`]+)`", _role, text).replace("``", "")
    text = re.sub(r"\*\*([^*]+)\*\*", r"\1", text)
    text = re.sub(r"^\s*::\n", "", text, flags=re.M)
    return re.sub(r"(\S)::$", r"\1:", text, flags=re.M)


# -- the run directory knows its model ----------------------------------------------------------


def resolve_run(args: argparse.Namespace, who: str, *, vocab: bool = True, config: bool = True) -> Path | None:
    """``--model`` may be a run directory (``tft train --model-dir``) or a ``.keras`` file; a
    run directory (the one given, or the ``.keras`` file's own) gives the defaults of ``--vocab``
    (its ``vocab.model``) and ``--config`` (its ``config.yaml``). Sets ``args.model`` to the
    file and fills ``args.vocab``/``args.config``; says on stderr what it took from where.
    Returns that run directory (None for a ``.keras`` file outside one)."""
    from tf_transformer.io import CONFIG_FILE, MODEL_FILE

    path = Path(args.model)
    if path.is_dir():
        run_dir = path
        if not (path / MODEL_FILE).is_file():
            found = sorted(p.name for p in path.glob("*.keras"))
            hint = f"; it has {', '.join(found)}: pass one of them" if found else ""
            raise UserError(f"--model {path}: a directory without {MODEL_FILE} (expected a run directory written "
                            f"by tft train, or a .keras file){hint}")
        args.model = str(path / MODEL_FILE)
    elif path.is_file():
        run_dir = path.parent if (path.parent / CONFIG_FILE).is_file() else None
    else:
        raise UserError(f"--model {path}: no such file or directory (expected a run directory written by "
                        "tft train, or a .keras file)")
    taken = []
    if run_dir is not None and vocab and getattr(args, "vocab", None) is not None:
        _check_run_vocabulary(Path(args.vocab), run_dir / VOCAB_FILE)
    if run_dir is not None:
        if vocab and getattr(args, "vocab", None) is None and (run_dir / VOCAB_FILE).is_file():
            args.vocab = str(run_dir / VOCAB_FILE)
            taken.append(f"--vocab {args.vocab}")
        if config and getattr(args, "config", None) is None and (run_dir / CONFIG_FILE).is_file():
            args.config = str(run_dir / CONFIG_FILE)
            taken.append(f"--config {args.config}")
    if taken:
        print(f"tft {who}: from the run directory {run_dir}: {', '.join(taken)}", file=sys.stderr)
    return run_dir


#: The vocabulary's name in a run directory (``tft train`` copies it there).
VOCAB_FILE = "vocab.model"

#: Exit statuses of a training stopped early: a signal's as the shell gives it (128 + its number;
#: the run resumable), 1 for a diverged loss.
STOPPED_EXIT = {"nan": 1, "SIGINT": 130, "SIGTERM": 143}


def _check_run_vocabulary(given: Path, own: Path) -> None:
    """``--vocab`` beside a run directory that has its own vocabulary: its pieces must be the
    run's (other pieces give other ids, and the model's output would be read as wrong words)."""
    differ = _vocabulary_difference(given, own)
    if differ is not None:
        raise UserError(f"--vocab {given}: not the vocabulary the run was trained with ({own}): {differ}; the "
                        f"model's ids would be read as other pieces. Leave --vocab out to use {own}")


def _vocabulary_difference(first: Path, second: Path) -> str | None:
    """How two SentencePiece models' pieces differ (``"N and M pieces, different from id I"``),
    or None when they are the same or either cannot be read (loading it then says so)."""
    if not first.is_file() or not second.is_file():
        return None
    try:
        if first.samefile(second) or first.read_bytes() == second.read_bytes():
            return None
    except OSError:
        return None  # unreadable: loading it says so
    import sentencepiece as spm

    pieces = []
    for path in (first, second):
        sp = spm.SentencePieceProcessor()
        try:
            sp.LoadFromSerializedProto(path.read_bytes())
        except (OSError, RuntimeError):
            return None  # not a SentencePiece model: loading it says so
        pieces.append([sp.id_to_piece(i) for i in range(sp.get_piece_size())])
    if pieces[0] == pieces[1]:
        return None
    at = next((i for i, (a, b) in enumerate(zip(*pieces)) if a != b), min(map(len, pieces)))
    return f"{len(pieces[0]):,} and {len(pieces[1]):,} pieces, different from id {at}"


def resolve_member(path: str, vocab: str | None) -> str:
    """A further ``--model`` of an ensemble: its ``.keras`` file (a run directory's
    ``model.keras``); when its run directory (or the folder of the file) holds a vocabulary, that
    vocabulary's pieces must be ``vocab``'s (the first model's): an ensemble mixes its members'
    probabilities id by id."""
    member = argparse.Namespace(model=path)
    run_dir = resolve_run(member, "", vocab=False, config=False) or Path(member.model).parent
    if vocab is not None:
        differ = _vocabulary_difference(Path(vocab), run_dir / VOCAB_FILE)
        if differ is not None:
            raise UserError(f"--model {path}: trained with another vocabulary ({run_dir / VOCAB_FILE}) than the "
                            f"ensemble's {vocab}: {differ}. An ensemble's models must share one vocabulary, since "
                            "their probabilities are mixed id by id")
    return member.model


def read_input_lines(path: str, flag: str) -> tuple[list[str], list[int]]:
    """``(lines, bad_line_numbers)`` of a text file (gzip when it ends in ``.gz``), for ``flag``:
    a missing or unreadable file is a :class:`UserError` naming the flag and the path; invalid
    UTF-8 is replaced with U+FFFD and the 1-based numbers of such lines are returned."""
    import gzip

    from tf_transformer.data.sources import open_binary
    from tf_transformer.decoding.translator import read_lines

    try:
        with open_binary(path) as f:
            return read_lines(f.read(), path)
    except FileNotFoundError:
        raise UserError(f"{flag} {path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{flag} {path}: a directory, not a text file") from None
    except (gzip.BadGzipFile, EOFError) as e:
        raise UserError(f"{flag} {path}: not a readable gzip file ({e})") from None
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot read it ({e.strerror})") from None


def read_text_lines(path: str, flag: str, command: str) -> list[str]:
    """:func:`read_input_lines`' lines; invalid UTF-8 is reported on stderr with the first bad
    line's number."""
    lines, bad = read_input_lines(path, flag)
    if bad:
        print(f"tft {command}: warning: {len(bad)} line(s) of {path} had invalid UTF-8 (first: line {bad[0]}); "
              "bad bytes were replaced with U+FFFD", file=sys.stderr)
    return lines


def write_output_text(path: str, text: str, flag: str) -> None:
    """``text`` to ``path`` atomically, gzip-compressed when the name ends in ``.gz`` (as inputs
    ending in ``.gz`` are read); an error names the flag and the path."""
    import gzip

    from tf_transformer.io import atomic_write

    data = text.encode("utf-8")
    if path.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    try:
        atomic_write(path, data)
    except OSError as e:
        raise UserError(f"{flag} {path}: cannot write it ({e.strerror})") from None


def check_output_file(path: str | None, flag: str) -> None:
    """Refuse, before any work, an output file that cannot be written: an existing folder,
    a path under a file, or a folder without write permission (what would otherwise fail only
    after decoding, losing its work). ``None`` and ``-`` (stdout) pass. Nothing is created."""
    if path in (None, "-"):
        return
    target = os.path.abspath(path)
    if os.path.isdir(target):
        example = os.path.join(path, "scores.json" if flag == "--json" else "out.txt")
        raise UserError(f"{flag} {path}: a folder; give a file name (e.g. {example})")
    parent = os.path.dirname(target)
    while not os.path.exists(parent):  # the nearest existing ancestor: the folders below it will be made
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UserError(f"{flag} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{flag} {path}: cannot write in {parent} (permission denied)")
