"""``tft evaluate``: translate a test set and score it with every metric, each labelled; count
degenerate outputs; optionally bootstrap intervals and a paired test against a baseline."""

from __future__ import annotations

import argparse
import json
import sys
import time

from tf_transformer.errors import UserError

METRICS_HELP = """\
metrics:
  sacreBLEU (detok, cased)   the honest number, with sacreBLEU's signature
  chrF2                      character n-gram F-score, with its signature
  BLEU lowercased (13a)      lowercased BLEU with sacreBLEU's 13a tokenizer
  BLEU lowercased (Moses tok) Moses-tokenized, lowercased (multi-bleu -lc): compare with Multi30k papers
  BLEU tok+compound (paper)  tokenized, ##AT##-##AT## compound splitting, cased (the paper's style)
then the degenerate outputs: how many are over twice their source's words, how many loop
("sehr sehr sehr"), with line numbers. --bootstrap N adds a 95% interval to every metric
(bootstrap resampling of the sentences); --baseline FILE compares with another system's
translations of the same sentences (paired bootstrap: difference, interval, p-value).
tft score does all of this for translation files, without a model.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    from tf_transformer.cli.decode import RULES, add_decode_arguments, add_mbr_arguments

    parser.epilog = METRICS_HELP + "\n" + RULES + (
        "\nexamples:\n  tft evaluate --model runs/m30k --split test      # the run's vocab.model and config.yaml\n"
        "  tft evaluate --model runs/m30k/averaged.keras --source test.en --reference test.de\n")
    add_decode_arguments(parser)
    add_mbr_arguments(parser, samples=False)
    parser.add_argument("--split", choices=("test", "valid"), default=None,
                        help="score this split of the config's data (default: test, unless --source is given)")
    parser.add_argument("--source", default=None, help="source file, one sentence per line (with --reference)")
    parser.add_argument("--reference", default=None, help="reference translations, line by line (with --source)")
    parser.add_argument("--output", default=None, help="also write the hypotheses to this file (default: not written)")
    parser.add_argument("--json", default=None,
                        help="also write the scores as JSON to this file (default: not written)")
    parser.add_argument("--bootstrap", type=int, default=0, metavar="N",
                        help="also give each score a 95%% interval from N bootstrap resamples of the sentences "
                             "(1000 is usual; tft score --help); 0: none")
    parser.add_argument("--baseline", default=None,
                        help="translations of the same sentences by a baseline system (a file): compare with it by "
                             "paired bootstrap resampling (--bootstrap resamples, 1000 if not given; default: no "
                             "comparison)")


def _read(path: str, flag: str):
    from tf_transformer.cli._common import read_text_lines

    return read_text_lines(path, flag, "evaluate")


def load_pairs(args, cfg):
    """``(sources, references, description)`` from ``--source/--reference`` or ``--split``."""
    if (args.source is None) != (args.reference is None):
        raise UserError("--source and --reference go together (or use --split)")
    if args.source is not None:
        if args.split is not None:
            raise UserError("use either --split or --source/--reference, not both")
        sources = _read(args.source, "--source")
        refs = _read(args.reference, "--reference")
        if len(sources) != len(refs):
            raise UserError(f"--source {args.source} has {len(sources)} lines but --reference {args.reference} "
                            f"has {len(refs)}; they must be parallel")
        return sources, [r.strip() for r in refs], f"{args.source} -> {args.reference}"
    from tf_transformer.config import Config
    from tf_transformer.data import read_parallel_text
    from tf_transformer.data.sources import describe

    split = args.split or "test"
    cfg = cfg or Config()
    sources, refs = read_parallel_text(cfg.data, split)
    return sources, refs, describe(cfg.data, split)


def run(args: argparse.Namespace) -> int:
    from tf_transformer.cli._common import check_output_file, write_output_text
    from tf_transformer.cli.decode import build_translator, decode_settings, settings
    from tf_transformer.decoding.translator import ProgressBar
    from tf_transformer.evaluation.bleu import (
        empty_outputs,
        evaluate_translations,
        format_scores,
        references_for,
        tokenized_outputs,
    )
    from tf_transformer.evaluation.degenerate import degenerate_outputs

    cfg, _ = decode_settings(args)
    sources, refs, what = load_pairs(args, cfg)  # before the model: data errors come fast
    if not sources:
        raise UserError(f"{what}: no sentences to evaluate")
    if args.bootstrap < 0 or args.bootstrap == 1:
        raise UserError(f"--bootstrap {args.bootstrap}: give 0 (none) or the number of resamples (>= 2; 1000 is usual)")
    baseline = None
    if args.baseline:
        baseline = [b.strip() for b in _read(args.baseline, "--baseline")]
        if len(baseline) != len(sources):
            raise UserError(f"--baseline {args.baseline} has {len(baseline):,} lines but {what} has "
                            f"{len(sources):,} sentences; it must translate the same sentences, line by line")
        args.bootstrap = args.bootstrap or 1000
    check_output_file(args.output, "--output")  # before decoding: a bad path would lose the work
    check_output_file(args.json, "--json")
    cfg, decode, translator = build_translator(args)
    bar = ProgressBar(len(sources), "evaluate", enabled=not args.quiet)
    start = time.time()
    hyps, _, stats = translator.translate(sources, progress=bar.update)
    bar.close()
    seconds = time.time() - start
    if stats.truncated:
        print(f"tft evaluate: warning: {stats.truncated} source(s) longer than the model limit of "
              f"{translator.limit} tokens were cut to it", file=sys.stderr)
    for warning in (empty_outputs(hyps, sources), tokenized_outputs(hyps)):
        if warning:
            print(f"tft evaluate: warning: {warning}", file=sys.stderr)
    if getattr(translator.tokenizer, "lowercase", False):
        if getattr(translator.tokenizer, "recaser", None) is not None:
            print("tft evaluate: the model's vocabulary lowercases (data.lowercase): its outputs were recased by "
                  "the vocabulary's recaser and are scored against the references as they are", file=sys.stderr)
        else:
            print("tft evaluate: the model's vocabulary lowercases (data.lowercase) and carries no recaser: its "
                  "outputs are lowercase, so the references are lowercased before scoring (the cased metrics "
                  "below are on lowercased text)", file=sys.stderr)
        refs = references_for(translator.tokenizer, refs)
    lang = cfg.data.target_lang if cfg else "de"
    scorer = mine = None
    if args.bootstrap:  # each side's text prepared once for the scores, the intervals and the comparison
        from tf_transformer.evaluation.significance import Scorer

        scorer = Scorer(refs, lang, samples=args.bootstrap)
        mine = scorer.system(hyps)
        scores = {k: st.score for k, st in mine.items()}
    else:
        scores = evaluate_translations(hyps, refs, lang=lang)
    degenerate = degenerate_outputs(hyps, sources)
    print(f"# {what}: {len(sources):,} sentences, {settings(decode, args, translator)}")
    for line in format_scores(scores):
        print(line)
    print(degenerate.line())
    intervals = comparisons = None
    if args.bootstrap:
        from tf_transformer.evaluation.significance import format_intervals

        intervals = scorer.intervals(mine)
        print(f"# 95% intervals from {args.bootstrap:,} bootstrap resamples of the sentences (seed "
              f"{next(iter(intervals.values())).seed})")
        for line in format_intervals(intervals):
            print(line)
    if baseline is not None:
        from tf_transformer.evaluation.significance import format_comparisons

        comparisons = scorer.compare(scorer.system(baseline), mine)
        print(f"# against the baseline {args.baseline} (paired bootstrap; difference = this model - baseline)")
        for line in format_comparisons(comparisons):
            print(line)
    wrote = []
    if args.output:
        write_output_text(args.output, "".join(h + "\n" for h in hyps), "--output")  # gzip when .gz
        wrote.append(f"hypotheses to {args.output}")
    if args.json:
        payload = {
            "data": what,
            "sentences": len(sources),
            "decode": {"beam_size": decode.beam_size, "alpha": decode.alpha,
                       "max_extra_length": decode.max_extra_length, "stop_rule": decode.stop_rule,
                       "mbr": None if getattr(translator, "utility", None) is None  # an MBRTranslator's
                       else {"candidates": translator.n_best, "utility": translator.utility}},
            "model": args.model,
            "ensemble": list(args.ensemble),
            "seconds": round(seconds, 2),
            "degenerate": degenerate.as_dict(),
            "scores": {k: {"name": s.name, "score": round(s.score, 4), "signature": s.signature}
                       for k, s in scores.items()},
        }
        for k, i in (intervals or {}).items():
            payload["scores"][k]["interval"] = i.as_dict()
        for k, c in (comparisons or {}).items():
            payload["scores"][k]["against_baseline"] = dict(c.as_dict(), file=args.baseline)
        write_output_text(args.json, json.dumps(payload, indent=2) + "\n", "--json")
        wrote.append(f"scores to {args.json}")
    where = "; wrote " + " and ".join(wrote) if wrote else ""
    print(f"tft evaluate: sacreBLEU {scores['sacrebleu'].score:.2f} on {len(sources):,} sentences of {what} "
          f"({settings(decode, args, translator)}, {seconds:.1f} s){where}", file=sys.stderr)
    return 0
