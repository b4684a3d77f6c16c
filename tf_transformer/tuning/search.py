"""Running a search (``tft tune``, or :func:`run_search` from a script) and its results table.

::

    from tf_transformer.config import load_config
    from tf_transformer.tuning import run_search, SearchSpace

    result = run_search(load_config("multi30k_small"), "runs/tune", algorithm="hyperband",
                        steps_per_trial=600, steps_per_epoch=100,
                        search_space=SearchSpace(num_heads=(1, 4, 8), num_layers=(2, 3)))
    print(result.summary())
    result.tuner.get_best_hyperparameters()[0].values

Files in the output directory::

    results.md, results.csv   one row per trial: hyper-parameters, d_k, parameters, the
                              objective and the other validation numbers, steps, minutes
    best_config.yaml          the full config of the best trial (``tft train --config`` it)
    search-<algorithm>.json   the settings of the search (config, space, budgets, objective,
                              seed): a rerun with other settings is refused, not mixed in
    vocab.model               the vocabulary, if it had to be built
    <algorithm>/              Keras Tuner's project (trial states, checkpoints): rerunning
                              the same command resumes the search (``--overwrite``: restart)
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from pathlib import Path
from typing import Callable, Optional, Union

import keras_tuner as kt

from tf_transformer.config import Config, ConfigError
from tf_transformer.io import atomic_write, one_model_after_another, say
from tf_transformer.training.rundir import changed_fields, listed
from tf_transformer.tuning.hypermodel import OBJECTIVES, SearchSpace, TransformerHyperModel, objective_for

ALGORITHMS = ("random", "hyperband")

#: Columns of the results table: (key, header).
COLUMNS = (
    ("trial", "trial"), ("status", "status"), ("num_heads", "h"), ("key_dim", "d_k=d_v"),
    ("num_layers", "N"), ("d_ff", "d_ff"), ("dropout", "P_drop"), ("word_dropout", "P_word"),
    ("epochs", "epochs"), ("steps", "steps"),
    ("params_m", "params (M)"), ("objective", "objective"), ("val_loss", "val_loss"),
    ("val_perplexity", "val_perplexity"), ("val_accuracy", "val_accuracy"), ("val_bleu", "val_bleu"),
    ("train_minutes", "minutes"),
)


def make_tuner(hypermodel: TransformerHyperModel, directory, algorithm: str = "random", *, max_trials: int = 10,
               max_epochs: int = 3, hyperband_factor: int = 3, hyperband_iterations: int = 1,
               objective: Optional[str] = None, distribution_strategy=None, seed: Optional[int] = None,
               overwrite: bool = False, project_name: Optional[str] = None):
    """A ``kt.RandomSearch`` or ``kt.Hyperband`` over ``hypermodel`` writing to
    ``directory/<project_name or algorithm>``. ``max_epochs`` is Hyperband's largest budget
    (in epochs of ``steps_per_epoch`` updates)."""
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    objective = objective_for(objective or hypermodel.objective)
    common = dict(hypermodel=hypermodel, objective=objective, seed=seed, directory=str(directory),
                  project_name=project_name or algorithm, overwrite=overwrite,
                  distribution_strategy=distribution_strategy, max_consecutive_failed_trials=3)
    if algorithm == "random":
        return kt.RandomSearch(max_trials=int(max_trials), **common)
    if max_epochs < 1:
        raise ConfigError(f"Hyperband needs max_epochs >= 1, got {max_epochs}")
    return kt.Hyperband(max_epochs=int(max_epochs), factor=int(hyperband_factor),
                        hyperband_iterations=int(hyperband_iterations), **common)


def _metric(trial, name):
    if trial.metrics.exists(name):
        value = trial.metrics.get_last_value(name)
        return None if value is None else float(value)
    return None


def trial_number(trial_id: str) -> str:
    """The number Keras Tuner prints for a trial ("Search: Running Trial #3") from its id ("02"):
    ids count from 0, the printed numbers from 1. Non-numeric ids are returned as they are."""
    return f"#{int(trial_id) + 1}" if str(trial_id).isdigit() else str(trial_id)


def trial_rows(tuner, d_model: Optional[int] = None) -> list[dict]:
    """One dict per trial of ``tuner`` (keys of :data:`COLUMNS`), in trial order."""
    rows = []
    d_model = d_model or getattr(getattr(tuner.hypermodel, "config", None), "model", None).d_model
    for trial_id in sorted(tuner.oracle.trials, key=lambda t: (len(t), t)):
        trial = tuner.oracle.trials[trial_id]
        hp = trial.hyperparameters.values
        heads = hp.get("num_heads")
        params = _metric(trial, "params")
        rows.append({
            "trial": trial_number(trial_id),
            "status": str(trial.status),
            "num_heads": heads,
            "key_dim": d_model // int(heads) if heads and d_model else None,
            "num_layers": hp.get("num_layers"),
            "d_ff": hp.get("d_ff"),
            "dropout": hp.get("dropout"),
            "word_dropout": hp.get("word_dropout"),
            # epochs trained (Hyperband's bracket budget; else what fit reported: trials of older
            # versions recorded only the best epoch's number)
            "epochs": hp.get("tuner/epochs", _metric(trial, "epochs") or _metric(trial, "epoch")),
            "steps": _metric(trial, "steps"),
            "params_m": None if params is None else params / 1e6,
            "objective": None if trial.score is None else float(trial.score),
            "val_loss": _metric(trial, "val_loss"),
            "val_perplexity": _metric(trial, "val_perplexity"),
            "val_accuracy": _metric(trial, "val_accuracy"),
            "val_bleu": _metric(trial, "val_bleu"),
            "train_minutes": _metric(trial, "train_minutes"),
        })
    return rows


def _fmt(key, value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if key in ("num_heads", "key_dim", "num_layers", "d_ff", "epochs", "steps"):
        return str(int(value))
    if key in ("dropout", "word_dropout"):
        return f"{float(value):g}"
    if key in ("params_m",):
        return f"{value:.2f}"
    if key == "train_minutes":
        return f"{value:.1f}"
    if key == "val_bleu":
        return f"{value:.2f}"
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _columns(rows):
    """Columns with at least one value (``val_bleu`` only when measured)."""
    return [(k, h) for k, h in COLUMNS if k in ("trial", "status") or any(r.get(k) is not None for r in rows)]


def format_markdown(rows, objective: str, best_trial: Optional[str] = None, title: str = "") -> str:
    cols = _columns(rows)
    lines = []
    if title:
        lines += [f"# {title}", ""]
    lines += [f"Objective: `{objective}` ({OBJECTIVES.get(objective, 'min')}); best trial marked with *.", "",
              "| " + " | ".join(h for _, h in cols) + " |",
              "|" + "|".join("---:" if k not in ("trial", "status") else "---" for k, _ in cols) + "|"]
    for r in rows:
        cells = [_fmt(k, r.get(k)) for k, _ in cols]
        if best_trial is not None and r["trial"] == best_trial:
            cells[0] += " *"
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def format_csv(rows) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    keys = [k for k, _ in COLUMNS]
    writer.writerow(keys)
    for r in rows:
        writer.writerow(["" if r.get(k) is None else r.get(k) for k in keys])
    return out.getvalue()


def best_trial(tuner):
    """The best *completed* trial with a score, or ``None`` (Keras Tuner's ``get_best_trials`` also
    returns failed trials when no trial completed)."""
    try:
        trials = tuner.oracle.get_best_trials(max(1, len(tuner.oracle.trials)))
    except Exception:  # noqa: BLE001 (no trial yet)
        return None
    return next((t for t in trials if t.score is not None and str(t.status) == "COMPLETED"), None)


def write_results(tuner, output_dir, title: str = "") -> tuple[Path, Path, list]:
    """Write ``results.md`` and ``results.csv`` for ``tuner``'s trials; returns the paths and rows."""
    output_dir = Path(output_dir)
    rows = trial_rows(tuner)
    trial = best_trial(tuner)
    best = trial_number(trial.trial_id) if trial is not None else None
    md, csv_path = output_dir / "results.md", output_dir / "results.csv"
    atomic_write(md, format_markdown(rows, tuner.oracle.objective.name, best, title))
    atomic_write(csv_path, format_csv(rows))
    return md, csv_path, rows


def write_best_config(hypermodel: TransformerHyperModel, hp, path) -> Path:
    """The full config of the trial with hyper-parameters ``hp`` as YAML."""
    import yaml

    cfg = hypermodel.trial_config(hypermodel.declare(hp))
    raw = {"name": f"{cfg.name or 'config'}-tuned", **cfg.to_dict()}
    path = Path(path)
    atomic_write(path, "# best trial of tft tune; train it with: tft train --config " + str(path) + "\n"
                  + yaml.safe_dump(raw, sort_keys=False))
    return path


@dataclasses.dataclass
class SearchResult:
    """What :func:`run_search` did and wrote."""

    tuner: object
    rows: list
    results_md: Path
    results_csv: Path
    best_config: Optional[Path]
    best: Optional[dict]  # the best trial's row

    def summary(self) -> str:
        done = sum(1 for r in self.rows if r["status"] == "COMPLETED")
        text = f"{done} trial(s) completed of {len(self.rows)}"
        if self.best:
            b = self.best
            text += (f"; best trial {b['trial']}: h={b['num_heads']}, N={b['num_layers']}, d_ff={b['d_ff']}, "
                     f"P_drop={b['dropout']:g}, objective {b['objective']:.4g}")
        text += f"; wrote {self.results_md}, {self.results_csv}"
        if self.best_config:
            text += f", {self.best_config}"
        return text


#: What a search was run with (all but ``max_trials``, which a resumed search may raise), beside
#: Keras Tuner's project: a resumed search must be the same search.
SEARCH_FILE = "search-{algorithm}.json"


def _check_same_search(output_dir: Path, algorithm: str, identity: dict, overwrite: bool) -> None:
    """Refuse to resume a project in ``output_dir`` that was searched with other settings (Keras
    Tuner would reload its finished trials and report a best trial from the old space)."""
    project = output_dir / algorithm
    recorded = output_dir / SEARCH_FILE.format(algorithm=algorithm)
    if overwrite or not project.is_dir() or not recorded.is_file():
        return
    try:
        old = json.loads(recorded.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(f"{recorded}: not readable ({e}); use --overwrite to restart the search") from None
    changed = [f"{k}: {a!r} -> {b!r}" for k, a, b in changed_fields(old, json.loads(json.dumps(identity)))]
    if changed:
        raise ConfigError(f"{project} holds a {algorithm} search with other settings ({listed(changed)}): resuming "
                          "it would mix the two; use --overwrite to restart it, or another --output")


def run_search(config: Config, output_dir, *, algorithm: str = "random", max_trials: int = 10,
               steps_per_trial: Optional[int] = None, steps_per_epoch: Optional[int] = None,
               minutes_per_trial: Optional[float] = None, objective: str = "val_loss",
               search_space: Optional[SearchSpace] = None, strategy: Union[str, object, None] = None,
               bleu: bool = False, bleu_sentences: int = 300, hyperband_factor: int = 3,
               seed: Optional[int] = None, overwrite: bool = False, verbose="auto",
               log: Callable[[str], None] = say) -> SearchResult:
    """Run a Keras Tuner search over ``config``'s Transformer and write the results table.

    Args:
        config: the base config (data, recipe, fixed model fields).
        output_dir: where the tuner project, the tables and the best config go.
        algorithm: ``"random"`` (RandomSearch, ``max_trials`` trials) or ``"hyperband"``
            (budgets up to ``steps_per_trial``; ``max_trials`` is ignored).
        steps_per_trial: update budget of a trial (default ``train.train_steps``), in epochs
            of ``steps_per_epoch`` updates (default ``min(train.steps_per_epoch, steps_per_trial)``).
        minutes_per_trial: wall-clock budget of a trial (stops at the first update past it).
        objective: one of ``val_loss`` (default), ``val_perplexity``, ``val_accuracy``, ``val_bleu``.
        search_space: :class:`SearchSpace` (default: around the config).
        strategy: a ``tf.distribute.Strategy`` or a ``train.strategy`` name (default the config's).
        bleu: report ``val_bleu`` even when it is not the objective.
        bleu_sentences: validation sentences translated (greedily) for BLEU.
        hyperband_factor: Hyperband's reduction factor.
        seed: the tuner's seed (default ``train.seed``).
        overwrite: restart instead of resuming an existing project in ``output_dir``.
        verbose: ``model.fit``'s verbosity.
    """
    from tf_transformer.training.strategy import resolve_strategy

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    steps_per_trial = int(steps_per_trial or config.train.train_steps)
    steps_per_epoch = int(steps_per_epoch or min(config.train.steps_per_epoch, steps_per_trial))
    if steps_per_trial < 1 or steps_per_epoch < 1:
        raise ConfigError(f"steps per trial ({steps_per_trial}) and per epoch ({steps_per_epoch}) must be >= 1")
    if minutes_per_trial is not None and not 0 < minutes_per_trial < float("inf"):
        raise ConfigError(f"minutes_per_trial={minutes_per_trial}: must be a finite number > 0")
    epochs = max(1, math.ceil(steps_per_trial / steps_per_epoch))
    strategy = resolve_strategy(strategy, config.train.strategy, one_machine="tft tune (Keras Tuner's "
                                "distribution_strategy supports single-worker strategies only)")
    hypermodel = TransformerHyperModel(config, search_space, vocab_dir=output_dir, steps_per_epoch=steps_per_epoch,
                                       max_minutes=minutes_per_trial, objective=objective, bleu=bleu,
                                       bleu_sentences=bleu_sentences, verbose=verbose, log=log)
    hypermodel.prepare()
    hypermodel.validation_steps_for(hypermodel.config, strategy)  # an empty validation split: said now, once
    space = hypermodel.search_space
    identity = {"algorithm": algorithm, "objective": objective,  # a reordered value list is the same space
                "search_space": {k: sorted(v) for k, v in space.searched().items()},
                "steps_per_trial": steps_per_trial, "steps_per_epoch": steps_per_epoch,
                "minutes_per_trial": minutes_per_trial, "hyperband_factor": hyperband_factor,
                "bleu": bleu, "bleu_sentences": bleu_sentences,
                "seed": config.train.seed if seed is None else seed,
                "config": {k: v for k, v in dataclasses.asdict(hypermodel.config).items() if k != "name"}}
    _check_same_search(output_dir, algorithm, identity, overwrite)
    tuner = make_tuner(hypermodel, output_dir, algorithm, max_trials=max_trials, max_epochs=epochs,
                       hyperband_factor=hyperband_factor, distribution_strategy=strategy,
                       seed=config.train.seed if seed is None else seed, overwrite=overwrite)
    atomic_write(output_dir / SEARCH_FILE.format(algorithm=algorithm), json.dumps(identity, indent=1) + "\n")
    log(f"tune: {algorithm} search over h={list(space.num_heads)}, N={list(space.num_layers)}, "
        f"d_ff={list(space.d_ff)}, P_drop={list(space.dropout)}; objective {objective}; "
        f"{epochs} epoch(s) x {steps_per_epoch} updates per trial"
        + (f", at most {minutes_per_trial:g} min" if minutes_per_trial else "")
        + f"; {strategy.num_replicas_in_sync} replica(s)")
    search_kwargs = {"steps_per_epoch": steps_per_epoch}
    if algorithm == "random":
        search_kwargs["epochs"] = epochs
    try:
        with one_model_after_another():
            tuner.search(**search_kwargs)
    finally:
        md, csv_path, rows = write_results(tuner, output_dir, title=f"tft tune: {algorithm} search on "
                                           f"{config.name or 'config'}")
    best_config = None
    best_row = None
    best = best_trial(tuner)
    if best is not None:
        best_config = write_best_config(hypermodel, best.hyperparameters, output_dir / "best_config.yaml")
        best_row = next((r for r in rows if r["trial"] == trial_number(best.trial_id)), None)
    elif rows:
        log(f"tune: no trial completed (of {len(rows)}; their errors are above): no best_config.yaml")
    return SearchResult(tuner=tuner, rows=rows, results_md=md, results_csv=csv_path, best_config=best_config,
                        best=best_row)
