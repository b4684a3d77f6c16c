"""``tft tune`` (Keras Tuner search over heads, depth, d_ff and dropout) and ``tft ablate``
(the paper's Table 3 at small scale, :mod:`tf_transformer.tuning.ablation`).

::

    tft tune --config multi30k_small --output runs/tune --algorithm random --max-trials 8 \\
        --steps-per-trial 600 --heads 1,2,4,8 --layers 2,3,4 --d-ff 512,1024 --dropout 0,0.1,0.3 \\
        --word-dropout 0,0.1
    tft tune --config multi30k_small --output runs/tune-hb --algorithm hyperband \\
        --steps-per-trial 900 --steps-per-epoch 100 --objective val_bleu --bleu-sentences 300

Each trial trains the config's model with the searched values (``d_k = d_v = d_model / h``)
for ``--steps-per-trial`` updates (and at most ``--minutes-per-trial``), then validates. The
objective is the label-smoothed validation loss by default; ``val_bleu`` translates the
first ``--bleu-sentences`` validation sentences greedily and scores them with sacreBLEU.
Writes ``OUTPUT/results.md`` and ``OUTPUT/results.csv`` (one row per trial) and
``OUTPUT/best_config.yaml``; rerunning the same command resumes the search.
"""

from __future__ import annotations

import argparse
import sys

from tf_transformer.cli._common import STOPPED_EXIT, add_config_arguments, checked_config, plain
from tf_transformer.errors import UserError

#: ``tft tune --help``'s epilog: the examples and what a trial does.
TUNE_HELP = plain(__doc__.split("\n\n", 1)[1])


def _number_list(text: str, flag: str, kind=int) -> tuple:
    """``"1,2,4"`` -> ``(1, 2, 4)`` of ``kind`` (int or float), or a UserError naming the flag."""
    expected = ("comma-separated integers, e.g. 1,2,4,8" if kind is int
                else "comma-separated numbers, e.g. 0,0.1,0.3")
    try:
        values = tuple(kind(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UserError(f"{flag} {text!r}: expected {expected}") from None
    if not values:
        raise UserError(f"{flag} is empty")
    return values


def _int_list(text: str, flag: str) -> tuple:
    return _number_list(text, flag, int)


def _float_list(text: str, flag: str) -> tuple:
    return _number_list(text, flag, float)


def configure_tune(parser: argparse.ArgumentParser) -> None:
    parser.epilog = TUNE_HELP
    add_config_arguments(parser, default="multi30k_small")
    parser.add_argument("--output", "-o", required=True, help="output directory (tuner project, tables, best config)")
    parser.add_argument("--algorithm", choices=("random", "hyperband"), default="random", help="the Keras Tuner")
    parser.add_argument("--max-trials", type=int, default=10, help="trials of the random search")
    parser.add_argument("--steps-per-trial", type=int, default=None,
                        help="update budget per trial; Hyperband's largest budget (default: train.train_steps)")
    parser.add_argument("--steps-per-epoch", type=int, default=None,
                        help="updates between validations; Hyperband's budget unit (default: train.steps_per_epoch)")
    parser.add_argument("--minutes-per-trial", type=float, default=None,
                        help="wall-clock budget per trial (default: none, the steps alone)")
    parser.add_argument("--objective", choices=("val_loss", "val_perplexity", "val_accuracy", "val_bleu"),
                        default="val_loss", help="what the tuner minimises/maximises (val_loss: label-smoothed, per "
                                                 "token)")
    parser.add_argument("--bleu", action="store_true", help="report val_bleu even when it is not the objective")
    parser.add_argument("--bleu-sentences", type=int, default=300, help="validation sentences translated for BLEU")
    parser.add_argument("--heads", help="num_heads values, e.g. 1,2,4,8 (d_k = d_v = d_model / h; default: "
                                        "those of 1,2,4,8,16 that divide d_model with d_k >= 8)")
    parser.add_argument("--layers", help="num_layers values, e.g. 2,3,4 (default: the config's N-1, N, N+1)")
    parser.add_argument("--d-ff", help="d_ff values, e.g. 512,1024 (default: 2 and 4 times d_model)")
    parser.add_argument("--dropout", help="dropout values, e.g. 0,0.1,0.3 (default: 0,0.1,0.2,0.3)")
    parser.add_argument("--word-dropout", help="word dropout values, one rate for source and target, e.g. 0,0.1 "
                        "(default: not searched; each trial keeps model.source_word_dropout and "
                        "model.target_word_dropout of the config)")
    parser.add_argument("--hyperband-factor", type=int, default=3, help="Hyperband's reduction factor")
    parser.add_argument("--strategy", choices=("auto", "default", "mirrored"), default=None,
                        help="distribution strategy (default: train.strategy of the config)")
    parser.add_argument("--seed", type=int, default=None, help="tuner seed (default: train.seed of the config)")
    parser.add_argument("--overwrite", action="store_true", help="start the search afresh instead of resuming")
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2), default=2, help="model.fit verbosity")


def early_tune(args: argparse.Namespace) -> None:
    """Read and check the config and the numeric flags before TensorFlow is imported: ``args._cfg``."""
    from tf_transformer.config import load_config

    args._cfg = load_config(args.config, args.overrides)
    for flag, value in (("--max-trials", args.max_trials), ("--steps-per-trial", args.steps_per_trial),
                        ("--steps-per-epoch", args.steps_per_epoch), ("--bleu-sentences", args.bleu_sentences),
                        ("--hyperband-factor", args.hyperband_factor)):
        if value is not None and value < 1:
            raise UserError(f"{flag} {value}: must be >= 1")
    if args.hyperband_factor < 2:
        raise UserError(f"--hyperband-factor {args.hyperband_factor}: must be >= 2")
    if args.minutes_per_trial is not None and not 0 < args.minutes_per_trial < float("inf"):
        raise UserError(f"--minutes-per-trial {args.minutes_per_trial}: must be a finite number > 0")
    from tf_transformer.config import ConfigError
    from tf_transformer.tuning.space import SearchSpace

    space = SearchSpace.around(args._cfg.model)
    if args.heads:
        space.num_heads = _int_list(args.heads, "--heads")
    if args.layers:
        space.num_layers = _int_list(args.layers, "--layers")
    if args.d_ff:
        space.d_ff = _int_list(args.d_ff, "--d-ff")
    if args.dropout:
        space.dropout = _float_list(args.dropout, "--dropout")
    if args.word_dropout:
        space.word_dropout = _float_list(args.word_dropout, "--word-dropout")
    try:
        args._space = space.validate(args._cfg.model.d_model)
    except ConfigError as e:
        raise UserError(f"{e} (from --heads/--layers/--d-ff/--dropout/--word-dropout)") from None


def run_tune(args: argparse.Namespace) -> int:
    from tf_transformer.tuning.search import run_search

    cfg = checked_config(args, early_tune)
    space = args._space
    result = run_search(cfg, args.output, algorithm=args.algorithm, max_trials=args.max_trials,
                        steps_per_trial=args.steps_per_trial, steps_per_epoch=args.steps_per_epoch,
                        minutes_per_trial=args.minutes_per_trial, objective=args.objective, search_space=space,
                        strategy=args.strategy, bleu=args.bleu, bleu_sentences=args.bleu_sentences,
                        hyperband_factor=args.hyperband_factor, seed=args.seed, overwrite=args.overwrite,
                        verbose=args.verbose)
    print(f"tft tune: {result.summary()}")
    return 0


def configure_ablate(parser: argparse.ArgumentParser) -> None:
    from tf_transformer.tuning import ablation

    parser.epilog = plain(ablation.__doc__.split("\n\n", 1)[1])
    parser.add_argument("--rows", default="A1,A3,C1,C2,D1,E",
                        help="rows: names (A1..E), group letters (A..E) or 'all'; base is always added")
    add_config_arguments(parser, default="multi30k_small")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=int, help="updates per row (default: train.train_steps of the config)")
    budget.add_argument("--minutes", type=float, help="wall-clock training minutes per row instead of steps "
                                                      "(default: none, the steps)")
    parser.add_argument("--beam", type=int, default=None,
                        help="beam for test BLEU, 1 = greedy (default: decode.beam_size of the config)")
    parser.add_argument("--bleu-sentences", type=int, default=None,
                        help="score only the first N test sentences (default: all)")
    parser.add_argument("--strategy", choices=("auto", "default", "mirrored"), default=None,
                        help="distribution strategy (default: train.strategy of the config)")
    parser.add_argument("--no-validation", action="store_true",
                        help="skip the validation pass after each epoch of training (PPL is measured at the end)")
    parser.add_argument("--output", "-o", help="output directory (required unless --list; no default)")
    parser.add_argument("--list", action="store_true", help="print the row mapping and exit")
    parser.add_argument("--verbose", type=int, choices=(0, 1, 2), default=2, help="model.fit verbosity")


def run_ablate(args: argparse.Namespace) -> int:
    from tf_transformer.config import load_config
    from tf_transformer.tuning.ablation import listing, run_ablation

    if args.list:
        base = load_config(args.config, args.overrides)
        print(listing(base))
        return 0
    if not args.output:
        raise UserError("--output DIR is required (where report.md, report.png and results.json go)")
    for flag, value in (("--steps", args.steps), ("--bleu-sentences", args.bleu_sentences),
                        ("--beam", args.beam)):
        if value is not None and value < 1:
            raise UserError(f"{flag} {value}: must be >= 1")
    if args.minutes is not None and not 0 < args.minutes < float("inf"):
        raise UserError(f"--minutes {args.minutes}: must be a finite number > 0")
    result = run_ablation(args.rows, args.output, base_config=args.config, overrides=args.overrides,
                          steps=args.steps, minutes=args.minutes, beam_size=args.beam,
                          bleu_sentences=args.bleu_sentences, strategy=args.strategy,
                          validate=not args.no_validation, verbose=args.verbose)
    if result.interrupted:
        print(f"tft ablate: stopped by {result.interrupted} ({len(result.results['rows'])} row(s) in the report); "
              "rerun the same command to go on", file=sys.stderr)
        return STOPPED_EXIT[result.interrupted]
    print(f"tft ablate: {result.summary()}")
    return 0
