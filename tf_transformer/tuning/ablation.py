"""The paper's Table 3 as a small-scale study on Multi30k (behind ``tft ablate``).

::

    tft ablate --rows A1,A3,C1,C2,D1,E --output runs/ablate            # 2000 updates each
    tft ablate --rows all --steps 3000 --output runs/ablate-all
    tft ablate --rows A --minutes 20 --output runs/ablate-heads
    tft ablate --list                                                   # the row mapping only

For each chosen row (and ``base``, the reference, always) the base config (default
``multi30k_small``) gets the row's change scaled to its size (the rules are in
:mod:`tf_transformer.tuning.rows`; ``--list`` prints them), is trained with ``tft train``'s
code for the same budget (``--steps`` updates, default ``train.train_steps``, or
``--minutes`` of wall-clock time each) with the same seed and data order, and is scored
with its final weights (no checkpoint averaging, as in Table 3):

* **PPL**: unsmoothed perplexity per subword token on the validation split (Multi30k val);
* **BLEU**: sacreBLEU (detokenized, cased) on the test split (Multi30k test2016), beam search
  with the config's ``decode.beam_size``/``alpha`` (``--beam 1``: greedy);
* **params**: every weight of the model, the shared embedding included.

Output directory::

    report.md       table: row, change (paper's and ours), our params/PPL/BLEU, the paper's
    report.png      bars of our BLEU and PPL per row beside the paper's
    results.json    everything measured, and the settings of the run
    rows/<row>/     each row's tft train directory (model.keras, checkpoints, backup, logs)
    vocab.model     the shared vocabulary, when the config names none

Rerunning the same command skips the rows already in ``results.json`` and resumes a row
whose training was interrupted; the report always covers every row done so far.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import json
import math
import time
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from tf_transformer.config import Config, load_config
from tf_transformer.errors import UserError
from tf_transformer.io import atomic_path, atomic_write, one_model_after_another, say
from tf_transformer.tuning.rows import (
    ROWS,
    describe_change,
    paper_figures,
    parse_rows,
    preset_name,
    row_config,
    same_as_earlier,
)

#: Settings that must match for rows of one output directory to be comparable.
SETTING_KEYS = ("base_config", "overrides", "steps", "minutes", "beam_size", "alpha", "bleu_sentences")


def budget_config(base: Config, steps: Optional[int], minutes: Optional[float]) -> Config:
    """``base`` with the per-row budget: ``steps`` updates and/or ``minutes`` of training."""
    cfg = copy.deepcopy(base)
    if steps is not None:
        if steps < 1:
            raise UserError(f"steps={steps}: must be >= 1")
        cfg.train.train_steps = int(steps)
    if minutes is not None:
        if not 0 < minutes < float("inf"):  # (NaN too: its clock would never run out)
            raise UserError(f"minutes={minutes}: must be a finite number > 0")
        cfg.train.max_minutes = float(minutes)
        if steps is None:
            cfg.train.train_steps = 10**9  # the clock decides
    cfg.train.steps_per_epoch = max(1, min(cfg.train.steps_per_epoch, cfg.train.train_steps))
    return cfg


def model_summary(cfg: Config) -> dict:
    m = cfg.model.resolved()
    return {"num_heads": m.num_heads, "key_dim": m.key_dim, "value_dim": m.value_dim, "num_layers": m.num_layers,
            "d_model": m.d_model, "d_ff": m.d_ff, "dropout": m.dropout, "position_encoding": m.position_encoding,
            "label_smoothing": cfg.train.label_smoothing}


def listing(base: Config) -> str:
    """The row mapping as a markdown table (what ``--list`` prints)."""
    lines = [f"Table 3 rows applied to {base.name} (rules: tf_transformer/tuning/rows.py)", "",
             "| row | paper change | our change | h | d_k | d_v | N | d_model | d_ff | P_drop | eps_ls | positions |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for row in ROWS:
        m = model_summary(row_config(row, base))
        lines.append(f"| {row} | {paper_figures(row)['change']} | {describe_change(row, base)} | {m['num_heads']} | "
                     f"{m['key_dim']} | {m['value_dim']} | {m['num_layers']} | {m['d_model']} | {m['d_ff']} | "
                     f"{m['dropout']:g} | {m['label_smoothing']:g} | {m['position_encoding']} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Results file
# ---------------------------------------------------------------------------------------


def load_results(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is not a results file of tft ablate ({e}); move it away or choose "
                        "another output directory") from None
    if not isinstance(data, dict) or not isinstance(data.get("rows"), dict):
        raise UserError(f"{path} is not a results file of tft ablate (no 'rows'); choose another output directory")
    return data


def check_settings(previous: dict, settings: dict, path: Path) -> None:
    """Refuse to add rows to ``path``'s study when they would be trained otherwise than its rows:
    other :data:`SETTING_KEYS`, or another resolved base config (a config file edited between
    two runs keeps its name; studies written before the config was recorded are compared by the
    settings alone)."""
    from tf_transformer.training.rundir import changed_fields, listed

    old = previous.get("settings") or {}
    diff = [f"{k}: {old.get(k)!r} there, {settings.get(k)!r} now"
            for k in SETTING_KEYS if old.get(k) != settings.get(k)]
    if "config" in old:
        diff += [f"config {k}: {a!r} there, {b!r} now"
                 for k, a, b in changed_fields(old["config"], json.loads(json.dumps(settings["config"])))]
    if diff and previous.get("rows"):
        raise UserError(f"{path} holds rows made with other settings ({listed(diff)}); rows trained differently "
                        "are not comparable: rerun with the same settings or choose another output directory")


# ---------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------


def _num(value, fmt: str) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


def _delta(value, base, fmt: str) -> str:
    if value is None or base is None:
        return ""
    return format(value - base, "+" + fmt)


def format_report(results: dict) -> str:
    """``report.md`` from the results dict."""
    s = results["settings"]
    rows = [results["rows"][r] for r in ROWS if r in results["rows"]]
    base = results["rows"].get("base")
    paper_base = paper_figures("base")
    data = results.get("data", {})
    if s.get("minutes") and s.get("steps"):
        budget = f"{s['steps']} updates or {s['minutes']:g} minutes, whichever came first"
    elif s.get("minutes"):
        budget = f"{s['minutes']:g} minutes of training"
    else:
        budget = f"{s['steps']} updates"
    decoding = ("greedy decoding" if s["beam_size"] == 1
                else f"beam search (beam {s['beam_size']}, alpha {s['alpha']:g})")
    sentences = f"the first {s['bleu_sentences']} sentences of " if s.get("bleu_sentences") else ""
    lines = [
        f"# Table 3 at small scale: {s['base_config']}",
        "",
        f"Each row is `{s['base_config']}`"
        + (f" (with {', '.join(s['overrides'])})" if s.get("overrides") else "")
        + f" with the row's change scaled to its size (`tft ablate --list`; rules in "
        f"`tf_transformer/tuning/rows.py`), trained for {budget} ({results.get('tokens_per_batch', '?')} tokens "
        "per batch), same seed and data order, scored with its final weights (no checkpoint averaging, as in "
        "Table 3).",
        "",
        f"- **our PPL**: unsmoothed perplexity per subword token on the validation split; **our BLEU**: "
        f"sacreBLEU (`{results.get('bleu_signature', '')}`) on {sentences}the test split "
        f"({data.get('test', '?')}), "
        f"{decoding}; **our params**: all weights, shared embedding included.",
        "- `results.json` also holds, per row, lowercased 13a BLEU (as Multi30k papers report), the paper's "
        "tokenized compound-split BLEU and chrF2 of the same translations.",
        "- **paper**: newstest2013 (dev) perplexity per word-piece and BLEU of the base model's variations "
        "(WMT14 En-De, 100K steps); params blank in the paper where they equal base's (65M).",
        "- Absolute values are not comparable (other data, vocabulary and size); compare each row's difference "
        "from its own base (the two delta columns).",
        "",
        f"Data: {data.get('source_lang', '?')}->{data.get('target_lang', '?')}; train {data.get('train', '?')}, "
        f"validation {data.get('valid', '?')}, test {data.get('test', '?')}.",
        "",
        "| row | paper change | our change | our params (M) | our PPL | our BLEU | paper PPL | paper BLEU | "
        "paper params (M) | ΔPPL ours / paper | ΔBLEU ours / paper | updates |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p = r["paper"]
        d_ppl = d_bleu = ""
        if r["row"] != "base" and base is not None:
            d_ppl = f"{_delta(r['ppl'], base['ppl'], '.2f')} / {_delta(p['ppl'], paper_base['ppl'], '.2f')}"
            d_bleu = f"{_delta(r['bleu'], base['bleu'], '.1f')} / {_delta(p['bleu'], paper_base['bleu'], '.1f')}"
        lines.append(
            f"| {r['row']} | {p['change']} | {r['change']} | {_num(r['params'] / 1e6, '.2f')} | "
            f"{_num(r['ppl'], '.2f')} | {_num(r['bleu'], '.1f')} | "
            f"{_num(p['ppl'], '.2f')} | {_num(p['bleu'], '.1f')} | "
            f"{'' if p['params'] is None else p['params']} | {d_ppl} | {d_bleu} | {r.get('steps', '')} |")
    same = {row: earlier for row, earlier in results.get("same_as", {}).items() if row in results["rows"]}
    if same:
        lines += ["", "Rounded to this base's size, some rows are the same model as an earlier one (their "
                  "differences are noise, not the row's change): "
                  + ", ".join(f"{row} = {earlier}" for row, earlier in same.items()) + "."]
    lines += ["", f"Machine: {results.get('machine', '')}; strategy: {results.get('strategy', '')}.", ""]
    return "\n".join(lines)


def plot_report(results: dict, path: Path) -> Path:
    """``report.png``: our BLEU and PPL per row beside the paper's (two panels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [results["rows"][r] for r in ROWS if r in results["rows"]]
    names = [r["row"] for r in rows]
    x = np.arange(len(rows))
    width = 0.4
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 0.7 * len(rows) + 2.0), 7.0), sharex=True)
    panels = ((axes[0], "bleu", "BLEU (higher is better)"), (axes[1], "ppl", "perplexity (lower is better)"))
    for ax, key, label in panels:
        ours = [np.nan if r[key] is None else r[key] for r in rows]
        paper = [r["paper"][key] for r in rows]
        bars = ax.bar(x - width / 2, ours, width, label="ours (small model)", color="#1f77b4")
        ax.bar_label(bars, fmt="%.1f" if key == "bleu" else "%.2f", fontsize=6, padding=1)
        bars = ax.bar(x + width / 2, paper, width, label="paper (WMT14 dev, base)", color="#ff7f0e")
        ax.bar_label(bars, fmt="%.1f" if key == "bleu" else "%.2f", fontsize=6, padding=1)
        base = results["rows"].get("base")
        if base is not None and base[key] is not None:
            ax.axhline(base[key], color="#1f77b4", linestyle="--", linewidth=0.8)
        ax.axhline(paper_figures("base")[key], color="#ff7f0e", linestyle="--", linewidth=0.8)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=8)
    axes[1].set_xticks(x)
    axes[1].set_xticklabels(names)
    axes[1].set_xlabel("Table 3 row (dashed: each side's base)")
    s = results["settings"]
    fig.suptitle(f"Table 3 at small scale: {s['base_config']}, "
                 + (f"{s['steps']} updates" if s.get("steps") else f"{s.get('minutes')} min") + " per row")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)
    return path


def write_report(results: dict, output_dir: Path) -> tuple[Path, Path, Path]:
    json_path, md_path, png_path = output_dir / "results.json", output_dir / "report.md", output_dir / "report.png"
    atomic_write(json_path, json.dumps(results, indent=2, sort_keys=False) + "\n")
    atomic_write(md_path, format_report(results))
    plot_report(results, png_path)
    return md_path, png_path, json_path


# ---------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class AblationResult:
    output_dir: Path
    results: dict
    trained: list
    skipped: list
    report_md: Path
    report_png: Path
    results_json: Path
    interrupted: Optional[str] = None  # "SIGTERM" / "SIGINT": a row was stopped, and the study with it

    def summary(self) -> str:
        n = len(self.results["rows"])
        return (f"{n} row(s) in the report ({len(self.trained)} trained now"
                + (f", {len(self.skipped)} already done: {', '.join(self.skipped)}" if self.skipped else "")
                + f"); wrote {self.report_md}, {self.report_png}, {self.results_json}")


def _machine() -> str:
    import os
    import platform

    return f"{platform.machine()} {os.cpu_count()} CPU(s), {platform.system()}, Python {platform.python_version()}"


def evaluate_row(model, cfg: Config, tokenizer, beam_size: int, alpha: float, bleu_sentences: Optional[int],
                 log: Callable[[str], None]) -> dict:
    """Validation perplexity and test BLEU of a trained Transformer."""
    from tf_transformer.data import read_parallel_text
    from tf_transformer.tuning.scoring import corpus_bleu, split_perplexity

    ppl = split_perplexity(model, cfg.data, tokenizer, "valid")
    sources, references = read_parallel_text(cfg.data, "test")
    if bleu_sentences:
        sources, references = sources[:bleu_sentences], references[:bleu_sentences]
    log(f"ablate:   validation perplexity {ppl['perplexity']:.3f}; translating {len(sources)} test sentences "
        + ("greedily" if beam_size == 1 else f"(beam {beam_size})"))
    bleu = corpus_bleu(model, tokenizer, sources, references, beam_size=beam_size, alpha=alpha,
                       max_extra_length=cfg.decode.max_extra_length, batch_size=cfg.decode.batch_size,
                       all_metrics=True, stop_rule=cfg.decode.stop_rule)
    return {"ppl": ppl["perplexity"], "valid_nll": ppl["nll"], "valid_accuracy": ppl["accuracy"],
            "bleu": bleu["bleu"], "bleu_signature": bleu["signature"], "bleu_lowercase": bleu["bleu_lowercase"],
            "bleu_tokenized": bleu["bleu_tokenized"], "chrf": bleu["chrf"], "bleu_sentences": bleu["sentences"],
            "decode_seconds": round(bleu["seconds"], 1)}


def run_ablation(rows: Union[str, Sequence[str]], output_dir, *, base_config: Union[str, Config] = "multi30k_small",
                 overrides: Sequence[str] = (), steps: Optional[int] = None, minutes: Optional[float] = None,
                 beam_size: Optional[int] = None, bleu_sentences: Optional[int] = None, strategy=None,
                 validate: bool = True, verbose="auto", log: Callable[[str], None] = say) -> AblationResult:
    """Train and score Table 3 rows (plus ``base``) at small scale; write the report.

    Args:
        rows: ``"A1,C,E"``-style text or a list of row names (``base`` is always added).
        output_dir: the study's directory (resumable; see the module docstring).
        base_config: preset name, YAML path or :class:`Config` of the small base model.
        overrides: ``section.field=value`` overrides of the base config.
        steps: updates per row (default ``train.train_steps`` of the base config).
        minutes: wall-clock training budget per row instead of (or besides) ``steps``.
        beam_size: decoding beam for BLEU (default ``decode.beam_size``; 1 = greedy).
        bleu_sentences: score only the first N test sentences (default: all).
        strategy: ``tf.distribute`` strategy or name (default ``train.strategy``).
        validate: validate after every epoch while training (learning curves in each row's
            ``logs/``); the reported PPL is measured after training either way.
    """
    import keras

    from tf_transformer import data as data_api
    from tf_transformer.data import sources as data_sources
    from tf_transformer.io import load_model
    from tf_transformer.model import count_parameters
    from tf_transformer.training.loop import train
    from tf_transformer.training.strategy import describe, resolve_strategy

    chosen = parse_rows(rows) if isinstance(rows, str) else parse_rows(",".join(rows))
    chosen = ["base"] + [r for r in chosen if r != "base"]
    output_dir = Path(output_dir)
    if isinstance(base_config, Config):
        base = copy.deepcopy(base_config)
        base_name = base.name or "config"
    else:
        base = load_config(base_config, list(overrides))
        base_name = str(base_config)
    if bleu_sentences is not None and bleu_sentences < 1:
        raise UserError(f"bleu_sentences={bleu_sentences}: must be >= 1")
    beam = int(beam_size if beam_size is not None else base.decode.beam_size)
    if beam < 1:
        raise UserError(f"beam_size={beam}: must be >= 1")
    base = budget_config(base, steps, minutes)
    same = same_as_earlier(chosen, base)  # also fails on a bad mapping before any training
    for row, earlier in same.items():
        log(f"ablate: warning: at this base's size row {row} ({describe_change(row, base)}) is the same model and "
            f"training as row {earlier}: the paper's values round to the same ones (rules: tft ablate --list); "
            f"it is trained and reported all the same")

    settings = {"base_config": base_name, "overrides": list(overrides), "steps": None if minutes and steps is None
                else base.train.train_steps, "minutes": minutes, "beam_size": beam, "alpha": base.decode.alpha,
                "bleu_sentences": bleu_sentences,
                "config": {k: v for k, v in dataclasses.asdict(base).items() if k != "name"}}
    json_path = output_dir / "results.json"
    results = load_results(json_path)
    check_settings(results, settings, json_path)
    results.setdefault("rows", {})
    results["settings"] = settings
    results["same_as"] = {**results.get("same_as", {}), **same}

    # one vocabulary for every row
    proto = data_api.resolve_vocabulary(base, output_dir / "vocab.model", log=log, who="ablate").model_proto
    strategy = resolve_strategy(strategy, base.train.strategy, one_machine="tft ablate (one process writes the report)")
    results["strategy"] = describe(strategy)
    results["machine"] = _machine()
    results["tokens_per_batch"] = base.data.tokens_per_batch
    results["data"] = {"source_lang": base.data.source_lang, "target_lang": base.data.target_lang,
                       **{split: data_sources.describe(base.data, split) for split in ("train", "valid", "test")}}

    trained, skipped = [], []
    todo = [r for r in chosen if r not in results["rows"]]
    skipped = [r for r in chosen if r in results["rows"]]
    if skipped:
        log(f"ablate: {', '.join(skipped)} already in {json_path}: skipped")
    for i, row in enumerate(todo, start=1):
        cfg = row_config(row, base)
        change = describe_change(row, base)
        row_dir = output_dir / "rows" / row
        budget = (f"{settings['steps']} updates" if settings["steps"] else "") + \
            (f"{' or ' if settings['steps'] else ''}{minutes:g} min" if minutes else "")
        log(f"ablate: [{i}/{len(todo)}] row {row} ({change}): training {budget} in {row_dir}")
        start = time.time()
        keras.backend.clear_session()
        row_dir.mkdir(parents=True, exist_ok=True)
        # a fresh in-graph tokenizer per row: clearing the Keras session drops the old one's resource
        with one_model_after_another():
            result = train(cfg, model_dir=row_dir, strategy=strategy, tokenizer=data_api.Tokenizer(proto),
                           valid_data=None if validate else False, verbose=verbose, log=log)
            if result.stopped_early in ("SIGTERM", "SIGINT"):
                # not a result: the row's run resumes from its backup when the study is rerun
                log(f"ablate: row {row} stopped by {result.stopped_early} at update {result.final_step:,}: not "
                    f"recorded; rerun the same command to go on with it")
                md, png, js = write_report(results, output_dir) if results["rows"] else (None, None, None)
                return AblationResult(output_dir=output_dir, results=results, trained=trained, skipped=skipped,
                                      report_md=md, report_png=png, results_json=js,
                                      interrupted=result.stopped_early)
            minutes_used = (time.time() - start) / 60.0
            model = load_model(str(result.model_path))
            scores = evaluate_row(model, cfg, data_api.Tokenizer(proto), beam, base.decode.alpha, bleu_sentences,
                                  log)
        record = {
            "row": row,
            "preset": preset_name(row),
            "change": change,
            "config": model_summary(cfg),
            "params": count_parameters(model),
            **scores,
            "steps": int(result.final_step),
            "stopped_early": result.stopped_early,
            "train_minutes": round(minutes_used, 2),
            "train_tokens_per_second": None if not result.train_seconds else round(result.tokens_per_second, 1),
            "model_dir": str(row_dir),
            "paper": paper_figures(row),
            "finished": datetime.datetime.now().isoformat(timespec="seconds"),
        }
        results["rows"][row] = record
        results["bleu_signature"] = scores["bleu_signature"]
        write_report(results, output_dir)
        trained.append(row)
        log(f"ablate:   row {row}: {record['params'] / 1e6:.2f}M params, PPL {record['ppl']:.3f}, "
            f"BLEU {record['bleu']:.2f} after {record['steps']} updates ({minutes_used:.1f} min)")
    md, png, js = write_report(results, output_dir)
    return AblationResult(output_dir=output_dir, results=results, trained=trained, skipped=skipped,
                          report_md=md, report_png=png, results_json=js)
