#!/usr/bin/env python
"""Several runs of ``tools/reproduce_multi30k.sh`` side by side: one row per run and what
they say together, read from each run's ``report/results.json`` (written by
``tools/multi30k_report.py``).

::

    python tools/multi30k_summary.py runs/seed1 runs/seed2 runs/seed3
    python tools/multi30k_summary.py runs/seed* --json runs/seeds.json
    python tools/multi30k_summary.py runs/b-s1 runs/b-s2 --paired-with runs/a-s1 runs/a-s2

One test2016 figure is one draw: runs of one recipe that differ only in their seeds spread
by about +-0.8 BLEU on Multi30k, so a recipe is judged by the mean of several. For each
figure (test2016 BLEU on lowercased Moses-tokenized text and sacreBLEU of the row chosen on
val, the same weights and beam at the run's own ``decode.alpha``, and val BLEU) the summary
gives the mean, the sample standard deviation, the range and a 95% interval for the mean
(Student's t over the runs: where the recipe's mean lies, not where one more run will land),
and how many runs reach the goals. The difference "chosen minus own alpha" is what choosing
the length penalty on val gave on test2016, run by run.

``--paired-with`` compares two settings run on the same seeds (or one run continued past
where its copy stopped): the i-th run of the list is paired with the i-th given there, and
the differences (run minus its pair) are described the same way. Pairing removes the seed's
share of the spread, so a difference shows with fewer runs than two unpaired means need.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import multi30k_report as report  # noqa: E402  (the sibling tool: the published figure, the length ratio)

PUBLISHED_BLEU = report.PUBLISHED["bleu_lc_moses"]
# two-sided 95% quantiles of Student's t for 1-30 degrees of freedom
T_975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
         2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
         2.052, 2.048, 2.045, 2.042)
FIGURES = (  # key, heading
    ("test", "test2016 BLEU lc Moses (chosen on val)"),
    ("test_sacrebleu", "test2016 sacreBLEU (chosen on val)"),
    ("test_own_alpha", "test2016 BLEU lc Moses at the run's own alpha"),
    ("alpha_gain", "chosen minus own alpha (what the alpha choice gave on test2016)"),
    ("val", "val BLEU lc Moses (chosen)"),
)


PAIRED = (  # key, heading, format: what --paired-with compares, run minus its pair
    ("test", "test2016 BLEU lc Moses (chosen on val)", "+.2f"),
    ("test_own_alpha", "test2016 BLEU lc Moses at the run's own alpha", "+.2f"),
    ("val", "val BLEU lc Moses (chosen)", "+.2f"),
    ("updates", "updates", "+,.0f"),
)


class SummaryError(Exception):
    """A run directory that cannot be summarised; the message says which and why."""


def t_quantile(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (table to 30, then
    the Cornish-Fisher expansion, within 0.001 of the exact value there)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(T_975):
        return T_975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def describe(values: list[float]) -> dict:
    """n, mean, sample sd, min, max and the 95% t interval of the mean (sd and interval need
    two values; ``None`` below that)."""
    n = len(values)
    out = {"n": n, "mean": statistics.fmean(values), "min": min(values), "max": max(values),
           "sd": None, "low": None, "high": None}
    if n >= 2:
        sd = statistics.stdev(values)
        half = t_quantile(n - 1) * sd / math.sqrt(n)
        out.update(sd=sd, low=out["mean"] - half, high=out["mean"] + half)
    return out


def _key(split: str, beam: int, alpha: float) -> str:
    return f"{split}/beam{beam}/alpha{alpha:g}"


def _length(meta: dict):
    ratio = report.length_ratio(meta)
    return float(ratio) if ratio else None


def trained_updates(sittings: list[dict]):
    """The updates a run trained, from its sittings' record (the last one that recorded its end),
    or ``None``."""
    ends = [held["end_step"] for held in sittings if held.get("end_step") is not None]
    return max(ends) if ends else None


def read_run(run: Path) -> dict:
    """One run's row: its seeds and training, the row chosen on val and the same weights and
    beam at the run's own ``decode.alpha``."""
    import yaml

    results_path = run / "report" / "results.json"
    if not results_path.is_file():
        what = "is not a run directory" if not (run / "config.yaml").is_file() else "has no report yet"
        raise SummaryError(f"{run} {what}: {results_path} does not exist (write it with "
                           f"`python tools/multi30k_report.py --run {run}`, or rerun the reproduction command)")
    try:
        payload = json.loads(results_path.read_text(encoding="utf-8"))
        name, beam, alpha = payload["chosen"]
        sets = payload["results"]
        chosen_test = sets[name][_key("test2016", beam, alpha)]
        chosen_val = sets[name][_key("val", beam, alpha)]
    except (ValueError, KeyError, TypeError) as e:
        raise SummaryError(f"{results_path}: not a report of tools/multi30k_report.py "
                           f"(could not read the chosen row: {type(e).__name__} {e})") from None
    config = {}
    if (run / "config.yaml").is_file():
        config = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8")) or {}
    train, data, decode = (config.get(k) or {} for k in ("train", "data", "decode"))
    own_alpha = decode.get("alpha")
    own = sets[name].get(_key("test2016", beam, own_alpha)) if own_alpha is not None else None
    from tf_transformer.training.sittings import ended_by_words, read_sittings

    held = read_sittings(run)
    ended_by = held[-1].get("ended_by") if held else None
    row = {
        "run": str(run), "train_seed": train.get("seed"), "data_seed": data.get("seed"),
        "sittings": len(held) or None,
        "ended_by": ended_by_words(ended_by, field=False) if held else "not recorded",
        # the updates trained: the last sitting's end (a run ended by its time budget trains past its last
        # evaluation, which is all the report's own figure counts); the report's for a run without sittings
        "updates": trained_updates(held) or payload.get("updates"), "train_minutes": payload.get("train_minutes"),
        "weights": name, "beam": beam, "alpha": alpha, "own_alpha": own_alpha,
        "val": chosen_val["scores"]["bleu_lc_moses"],
        "test": chosen_test["scores"]["bleu_lc_moses"],
        "test_sacrebleu": chosen_test["scores"]["sacrebleu"],
        "test_chrf": chosen_test["scores"].get("chrf"),
        "test_length": _length(chosen_test),
        "run_ons": chosen_test.get("run_ons"), "loops": chosen_test.get("loops"),
        "interval": payload.get("chosen_test2016_intervals", {}).get("bleu_lc_moses"),
        "test_own_alpha": own["scores"]["bleu_lc_moses"] if own else None,
        "test_own_alpha_length": _length(own) if own else None,
    }
    row["alpha_gain"] = row["test"] - row["test_own_alpha"] if own else None
    return row


def summarise(rows: list[dict], goal_bleu: float, goal_sacrebleu: float) -> dict:
    """The figures of :data:`FIGURES` described over the runs that have them, and the goals'
    counts."""
    figures = {}
    for key, _ in FIGURES:
        values = [r[key] for r in rows if r.get(key) is not None]
        if values:
            figures[key] = describe(values)
    return {"runs": len(rows), "figures": figures,
            "goals": {"bleu_lc_moses": goal_bleu, "sacrebleu": goal_sacrebleu,
                      "runs_reaching_bleu": sum(r["test"] >= goal_bleu for r in rows),
                      "runs_reaching_sacrebleu": sum(r["test_sacrebleu"] >= goal_sacrebleu for r in rows)}}


def paired(rows: list[dict], partners: list[dict]) -> dict:
    """For each figure of :data:`PAIRED`: the differences run minus its pair (pairs in order,
    those where both have the figure), described, and how many pairs are higher / lower."""
    if len(rows) != len(partners):
        raise SummaryError(f"--paired-with gives {len(partners)} run(s) for {len(rows)}: "
                           "one partner per run, in the same order")
    figures = {}
    for key, _, _ in PAIRED:
        diffs = [float(a[key]) - float(b[key]) for a, b in zip(rows, partners)
                 if a.get(key) is not None and b.get(key) is not None]
        if diffs:
            figures[key] = {**describe(diffs), "higher": sum(d > 0 for d in diffs),
                            "lower": sum(d < 0 for d in diffs)}
    return {"pairs": len(rows), "figures": figures}


def paired_markdown(rows: list[dict], partners: list[dict], comparison: dict) -> str:
    lines = ["| run | paired with | updates | test2016 BLEU lc Moses | at own alpha | val BLEU lc Moses |",
             "|---|---|---:|---:|---:|---:|"]

    formats = {key: fmt for key, _, fmt in PAIRED}

    def pair(a, b, key):
        if a.get(key) is None or b.get(key) is None:
            return ""
        fmt = formats[key]
        return f"{a[key]:{fmt.lstrip('+')}} / {b[key]:{fmt.lstrip('+')}} ({a[key] - b[key]:{fmt}})"

    for a, b in zip(rows, partners):
        lines.append(f"| {a['run']} | {b['run']} | {pair(a, b, 'updates')} | {pair(a, b, 'test')} | "
                     f"{pair(a, b, 'test_own_alpha')} | {pair(a, b, 'val')} |")
    lines += ["", "| run minus its pair | n | mean | sd | min | max | 95% interval of the mean | higher / lower |",
              "|---|---:|---:|---:|---:|---:|---|---|"]
    for key, heading, fmt in PAIRED:
        d = comparison["figures"].get(key)
        if d is not None:
            lines.append(_described(heading, d, fmt, "pairs") + f" {d['higher']} / {d['lower']} |")
    return "\n".join(lines) + "\n"


def _described(heading: str, d: dict, fmt: str, what: str) -> str:
    """One row of a table of :func:`describe` results (``fmt`` for the values, e.g. ``+.2f``; the
    standard deviation without the sign)."""
    interval = f"[{d['low']:{fmt}}, {d['high']:{fmt}}]" if d["low"] is not None else f"(needs two {what})"
    sd = "" if d["sd"] is None else f"{d['sd']:{fmt.lstrip('+')}}"
    return (f"| {heading} | {d['n']} | {d['mean']:{fmt}} | {sd} | {d['min']:{fmt}} | "
            f"{d['max']:{fmt}} | {interval} |")


def _f(value, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def markdown(rows: list[dict], summary: dict) -> str:
    lines = ["| run | seeds (train / data) | updates / training min (sittings; ended by) | "
             "chosen: weights, beam, alpha | val BLEU lc Moses | **test2016 BLEU lc Moses** (95% interval) | "
             "sacreBLEU | chrF2 | length | "
             "at own alpha (length) | run-ons / loops |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        interval = r["interval"]
        around = f" [{interval['low']:.2f}, {interval['high']:.2f}]" if interval else ""
        own = (f"{_f(r['test_own_alpha'])} ({_f(r['test_own_alpha_length'], 3)}) at {r['own_alpha']:g}"
               if r["test_own_alpha"] is not None else "")
        minutes = f"{r['train_minutes']:.1f}" if r["train_minutes"] is not None else "?"
        how = f" ({r['sittings'] or '?'}; {r['ended_by']})"
        lines.append(f"| {r['run']} | {r['train_seed']} / {r['data_seed']} | {r['updates']:,} / {minutes}{how} | "
                     f"{r['weights']}, {r['beam']}, {r['alpha']:g} | {_f(r['val'])} | **{_f(r['test'])}**{around} | "
                     f"{_f(r['test_sacrebleu'])} | {_f(r['test_chrf'])} | {_f(r['test_length'], 3)} | {own} | "
                     f"{r['run_ons']} / {r['loops']} |")
    lines += ["", "| over the runs | n | mean | sd | min | max | 95% interval of the mean |",
              "|---|---:|---:|---:|---:|---:|---|"]
    lines += [_described(heading, summary["figures"][key], ".2f", "runs")
              for key, heading in FIGURES if key in summary["figures"]]
    goals = summary["goals"]
    test = summary["figures"]["test"]
    lines += ["", f"{goals['runs_reaching_bleu']} of {summary['runs']} runs reach {goals['bleu_lc_moses']:g} "
              f"test2016 BLEU lc Moses, {goals['runs_reaching_sacrebleu']} of {summary['runs']} reach "
              f"{goals['sacrebleu']:g} sacreBLEU."]
    if test["low"] is not None:
        where = ("inside" if test["low"] <= goals["bleu_lc_moses"] <= test["high"]
                 else "above" if goals["bleu_lc_moses"] > test["high"] else "below")
        lines[-1] += (f" The goal {goals['bleu_lc_moses']:g} lies {where} the 95% interval of the mean "
                      f"[{test['low']:.2f}, {test['high']:.2f}]"
                      + (f", {(goals['bleu_lc_moses'] - test['mean']) / test['sd']:.1f} standard deviations of "
                         f"one run from the mean." if test["sd"] else "."))
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Summarise several Multi30k reproduction runs (tools/reproduce_multi30k.sh): one row per "
                    "run, and mean, sd and a 95% interval of the mean of their test2016 figures.")
    ap.add_argument("runs", nargs="+", type=Path, help="run directories, each with report/results.json")
    ap.add_argument("--goal-bleu", type=float, default=PUBLISHED_BLEU,
                    help="test2016 BLEU (lowercased, Moses-tokenized) to count runs against (default %(default)s, "
                         "Wu et al.'s Transformer-Tiny)")
    ap.add_argument("--goal-sacrebleu", type=float, default=38.0,
                    help="test2016 sacreBLEU to count runs against (default %(default)s)")
    ap.add_argument("--paired-with", nargs="+", type=Path, default=None, metavar="RUN",
                    help="one run directory per run above, in the same order (the same seeds under another "
                         "setting, or the run before it was continued): adds the differences, run minus its "
                         "pair, with their mean, sd and 95%% interval")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows and the summary to this file")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    seen, comparison = set(), None

    def read_once(run: Path) -> dict:
        if run.resolve() in seen:
            raise SummaryError(f"{run} is given twice: each run counts once")
        seen.add(run.resolve())
        return read_run(run)

    try:
        rows = [read_once(run) for run in args.runs]
        partners = [read_once(run) for run in args.paired_with or []]
        if args.paired_with is not None:
            comparison = paired(rows, partners)
    except SummaryError as e:
        print(f"multi30k_summary: error: {e}", file=sys.stderr)
        return 2
    summary = summarise(rows, args.goal_bleu, args.goal_sacrebleu)
    sys.stdout.write(markdown(rows, summary))
    payload = {"rows": rows, "summary": summary}
    if comparison is not None:
        sys.stdout.write("\n" + paired_markdown(rows, partners, comparison))
        payload.update(paired_with=partners, paired=comparison)
    if args.json:
        args.json.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
