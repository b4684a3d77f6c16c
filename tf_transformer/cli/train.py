"""``tft train`` (train a model with the paper's recipe on ``model.fit``) and ``tft average``
(average the last N checkpoints of a run into one model).

::

    tft build-vocab -c multi30k_small --output runs/spm     # optional: otherwise train builds it
    tft train -c multi30k_small --set data.vocab_model=runs/spm.model --model-dir runs/demo
    tft train -c base --set train.tokens_per_update=50000 --set train.mixed_precision=mixed_bfloat16
    TF_CONFIG='{"cluster": {"worker": ["h1:2222", "h2:2222"]}, "task": {"type": "worker", "index": 0}}' \\
        tft train -c base --strategy multiworker          # one process per worker

    tft average --model-dir runs/base --last 5            # -> runs/base/averaged.keras

SIGTERM or Ctrl-C stops training after the current update and writes the backup, a checkpoint
and model.keras (exit status 143 / 130); a second one stops at once. Re-running the same train
command continues a stopped or killed run from its last backup. The run
directory then holds model.keras, config.yaml and vocab.model, which tft translate, evaluate,
export and plot-attention read from ``--model RUN_DIR``.
"""

from __future__ import annotations

import argparse

from tf_transformer.cli._common import STOPPED_EXIT, add_config_arguments, checked_config, flags, plain
from tf_transformer.config import STRATEGIES
from tf_transformer.errors import UserError

STOPPING = ("SIGTERM or Ctrl-C stops training after the current update and writes the backup, a checkpoint and "
            "model.keras (exit status 143 / 130); a second one stops at once. Re-running the same train command "
            "continues a stopped or killed run from its last backup.")


def configure_train(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (plain(__doc__.split("\n\n", 1)[1].split("\n\n    tft average")[0]) + "\n\n"
                     + STOPPING + "\n")
    add_config_arguments(parser, required=True)
    parser.add_argument("--strategy", choices=STRATEGIES, default=None,
                        help="distribution strategy (default: train.strategy of the config, auto)")
    parser.add_argument("--model-dir", default=None, metavar="RUN_DIR",
                        help="run directory (default: train.model_dir of the config)")
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2), default=None,
                        help="Keras progress: 1 progress bar, 2 one line per epoch, 0 none (default: 1 on a "
                             "terminal; elsewhere our plain lines instead of Keras': one every "
                             "train.log_every_steps updates (metrics, learning rate, updates/s, target tokens/s, "
                             "ETA) and one per epoch with the validation metrics)")
    parser.add_argument("--allow-config-change", action="store_true",
                        help="continue the run in --model-dir although the config (or vocabulary) differs from "
                             "its config.yaml in fields that change the run (refused by default)")


def early_train(args: argparse.Namespace) -> None:
    """Read and check the config (and ``--set``) before TensorFlow is imported: ``args._cfg``.
    Resuming a run under a config that changes it is refused here too, where that shows
    without the vocabulary (training repeats the whole check once the vocabulary is read)."""
    from tf_transformer.config import load_config
    from tf_transformer.training.rundir import RunContractError, early_differences

    heartbeat = getattr(args, "_heartbeat", None)
    if heartbeat is not None:
        heartbeat.phase("reading the configuration")
    overrides = list(args.overrides)
    if args.strategy:
        overrides.append(f"train.strategy={args.strategy}")
    cfg = load_config(args.config, overrides)
    model_dir = args.model_dir or cfg.train.model_dir
    if model_dir and not args.allow_config_change:
        found = early_differences(cfg, model_dir)
        if found:
            raise RunContractError(model_dir, found, override="--allow-config-change")
    args._cfg = cfg


def run_train(args: argparse.Namespace) -> int:
    from tf_transformer.training.loop import train
    from tf_transformer.training.rundir import RunContractError

    heartbeat = getattr(args, "_heartbeat", None)
    cfg = checked_config(args, early_train)
    try:
        with flags({"strategy ": "--strategy "}):
            result = train(cfg, model_dir=args.model_dir, verbose="auto" if args.verbose is None else args.verbose,
                           allow_config_change=args.allow_config_change, heartbeat=heartbeat)
    except RunContractError as e:
        raise RunContractError(e.model_dir, e.differences, override="--allow-config-change") from None
    print(result.summary(), flush=True)
    return STOPPED_EXIT.get(result.stopped_early, 0)


def configure_average(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-dir", required=True, metavar="RUN_DIR", help="a run directory written by tft train")
    parser.add_argument("--last", type=int, default=None,
                        help="how many of the newest checkpoints to average (default: train.average_last "
                             "of the run's config.yaml; the paper: 5 base, 20 big)")
    parser.add_argument("--output", default=None,
                        help="where to write the averaged model (.keras, or .weights.h5 for weights only; "
                             "default MODEL_DIR/averaged.keras)")


def run_average(args: argparse.Namespace) -> int:
    from tf_transformer.io import say
    from tf_transformer.training.averaging import average_run

    if args.last is not None and args.last < 1:
        raise UserError(f"--last {args.last} must be >= 1")
    with flags({"output ": "--output "}):
        result = average_run(args.model_dir, args.last, args.output, say)
    print(result["summary"])
    return 0
