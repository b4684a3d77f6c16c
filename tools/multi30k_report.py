"""Evaluate a finished (or stopped) Multi30k run and write its report.

Called by ``tools/reproduce_multi30k.sh`` after training; usable on any run directory
written by ``tft train`` with ``train.eval_bleu_every_steps`` set::

    python tools/multi30k_report.py --run runs/multi30k_tiny

Weight sets: the final weights (``model.keras``; for a run interrupted before it wrote one,
its newest checkpoint, saved as ``last-checkpoint.keras``), the best evaluation by
``train.best_metric`` (``best/``), and the average of the last N checkpoints for each N
of ``--average`` (default 5 and 10; written once as ``averaged-N.keras``; an N larger
than the checkpoints the run kept, ``train.keep_checkpoints``, is left out with a
message). Each is
translated on val with each ``--beams`` size and each length penalty of ``--alphas``; the
weight set, beam and alpha that go into the headline are chosen by **val** lowercased
Moses-tokenized BLEU only (test2016 plays no part in any choice). test2016 is then
translated with every weight set and beam at the chosen alpha and at the run's own
``decode.alpha``. Hypotheses and scores are cached under ``<run>/report/`` so a rerun only
does what is missing.

Why alpha is chosen here: the paper's 0.6 was chosen on WMT's development set. On
Multi30k, beam search with alpha 0.6 writes translations about 6% shorter than the val
references (brevity penalty 0.94), so a larger alpha is worth trying; the choice among
``--alphas`` is made on val like every other choice. A grid whose largest alpha wins on
val has not found val's best: while that is so, the grid grows by ``--alpha-step`` (0.4)
up to ``--max-alpha`` (3.0), each new alpha decoded on val with every weight set and beam.

Multi30k's splits differ in length (German words per English word: val 0.951, test2016
0.918), so a length fitted on val leaves test2016's outputs about 3.5% longer than its
references; the report states the shift from the data next to the choice.

``--baseline FILE`` (another system's test2016 output, e.g. a kept one under
``tools/bench/outputs/multi30k/``) adds a paired bootstrap comparison of the chosen row with
it (difference, 95% interval, p-value on lowercased Moses-tokenized BLEU and sacreBLEU).

The report also says how the run was trained: its sittings (``sittings.jsonl``: each train
call's span, updates, speed and host) and what ended training (early stopping, the time
budget, the update limit, a signal).

Writes ``<run>/report/report.md``, ``results.json`` and ``learning-curve.png``
(validation BLEU and loss against updates and against wall-clock minutes), and prints a
one-line summary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from tf_transformer.config.schema import STOP_RULES  # noqa: E402  (no TensorFlow: 25 ms)

PUBLISHED = {"name": "Transformer-Tiny (Wu et al., ACL 2021)", "bleu_lc_moses": 41.02}
METRIC_KEYS = ("sacrebleu", "bleu_lc_moses", "bleu_lc", "chrf")


def say(msg: str) -> None:
    print(f"report: {msg}", file=sys.stderr, flush=True)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True, help="run directory written by tft train")
    ap.add_argument("--beams", default="4,5", help="beam sizes to decode with (default 4,5)")
    ap.add_argument("--alphas", default=None,
                    help="length penalties to choose from on val, comma-separated (default: the run's "
                         "decode.alpha, 1.0 and 1.4)")
    ap.add_argument("--alpha-step", type=float, default=0.4,
                    help="while val's best row has the largest alpha tried, also try that alpha plus this "
                         "(default 0.4; 0 keeps the grid as given)")
    ap.add_argument("--max-alpha", type=float, default=3.0,
                    help="the grid grows no further than this (default 3.0)")
    ap.add_argument("--average", default="5,10", metavar="N,N,...",
                    help="weight sets averaging the last N checkpoints, comma-separated (default 5,10); "
                         "an N beyond the checkpoints the run kept is left out")
    ap.add_argument("--limit", type=int, default=None,
                    help="only the first N sentences of each split (a quick check; not a result)")
    ap.add_argument("--stop-rule", choices=STOP_RULES, default=None,
                    help="beam search's stop rule (default: the run's decode.stop_rule)")
    ap.add_argument("--out", default=None,
                    help="where report.md, results.json and the curve go (default: RUN/report); decoded "
                         "outputs are cached in RUN/report/outputs either way")
    ap.add_argument("--minutes-left", type=float, default=None, metavar="BUDGET",
                    help="print what is left of a whole run's training budget of BUDGET minutes (BUDGET "
                         "minus the run's training clock at its last evaluation; 0 once early stopping "
                         "ended it) and exit; "
                         "tools/reproduce_multi30k.sh uses it so a resumed run gets only what its earlier "
                         "sittings left")
    ap.add_argument("--train-seconds", type=float, default=None,
                    help="wall-clock seconds of the training command (recorded in the report)")
    ap.add_argument("--baseline", default=None, metavar="FILE",
                    help="test2016 translations by another system, one per line (gzip when it ends in .gz; "
                         "e.g. a kept output under tools/bench/outputs/multi30k/): the chosen row is compared "
                         "with it by paired bootstrap resampling (1,000 resamples of the sentences) on "
                         "lowercased Moses-tokenized BLEU and sacreBLEU, in the report and the summary line")
    args = ap.parse_args(argv)
    for option, value in (("--alpha-step", args.alpha_step), ("--max-alpha", args.max_alpha)):
        if not value >= 0:  # also NaN
            ap.error(f"{option} {value:g}: expected a number >= 0")
    return args


def run_on_count(sources, hypotheses) -> int:
    """Outputs with more than twice as many words as their source (degenerate run-ons)."""
    from tf_transformer.evaluation.degenerate import run_on_lines

    return len(run_on_lines(sources, hypotheses))


def minutes_left(run, budget: float) -> float:
    """``budget`` minus the run's training minutes so far: its clock at its last evaluation
    (``eval.jsonl``, summed over every sitting; 0 for a run not started). Training after that
    evaluation (at most one evaluation interval) is not counted. 0 for a run whose last sitting
    ended by early stopping: it is finished, and another ``tft train`` would only write its
    final model again (so the report would decode that model again) and record an empty sitting."""
    from tf_transformer.io import read_eval_log
    from tf_transformer.training.sittings import read_sittings

    held = read_sittings(run)
    if held and held[-1].get("ended_by") == "early_stopping":
        return 0.0
    rows = read_eval_log(Path(run) / "eval.jsonl")
    return float(budget) - (float(rows[-1].get("minutes", 0.0)) if rows else 0.0)


def loop_count(hypotheses) -> int:
    """Outputs with a repetition loop (:func:`tf_transformer.evaluation.degenerate.has_loop`)."""
    from tf_transformer.evaluation.degenerate import loop_lines

    return len(loop_lines(hypotheses))


def fingerprint(path: Path) -> str:
    """sha256 of a file (the cache key of everything decoded with it)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _built_from(out: Path, sources: list) -> bool:
    """Whether ``out`` exists and was built from exactly ``sources`` (recorded beside it)."""
    record = out.with_name(out.name + ".sources.json")
    return out.is_file() and record.is_file() and json.loads(record.read_text()) == sources


def _record_sources(out: Path, sources: list) -> None:
    record = out.with_name(out.name + ".sources.json")
    tmp = record.with_name(".partial-" + record.name)
    tmp.write_text(json.dumps(sources))
    os.replace(tmp, record)


def weight_sets(run: Path, cfg, averages=(5, 10)):
    """``{name: path of a .keras model}``. The best and averaged models are rebuilt whenever
    the files they come from changed (a resumed run has a new best and new last checkpoints)."""
    import keras

    from tf_transformer.model import Transformer
    from tf_transformer.training.averaging import average_run
    from tf_transformer.training.callbacks import list_checkpoints

    def from_weights(weights: Path, out: Path) -> Path:
        sources = [weights.name, fingerprint(weights)]
        if not _built_from(out, sources):
            model = Transformer.from_config_section(cfg.model)
            model.build()
            model.load_weights(str(weights))
            model.save(str(out))
            _record_sources(out, sources)
        return out

    sets = {}
    checkpoints = list_checkpoints(run / "checkpoints")
    if (run / "model.keras").is_file():
        sets["final"] = run / "model.keras"
    elif checkpoints:
        # an interrupted run writes no model.keras: its newest checkpoint stands in for it
        step, path = checkpoints[-1]
        say(f"{run / 'model.keras'} does not exist (the training was interrupted): "
            f"using the last checkpoint, {path.name}, as the final weights")
        sets[f"last checkpoint (update {step})"] = from_weights(path, run / "last-checkpoint.keras")
    best = sorted((run / "best").glob("best-*.weights.h5"), key=lambda p: int(p.name.split("-")[1].split(".")[0]))
    if best:
        # the evaluation log's best_step (with train.keep_best > 1 the newest file need not be the best)
        from tf_transformer.io import read_eval_log

        rows = read_eval_log(run / "eval.jsonl") if (run / "eval.jsonl").is_file() else []
        step = rows[-1].get("best_step") if rows else None
        chosen = next((p for p in best if p.name == f"best-{step}.weights.h5"), best[-1])
        sets[f"best ({chosen.name.split('.')[0]})"] = from_weights(chosen, run / "best.keras")
    for n in averages:
        if len(checkpoints) < n:
            say(f"average of last {n} left out: {run / 'checkpoints'} holds {len(checkpoints)} "
                f"checkpoint(s) (train.keep_checkpoints={cfg.train.keep_checkpoints})")
        else:
            out = run / f"averaged-{n}.keras"
            sources = [path.name for _, path in checkpoints[-n:]]
            if not _built_from(out, sources):
                say(average_run(run, last=n, output=out)["summary"])
                _record_sources(out, sources)
            sets[f"average of last {n}"] = out
    del keras
    return sets


DEFAULT_EXTRA_ALPHAS = (1.0, 1.4)


def _parse_list(text, option: str, convert, least, what: str, example: str) -> list:
    """A comma-separated option as a list without repeats, each item ``convert``-ed and >= ``least``."""
    try:
        values = [convert(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"report: {option} {text!r}: expected comma-separated {what}, e.g. {example}") from None
    if not values or any(v < least for v in values):
        raise SystemExit(f"report: {option} {text!r}: expected one or more {what} >= {least}")
    return list(dict.fromkeys(values))


def parse_counts(text) -> list[int]:
    """``--average`` as a list of checkpoint counts without repeats."""
    return _parse_list(text, "--average", int, 2, "whole numbers", "5,10")


def parse_alphas(text, run_alpha: float) -> list[float]:
    """``--alphas`` as a list without repeats (default: the run's alpha, 1.0 and 1.4)."""
    if text is None:
        return list(dict.fromkeys([run_alpha, *DEFAULT_EXTRA_ALPHAS]))
    return _parse_list(text, "--alphas", float, 0, "numbers", "0.6,1.0,1.4")


def grow_alphas(results: dict, beams, alphas: list[float], step: float, cap: float, decode_val) -> list[float]:
    """``alphas`` grown upward while val's best row (:func:`choose_on_val`) has the largest
    alpha tried: each round adds that alpha + ``step`` (not beyond ``cap``) and calls
    ``decode_val(alpha)``, which must add every weight set's val rows at ``alpha`` to
    ``results``. A tie goes to the smaller alpha, so a flat top stops the growth. Returns the
    grid (a new list, in decoding order)."""
    alphas = list(alphas)
    while step > 0:
        top = max(alphas)
        nxt = round(top + step, 6)
        if choose_on_val(results, beams, alphas)[2] != top or nxt > cap + 1e-9:
            break
        say(f"val's best row has alpha {top:g}, the largest tried: trying alpha {nxt:g} too")
        alphas.append(nxt)
        decode_val(nxt)
    return alphas


def decode_and_score(run: Path, name: str, model_path: Path, tokenizer, splits, jobs, cfg):
    """``{(split, beam, alpha): {"scores": {...}, "run_ons": n, "seconds": s}}`` for each
    ``(split, beam, alpha)`` of ``jobs``; cached on disk."""
    import keras

    from tf_transformer.decoding.translator import Translator
    from tf_transformer.evaluation.bleu import evaluate_translations

    cache_dir = run / "report" / "outputs"
    cache_dir.mkdir(parents=True, exist_ok=True)
    slug = name.split(" (")[0].replace(" ", "-")
    results, model = {}, None
    weights = fingerprint(model_path)
    recaser = None if tokenizer.recaser is None else hashlib.sha256(tokenizer.recaser.to_bytes()).hexdigest()[:16]
    inputs_of = {split: hashlib.sha256("\n".join(splits[split][0]).encode("utf-8")).hexdigest()
                 for split in dict.fromkeys(split for split, _, _ in jobs)}
    for split, beam, alpha in jobs:
        sources, references = splits[split]
        inputs = inputs_of[split]
        rule = cfg.decode.stop_rule
        suffix = ".beam-finished" if rule == "beam_finished" and beam > 1 else ""
        hyp_path = cache_dir / f"{slug}.{split}.beam{beam}.alpha{alpha:g}{suffix}.de"
        meta_path = hyp_path.with_suffix(".json")
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        meta.setdefault("stop_rule", "bound")  # outputs cached before there was a choice
        # what the cached outputs depend on: the weights, the sentences (--limit), the decoding
        key = {"weights": weights, "inputs": inputs, "alpha": alpha,
               "max_extra_length": cfg.decode.max_extra_length, "stop_rule": rule if beam > 1 else "bound",
               "recaser": recaser}
        if any(meta.get(k) != v for k, v in key.items()):  # not decoded yet, or otherwise: decode again
            if model is None:
                model = keras.saving.load_model(str(model_path), compile=False)
            translator = Translator(model, tokenizer, beam_size=beam, alpha=alpha,
                                    max_extra_length=cfg.decode.max_extra_length,
                                    batch_size=cfg.decode.batch_size, stop_rule=rule)
            start = time.time()
            hyps, _, _ = translator.translate(sources)
            seconds = time.time() - start
            hyp_path.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
            scores = evaluate_translations(hyps, references, lang=cfg.data.target_lang)
            meta = {"scores": {k: round(scores[k].score, 2) for k in scores},
                    "signatures": {k: scores[k].signature for k in scores},
                    "details": {k: scores[k].detail for k in scores},
                    "run_ons": run_on_count(sources, hyps), "loops": loop_count(hyps),
                    "seconds": round(seconds, 1),
                    "sentences": len(sources), **key}
            tmp = meta_path.with_name(".partial-" + meta_path.name)
            tmp.write_text(json.dumps(meta, indent=1))
            os.replace(tmp, meta_path)
            say(f"{name}, {split}, beam {beam}, alpha {alpha:g}: sacreBLEU {meta['scores']['sacrebleu']:.2f}, "
                f"BLEU lc Moses {meta['scores']['bleu_lc_moses']:.2f} ({seconds:.0f} s)")
        if "loops" not in meta:  # cached before loops were counted
            meta["loops"] = loop_count(hyp_path.read_text(encoding="utf-8").splitlines())
        meta["path"] = str(hyp_path)
        results[(split, beam, alpha)] = meta
    return results


def length_ratio(meta: dict) -> str:
    """The hypothesis/reference length ratio of the lowercased Moses-tokenized BLEU, as text."""
    match = re.search(r"ratio=([0-9.]+)", meta.get("details", {}).get("bleu_lc_moses", ""))
    return match.group(1) if match else ""


def words_per_source_word(sources, references) -> float:
    """Reference words per source word of a split (whitespace-split)."""
    source_words = sum(len(s.split()) for s in sources)
    return sum(len(r.split()) for r in references) / max(source_words, 1)


def split_length_sentence(splits: dict) -> str:
    """How the splits' own length ratios carry a length chosen on val over to test2016.
    ``splits``: ``{name: (sources, references)}`` with ``val`` and ``test2016``."""
    val, test = (words_per_source_word(*splits[name]) for name in ("val", "test2016"))
    shift = val / test - 1.0
    way = "longer" if shift > 0 else "shorter"
    return (f" The splits differ in length: target words per source word are {val:.3f} in val and {test:.3f} in "
            f"test2016, so an alpha that fits val's outputs to its references' length leaves test2016's about "
            f"{abs(100 * shift):.1f}% {way} than its references (compare the length ratios below).")


def choose_on_val(results: dict, beams, alphas) -> tuple[str, int, float]:
    """The ``(weight set, beam, alpha)`` whose **val** lowercased Moses-tokenized BLEU is
    highest; test2016 scores play no part. A tie goes to the first in ``results``' order,
    then to the first of ``beams``, then to the first of ``alphas``.
    ``results``: ``{name: {(split, beam, alpha): {"scores": {...}}}}``."""
    candidates = [(name, beam, alpha) for name in results for beam in beams for alpha in alphas]
    return max(candidates, key=lambda c: results[c[0]][("val", c[1], c[2])]["scores"]["bleu_lc_moses"])


def chosen_statistics(test: dict, references, lang: str, baseline=None) -> tuple[dict, dict | None]:
    """The chosen row's 95% bootstrap intervals (1,000 resamples of the test sentences) of
    lowercased Moses-tokenized BLEU and sacreBLEU and, given ``baseline`` (another system's
    translations of the same sentences), its paired comparison with it on the same resamples:
    ``(intervals, comparisons or None)``. One scorer prepares the references and the chosen
    output once for both."""
    from tf_transformer.evaluation.significance import Scorer

    hyps = Path(test["path"]).read_text(encoding="utf-8").splitlines()
    scorer = Scorer(references, lang, metrics=["bleu_lc_moses", "sacrebleu"])
    mine = scorer.system(hyps)
    comparisons = scorer.compare(scorer.system(baseline), mine) if baseline else None
    return scorer.intervals(mine), comparisons


def interval_sentence(intervals: dict) -> str:
    """The intervals in words, with where the published figure falls."""
    lc, sacre = intervals["bleu_lc_moses"], intervals["sacrebleu"]
    published = PUBLISHED["bleu_lc_moses"]
    where = "inside" if lc.low <= published <= lc.high else "outside"
    return (f" The test set's own sampling error (95% bootstrap intervals, {lc.samples:,} resamples of its "
            f"sentences, seed {lc.seed}): lowercased Moses-tokenized BLEU [{lc.low:.2f}, {lc.high:.2f}], "
            f"sacreBLEU [{sacre.low:.2f}, {sacre.high:.2f}]; the published {published} is {where} the first.")


def read_baseline(path: str, sentences: int) -> list[str]:
    """The --baseline file's lines, checked to translate test2016 line by line (before any
    decoding, so a wrong file costs nothing)."""
    from tf_transformer.cli._common import read_text_lines
    from tf_transformer.errors import UserError

    lines = [line.strip() for line in read_text_lines(path, "--baseline", "multi30k_report")]
    if len(lines) != sentences:
        raise UserError(f"--baseline {path} has {len(lines):,} lines but test2016 has {sentences:,} sentences; "
                        "it must translate test2016, line by line")
    return lines


def baseline_sentence(path: str, comparisons: dict) -> str:
    """The paired comparison in words."""
    lc, sacre = comparisons["bleu_lc_moses"], comparisons["sacrebleu"]
    return (f" Against the baseline `{path}` (paired bootstrap, {lc.samples:,} resamples, seed {lc.seed}; "
            f"difference = this run - baseline): lowercased Moses-tokenized BLEU {lc.system:.2f} vs "
            f"{lc.baseline:.2f}, {lc.delta:+.2f} [{lc.low:+.2f}, {lc.high:+.2f}], p {lc.p_value:.3f} "
            f"({lc.verdict}); sacreBLEU {sacre.system:.2f} vs {sacre.baseline:.2f}, {sacre.delta:+.2f} "
            f"[{sacre.low:+.2f}, {sacre.high:+.2f}], p {sacre.p_value:.3f} ({sacre.verdict}).")


def plot_curve(rows, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    minutes = [r["minutes"] for r in rows]
    bleu = [r["val_bleu"] for r in rows]
    loss = [r.get("val_loss") for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for ax, x, label in ((axes[0], steps, "updates"), (axes[1], minutes, "wall-clock minutes")):
        ax.plot(x, bleu, "o-", color="tab:blue", ms=3, label="val BLEU (greedy, sacreBLEU)")
        ax.set_xlabel(label)
        ax.set_ylabel("val BLEU", color="tab:blue")
        ax.grid(alpha=0.3)
        if any(v is not None for v in loss):
            twin = ax.twinx()
            twin.plot(x, loss, "s--", color="tab:red", ms=3, label="val loss")
            twin.set_ylabel("val loss (label-smoothed, entropy removed)", color="tab:red")
    best = max(range(len(rows)), key=lambda i: bleu[i])
    axes[0].axvline(steps[best], color="grey", ls=":", lw=1)
    axes[0].set_title(f"best val BLEU {bleu[best]:.2f} at update {steps[best]}")
    axes[1].set_title(f"{steps[-1]} updates in {minutes[-1]:.0f} min")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    from tf_transformer.errors import UserError

    args = parse_args(argv)
    try:
        return write_report(args)
    except UserError as e:  # a wrong file or setting: its message, no traceback
        say(f"error: {e}")
        return 2


def write_report(args) -> int:
    if args.minutes_left is not None:
        print(f"{minutes_left(args.run, args.minutes_left):.3f}")
        return 0
    from tf_transformer.decoding import decoding_environment

    decoding_environment()  # this process only decodes: as tft translate/evaluate do (same outputs)
    from tf_transformer.config import load_config
    from tf_transformer.data import read_parallel_text
    from tf_transformer.data.tokenizer import Tokenizer
    from tf_transformer.errors import UserError
    from tf_transformer.evaluation.bleu import references_for
    from tf_transformer.io import read_eval_log
    from tf_transformer.training.sittings import describe_sittings, read_sittings

    run = Path(args.run)
    if not (run / "config.yaml").is_file():
        raise UserError(f"--run {run}: {run / 'config.yaml'} does not exist; expected a run directory written "
                        "by tft train")
    cfg = load_config(str(run / "config.yaml"), require_vocab=True)
    if args.stop_rule is not None:
        cfg.decode.stop_rule = args.stop_rule
    rows = read_eval_log(run / "eval.jsonl")
    if not rows:
        say(f"{run / 'eval.jsonl'} has no evaluations: was train.eval_bleu_every_steps set?")
        return 2
    out_dir = Path(args.out) if args.out else run / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    beams = [int(b) for b in args.beams.split(",")]
    alphas = parse_alphas(args.alphas, cfg.decode.alpha)
    averages = parse_counts(args.average)
    tokenizer = Tokenizer(run / "vocab.model")
    if tokenizer.lowercase and tokenizer.recaser is None:
        from tf_transformer.data.recase import Recaser

        say("the run's lowercasing vocabulary carries no recaser (built before vocabularies did): "
            "fitting one on the training targets, as tft build-vocab now does")
        tokenizer.recaser = Recaser.fit(read_parallel_text(cfg.data, "train")[1])
    # references as the model's outputs are scored against them (lowercased for a lowercasing
    # vocabulary without a recaser), once for every decode
    splits = {split: (sources, references_for(tokenizer, references))
              for split, (sources, references) in (("val", read_parallel_text(cfg.data, "valid")),
                                                   ("test2016", read_parallel_text(cfg.data, "test")))}
    baseline = read_baseline(args.baseline, len(splits["test2016"][0])) if args.baseline else None
    if args.limit:
        splits = {k: (s[: args.limit], r[: args.limit]) for k, (s, r) in splits.items()}
        baseline = baseline[: args.limit] if baseline else None
    started = time.time()
    sets = weight_sets(run, cfg, averages)
    # 1. the choice, on val only
    results = {name: {} for name in sets}

    def decode_val(*val_alphas):
        jobs = [("val", beam, alpha) for beam in beams for alpha in val_alphas]
        for name, path in sets.items():
            results[name].update(decode_and_score(run, name, path, tokenizer, splits, jobs, cfg))

    decode_val(*alphas)
    given = list(alphas)
    alphas = grow_alphas(results, beams, alphas, args.alpha_step, args.max_alpha, decode_val)
    chosen = choose_on_val(results, beams, alphas)
    # 2. test2016 at the chosen alpha (and at the run's own, for comparison)
    test_alphas = [a for a in alphas if a in (chosen[2], cfg.decode.alpha)]
    test_jobs = [("test2016", beam, alpha) for alpha in test_alphas for beam in beams]
    for name, path in sets.items():
        results[name].update(decode_and_score(run, name, path, tokenizer, splits, test_jobs, cfg))
    eval_seconds = time.time() - started
    plot_curve(rows, out_dir / "learning-curve.png")

    test = results[chosen[0]][("test2016", chosen[1], chosen[2])]
    intervals, against = chosen_statistics(test, splits["test2016"][1], cfg.data.target_lang, baseline)
    last = rows[-1]
    decode_minutes = sum(r.get("eval_seconds", 0.0) for r in rows) / 60.0
    train_minutes = last["minutes"]
    best_row = max(rows, key=lambda r: r["val_bleu"])

    lines = [f"# Multi30k En->De test2016: {cfg.name} ({run})", ""]
    lines.append(f"{last['step']} updates in {train_minutes:.1f} wall-clock minutes of training "
                 f"({last['step'] / (train_minutes * 60):.2f} updates/s), of which {decode_minutes:.1f} min were "
                 f"greedy validation BLEU every {cfg.train.eval_bleu_every_steps} updates; best val BLEU (greedy) "
                 f"{best_row['val_bleu']:.2f} at update {best_row['step']}. Evaluation below: "
                 f"{eval_seconds / 60:.1f} min (cached parts not counted)."
                 + (f" Training command: {args.train_seconds / 60:.1f} min." if args.train_seconds else ""))
    sittings = read_sittings(run)
    lines += ["", describe_sittings(sittings)]
    lines += ["", f"**Chosen on val** (lowercased Moses-tokenized BLEU): {chosen[0]}, beam {chosen[1]}, "
              f"alpha {chosen[2]:g} (from {', '.join(f'{a:g}' for a in alphas)}"
              + (f"; the grid grew past {max(given):g} while val's best had its largest alpha"
                 if len(alphas) > len(given) else "")
              + f"; beam search stop rule "
              f"`{cfg.decode.stop_rule}`). "
              f"test2016: sacreBLEU **{test['scores']['sacrebleu']:.2f}**, lowercased "
              f"Moses-tokenized BLEU **{test['scores']['bleu_lc_moses']:.2f}** (published "
              f"{PUBLISHED['name']}: {PUBLISHED['bleu_lc_moses']}), chrF2 {test['scores']['chrf']:.2f}."
              + interval_sentence(intervals) + split_length_sentence(splits)
              + (baseline_sentence(args.baseline, against) if against else ""), ""]
    lines += ["| weights | beam | alpha | val sacreBLEU | val BLEU lc Moses | val length ratio | "
              "test sacreBLEU | test BLEU lc Moses | test BLEU lc 13a | test chrF2 | test length ratio | "
              "test run-ons (>2x source words) | test loops |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in results:
        for beam in beams:
            for alpha in alphas:
                v, t = results[name][("val", beam, alpha)], results[name].get(("test2016", beam, alpha))
                mark = " (chosen)" if (name, beam, alpha) == chosen else ""
                cells = [f"{name}{mark}", str(beam), f"{alpha:g}", f"{v['scores']['sacrebleu']:.2f}",
                         f"{v['scores']['bleu_lc_moses']:.2f}", length_ratio(v)]
                if t is None:  # test2016 is decoded at the chosen alpha and the run's own only
                    cells += ["", "", "", "", "", "", ""]
                else:
                    cells += [f"{t['scores'][k]:.2f}" for k in ("sacrebleu", "bleu_lc_moses", "bleu_lc", "chrf")]
                    cells += [length_ratio(t), str(t["run_ons"]), str(t["loops"])]
                lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Length ratio: hypothesis / reference length in the lowercased Moses-tokenized BLEU "
              "(below 1, BLEU's brevity penalty applies). test2016 is translated at the chosen alpha and "
              "at the run's own decode.alpha only. Run-ons: outputs with over twice their source's words "
              "(a correct translation of a very short source can count); loops: outputs that repeat a word "
              "or two-word group three times in a row or a group of 3-6 words twice in a row (none of "
              "Multi30k's 31,014 German sentences has one)."]
    sig = test["signatures"]
    lines += ["", "Signatures: " + "; ".join(f"`{sig[k]}`" for k in ("sacrebleu", "bleu_lc_moses", "chrf")), "",
              "![learning curve](learning-curve.png)", "",
              "| update | minutes | val BLEU (greedy) | val loss | val perplexity |", "|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['step']} | {r['minutes']:.1f} | {r['val_bleu']:.2f} | "
                     f"{r.get('val_loss', float('nan')):.3f} | {r.get('val_perplexity', float('nan')):.2f} |")
    (out_dir / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    payload = {"run": str(run), "updates": last["step"], "train_minutes": train_minutes, "chosen": list(chosen),
               "sittings": sittings, "ended_by": sittings[-1].get("ended_by") if sittings else None,
               "alphas": alphas, "stop_rule": cfg.decode.stop_rule,
               "chosen_test2016_intervals": {k: i.as_dict() for k, i in intervals.items()},
               "baseline": ({"path": args.baseline, "comparisons": {k: c.as_dict() for k, c in against.items()}}
                            if against else None),
               "results": {n: {f"{s}/beam{b}/alpha{a:g}": m for (s, b, a), m in r.items()}
                           for n, r in results.items()}, "evaluations": rows}
    (out_dir / "results.json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    print(f"report: {chosen[0]}, beam {chosen[1]}, alpha {chosen[2]:g} (chosen on val): test2016 sacreBLEU "
          f"{test['scores']['sacrebleu']:.2f}, BLEU lc Moses {test['scores']['bleu_lc_moses']:.2f}"
          + (f" ({against['bleu_lc_moses'].delta:+.2f} against the baseline, p {against['bleu_lc_moses'].p_value:.3f})"
             if against else "") + "; wrote "
          f"{out_dir / 'report.md'}, {out_dir / 'learning-curve.png'}, {out_dir / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
