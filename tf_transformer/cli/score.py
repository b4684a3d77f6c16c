"""``tft score``: score translation files against a reference, with bootstrap 95% intervals
and, given a baseline, a paired significance test. No model, no TensorFlow."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

from tf_transformer.errors import UserError

EPILOG = """\
Every metric of tft evaluate (tft evaluate --help lists them) on each HYPOTHESES file, and
its degenerate outputs (repetition loops; with --source, outputs over twice their source's
length), each metric with a 95% interval from bootstrap resampling of the test sentences
(Koehn 2004): a test set is a sample, and on 1,000 sentences a BLEU of 40 is good to about
+-1.6. With --baseline, each file is also compared with the baseline on the same resampled
test sets (paired): the difference, its 95% interval, the share of resamples where the file
scores higher, and a two-sided p-value for "no difference". A note says when a file looks
tokenized or has no capital letter: sacreBLEU and chrF2 are then not comparable with
published figures (BLEU lowercased, Moses tok, is).

examples:
  tft score --reference data/multi30k/test2016.de.gz out.de
  tft score --reference data/multi30k/test2016.de.gz --baseline run6.de run7.de run8.de
  tft score --reference test.de out.de --bootstrap 0 --json scores.json   # scores only
"""

_LANG = re.compile(r"\.([a-z]{2,3})(?:\.gz)?$")
#: File-name suffixes that name a format, not a language (``out.txt`` is not in a language "txt").
_NOT_LANGUAGES = {"txt", "gz", "out", "hyp", "ref", "src", "tgt", "trg", "tok", "bpe", "spm", "raw", "log", "csv",
                  "tsv", "xml", "sgm", "md", "dat", "tmp", "bak"}


def configure(parser: argparse.ArgumentParser) -> None:
    from tf_transformer.evaluation.significance import DEFAULT_SAMPLES, DEFAULT_SEED

    parser.epilog = EPILOG
    parser.add_argument("hypotheses", nargs="+", metavar="HYPOTHESES",
                        help="translation file(s), one sentence per line, line by line with --reference (.gz read too)")
    parser.add_argument("--reference", required=True, help="reference translations, one per line (.gz read too)")
    parser.add_argument("--baseline", default=None,
                        help="translations of the same sentences by a baseline system: each HYPOTHESES file is "
                             "compared with it by paired bootstrap resampling (default: no comparison)")
    parser.add_argument("--source", default=None,
                        help="the source sentences, line by line: also count outputs longer than twice their "
                             "source (default: only repetition loops are counted)")
    parser.add_argument("--lang", default=None,
                        help="target language, for the Moses tokenizer's rules (default: the reference file's "
                             "language suffix, e.g. de for test2016.de.gz)")
    parser.add_argument("--metrics", default=None, metavar="KEY,KEY",
                        help="score only these (sacrebleu, chrf, bleu_lc, bleu_lc_moses, bleu_paper; "
                             "default: all)")
    parser.add_argument("--bootstrap", type=int, default=DEFAULT_SAMPLES, metavar="N",
                        help="bootstrap resamples for the intervals and the paired test; 0: scores only")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED,
                        help="seed of the resampling (default: 12345, sacreBLEU's)")
    parser.add_argument("--json", default=None,
                        help="also write everything as JSON to this file (default: not written)")


def language_of(reference: str, lang: str | None) -> str:
    """``lang``, else the language suffix of the reference file's name."""
    if lang:
        return lang
    found = _LANG.search(os.path.basename(reference))
    if not found or found.group(1) in _NOT_LANGUAGES:
        raise UserError(f"--reference {reference}: cannot tell the target language from the file name "
                        "(expected a suffix such as .de or .de.gz); give --lang (e.g. --lang de)")
    return found.group(1)


def run(args: argparse.Namespace) -> int:
    from tf_transformer.cli._common import check_output_file, read_text_lines, write_output_text
    from tf_transformer.evaluation.bleu import METRICS, text_notes
    from tf_transformer.evaluation.degenerate import degenerate_outputs
    from tf_transformer.evaluation.significance import Scorer, format_comparisons, format_intervals

    if not 0 <= args.seed < 2**32:
        raise UserError(f"--seed {args.seed}: must be between 0 and 2**32 - 1")
    if args.bootstrap < 0 or args.bootstrap == 1:
        raise UserError(f"--bootstrap {args.bootstrap}: give 0 (scores only) or the number of resamples (>= 2; "
                        "1000 is usual)")
    if args.baseline and args.bootstrap == 0:
        raise UserError("--baseline needs bootstrap resamples for its paired test (drop --bootstrap 0)")
    metrics = None
    if args.metrics:
        metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
        unknown = [m for m in metrics if m not in METRICS]
        if unknown or not metrics:
            raise UserError(f"--metrics {args.metrics}: unknown {', '.join(unknown) or 'empty list'}; "
                            f"known: {', '.join(METRICS)}")
    check_output_file(args.json, "--json")  # before the bootstrap: a bad path would lose the work
    lang = language_of(args.reference, args.lang)
    references = [r.strip() for r in read_text_lines(args.reference, "--reference", "score")]
    if not references:
        raise UserError(f"--reference {args.reference}: the file is empty")

    def load(path: str, flag: str) -> list[str]:
        lines = [h.strip() for h in read_text_lines(path, flag, "score")]
        if len(lines) != len(references):
            raise UserError(f"{flag} {path} has {len(lines):,} lines but --reference {args.reference} has "
                            f"{len(references):,}; they must be line by line")
        return lines

    systems = {path: load(path, "HYPOTHESES") for path in args.hypotheses}
    sources = load(args.source, "--source") if args.source else None
    baseline = load(args.baseline, "--baseline") if args.baseline else None
    keys = metrics or list(METRICS)
    head = f"# {args.reference}: {len(references):,} sentences, target language {lang}"
    if args.bootstrap:
        head += (f"; 95% intervals from {args.bootstrap:,} bootstrap resamples of the sentences "
                 f"(seed {args.seed})")
    print(head)
    payload: dict = {"reference": args.reference, "sentences": len(references), "lang": lang,
                     "bootstrap": {"samples": args.bootstrap, "seed": args.seed} if args.bootstrap else None,
                     "systems": {}}
    signatures: dict[str, str] = {}
    # each file's text (and the references') prepared once for its scores, interval and comparison
    scorer = Scorer(references, lang, samples=args.bootstrap, seed=args.seed, metrics=keys)
    base_stats = scorer.system(baseline) if baseline is not None else None
    for note in text_notes(baseline, references) if baseline is not None else []:
        print(f"note: --baseline {args.baseline}: {note}")
    for path, hyps in systems.items():
        stats = scorer.system(hyps)
        scores = {k: st.score for k, st in stats.items()}
        signatures.update({s.name: s.signature for s in scores.values()})
        entry: dict = {"scores": {k: {"name": s.name, "score": round(s.score, 4), "detail": s.detail,
                                      "signature": s.signature} for k, s in scores.items()}}
        print(f"## {path}")
        degenerate = degenerate_outputs(hyps, sources)
        entry["degenerate"] = degenerate.as_dict()
        if args.bootstrap:
            intervals = scorer.intervals(stats)
            for line in format_intervals(intervals):
                print(line)
            for k, i in intervals.items():
                entry["scores"][k]["interval"] = i.as_dict()
        else:
            width = max(len(s.name) for s in scores.values())
            for s in scores.values():
                print(f"{s.name:<{width}} {s.score:6.2f}  {s.detail}".rstrip())
        print(degenerate.line())
        notes = text_notes(hyps, references)
        for note in notes:
            print(f"note: {note}")
        entry["notes"] = notes
        if baseline is not None:
            print(f"   against the baseline {args.baseline} (paired; difference = this file - baseline):")
            comparisons = scorer.compare(base_stats, stats)
            for line in format_comparisons(comparisons):
                print("   " + line)
            for k, c in comparisons.items():
                entry["scores"][k]["against_baseline"] = c.as_dict()
        payload["systems"][path] = entry
    if baseline is not None:
        payload["baseline"] = args.baseline
    print("signatures:")
    for name, signature in signatures.items():
        print(f"  {name}: {signature}")
    if args.json:
        write_output_text(args.json, json.dumps(payload, indent=2, ensure_ascii=False) + "\n", "--json")
        print(f"tft score: wrote {args.json}", file=sys.stderr)
    return 0
