"""``tft``: the command line, the top layer of the package.

Every subcommand lives in a module of this package, which holds all that is about the
command line (argument parsing, errors worded with the flags, printing) and calls the
library for the work. A module exposes two functions per command::

    def configure(parser: argparse.ArgumentParser) -> None   # add its arguments
    def run(args: argparse.Namespace) -> int | None           # do the work

(``configure_<name>``/``run_<name>`` where one module holds several commands). The table
below names them; a module is imported only when its command runs, so ``tft --help``
answers at once without importing TensorFlow. Library errors (:class:`UserError`) and
file system errors (``OSError``: the path and the errno) are printed as one line and exit
with status 2.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys

from tf_transformer.cli._common import HelpFormatter
from tf_transformer.cli._quiet import import_tensorflow, quiet_environment

COMMANDS: dict[str, tuple[str, str]] = {
    "build-vocab": ("tf_transformer.cli.data", "train the shared SentencePiece vocabulary"),
    "prepare": ("tf_transformer.cli.prepare", "tokenize and shard a corpus into TFRecord files for training"),
    "train": ("tf_transformer.cli.train", "train a model with model.fit (the paper's recipe)"),
    "status": ("tf_transformer.cli.status", "where training runs stand: state, backup, evaluations, sittings"),
    "average": ("tf_transformer.cli.train", "average the last N checkpoints into one model"),
    "translate": ("tf_transformer.cli.decode", "translate a file or stdin with beam search"),
    "evaluate": ("tf_transformer.cli.evaluate", "translate a test set and score it (sacreBLEU, lc Moses BLEU, chrF)"),
    "score": ("tf_transformer.cli.score", "score translation files: intervals, paired significance tests"),
    "export": ("tf_transformer.cli.export", "export a SavedModel for TF Serving, or a CTranslate2 model"),
    "tune": ("tf_transformer.cli.tune", "Keras Tuner search over heads, depth, d_ff, dropout"),
    "ablate": ("tf_transformer.cli.tune", "train Table 3 rows at small scale and report"),
    "plot-attention": ("tf_transformer.cli.viz", "draw attention weights like the paper's appendix"),
    "params": ("tf_transformer.cli.params", "count parameters of presets beside the paper's column"),
    "config": ("tf_transformer.cli.config", "print a resolved config as YAML, or list the presets"),
}

#: Commands that run without TensorFlow (the others import it, quietly, before they run).
WITHOUT_TENSORFLOW = {"config", "score", "status"}

#: Commands whose process ends as soon as they have written everything (:func:`entry`).
EXIT_AT_ONCE = {"translate", "evaluate"}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    from tf_transformer import __version__

    parser = argparse.ArgumentParser(
        prog="tft",
        description="tf-transformer: train, decode, evaluate, export and study the Transformer "
        "of 'Attention Is All You Need'.",
    )
    parser.add_argument("--version", action="version", version=f"tf-transformer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.command_parsers = {}
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=HelpFormatter)
        parser.command_parsers[name] = p
        if name == command:
            mod = importlib.import_module(module)
            configure = getattr(mod, "configure_" + name.replace("-", "_"), None) or mod.configure
            configure(p)
            p.set_defaults(_run=getattr(mod, "run_" + name.replace("-", "_"), None) or mod.run,
                           _early=getattr(mod, "early_" + name.replace("-", "_"), None) or getattr(mod, "early", None))
    return parser


def command_of(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is not a flag), or None."""
    command = next((a for a in argv if not a.startswith("-")), None)
    return command if command in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = command_of(argv)
    quiet_environment(command)  # before anything can import TensorFlow
    parser = build_parser(command)
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unrecognized(parser, command, extra)
    if args.command is None:
        parser.print_help()
        return 0
    from tf_transformer.errors import UserError

    heartbeat = None
    if args.command == "train":  # its lines begin before TensorFlow is imported
        from tf_transformer.io import Heartbeat

        heartbeat = args._heartbeat = Heartbeat("train")
    if getattr(args, "timings", False):
        from tf_transformer.cli._common import PhaseClock

        args._clock = PhaseClock()
    try:
        if getattr(args, "_early", None) is not None:
            # what the command can read and check without TensorFlow (its config, its flags):
            # a mistake there is reported before the import's seconds, not after them
            args._early(args)
        if heartbeat is not None:
            heartbeat.phase("loading TensorFlow")
        if args.command not in WITHOUT_TENSORFLOW and getattr(args, "engine", "tensorflow") == "tensorflow":
            import_tensorflow(heartbeat)
            if getattr(args, "_clock", None) is not None:
                args._clock.mark("TensorFlow import")
        code = args._run(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers below, not at exit
    except BrokenPipeError:  # the reader of stdout has gone (e.g. `tft status RUN | head -3`)
        _silence_stdout()
        return 141  # as a shell reports a process ended by SIGPIPE
    except UserError as e:
        print(f"tft {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a file system error the library did not word (it wraps its writes)
        import errno

        code = f"[Errno {e.errno} {errno.errorcode.get(e.errno, '')}] " if e.errno else ""
        where = f"{e.filename}: " if e.filename else ""
        print(f"tft {args.command}: error: {where}{code}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tft {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        if heartbeat is not None:
            heartbeat.close()
    return int(code or 0)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that nothing more is written to a pipe whose reader has
    gone (the interpreter flushes stdout again at exit)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file descriptor (e.g. captured output)
        pass


def entry() -> None:
    """The ``tft`` executable (and ``python -m tf_transformer.cli``): :func:`main`, then exit.

    After ``tft translate`` or ``tft evaluate`` has written and flushed its output (files are
    written whole and closed before; stdout and stderr are flushed here), the process leaves
    with ``os._exit``: the interpreter's normal shutdown with TensorFlow loaded (its thread
    pools, runtime and graphs torn down, every module's objects collected) took 1.0-1.6 s of a
    10-14 s ``tft translate`` of test2016 on a 2-core CPU, and does nothing a finished
    translation or score needs. Other commands exit normally (their atexit handlers, e.g.
    TensorBoard writers, run)."""
    argv = sys.argv[1:]
    code = main(argv)
    if command_of(argv) in EXIT_AT_ONCE:
        import os

        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed pipe: nothing left to lose
                pass
        os._exit(code)
    sys.exit(code)


def _unrecognized(parser: argparse.ArgumentParser, command: str | None, extra: list[str]) -> None:
    """argparse's "unrecognized arguments" error, with the fix when they are config overrides
    written after one ``--set`` (``--set takes one SECTION.FIELD=VALUE``)."""
    overrides = [a for a in extra if re.fullmatch(r"[A-Za-z_]+\.[A-Za-z_]+=.*", a)]
    target = parser.command_parsers[command] if command else parser
    if overrides:
        target.error(f"unrecognized arguments: {' '.join(extra)} (--set takes one SECTION.FIELD=VALUE; repeat it: "
                     + " ".join(f"--set {o}" for o in overrides) + ")")
    target.error(f"unrecognized arguments: {' '.join(extra)}")
