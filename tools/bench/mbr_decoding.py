"""What minimum Bayes risk decoding (``tft translate --mbr N``) gives and costs, against beam
search, on one model.

    python tools/bench/mbr_decoding.py --model runs/m30k/averaged.keras --vocab runs/m30k/vocab.model \
        [--config multi30k_tiny] [--splits valid test] [--samples 16] [--beam 5] [--alphas 0.6 1.4] \
        [--json FILE]
    python tools/bench/mbr_decoding.py --tiny --limit 32      # plumbing check, tiny copy model

Rows, each on every split of ``--splits`` (choose on valid, report test), batches of
``--batch-size``, ``--threads`` at once:

1. beam ``--beam`` at each of ``--alphas`` (the 1-best search);
2. MBR by each of ``--utilities`` (sentence chrF, sentence BLEU) among the beam's ``--beam``
   best (at the first alpha);
3. the same among ``--samples`` samples (seed 1) of each ``--sampling``: from all tokens, from
   the nucleus of 0.9, and of probability at least 0.02 (epsilon sampling);
4. the oracle of the samples from all tokens: each line's sample of the highest chrF against its own
   reference (an upper bound of what choosing among those samples could give, not a system).

Each row: sacreBLEU, lowercased Moses-tokenized BLEU, chrF2, the length ratio, seconds (decoding
and MBR choice together, the candidates decoded once for all utilities; the MBR choice alone too).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_throughput import load, machine, model_parser, parse_model_arguments, print_and_write  # noqa: E402

#: The sampled candidates: all tokens, the nucleus of 0.9, epsilon 0.02 (Freitag et al., 2023).
SAMPLING = {"all": ("all tokens", {}), "nucleus": ("nucleus 0.9", {"top_p": 0.9}),
            "epsilon": ("epsilon 0.02", {"epsilon": 0.02})}


def main(argv=None) -> int:
    p = model_parser(__doc__)
    p.add_argument("--splits", nargs="+", default=["valid", "test"], choices=["train", "valid", "test"])
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.4])
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--utilities", nargs="+", default=["chrf", "bleu"], choices=["chrf", "bleu"])
    p.add_argument("--sampling", nargs="+", default=list(SAMPLING), choices=list(SAMPLING),
                   help="which samples to choose among (default: all three)")
    p.add_argument("--json", help="write the figures here")
    args = parse_model_arguments(p, argv)

    from tf_transformer.decoding import decoding_environment

    decoding_environment()  # as tft translate decodes
    import numpy as np

    from tf_transformer.decoding.translator import Translator, set_cpu_threads
    from tf_transformer.evaluation.bleu import chrf, moses_lowercase_bleu, sacre_bleu
    from tf_transformer.evaluation.mbr import chrf_matrix, mbr_choose

    set_cpu_threads(args.threads)
    figures = {"command": sys.argv, "rows": {}}
    for split in args.splits:
        args.split = split
        model, tok, sources, refs, what = load(args)
        print(f"mbr_decoding: {len(sources)} sentences of {what}", file=sys.stderr)

        def make(**kw):
            return Translator(model, tok, batch_size=args.batch_size, workers=args.threads, max_extra_length=50,
                              stop_rule="beam_finished", **kw)

        def scored(name, outputs, seconds, choice_seconds=None):
            ratio = sum(len(o.split()) for o in outputs) / max(1, sum(len(r.split()) for r in refs))
            row = {"sacrebleu": round(sacre_bleu(outputs, refs).score, 2),
                   "bleu_lc_moses": round(moses_lowercase_bleu(outputs, refs, "de").score, 2),
                   "chrf2": round(chrf(outputs, refs).score, 2), "length_ratio": round(ratio, 3),
                   "seconds": round(seconds, 1)}
            if choice_seconds is not None:
                row["mbr_choice_seconds"] = round(choice_seconds, 1)
            figures["rows"].setdefault(name, {})[split] = row
            print(f"  {split} {name}: {row}", file=sys.stderr, flush=True)

        def mbr_row(name, translator, oracle=False):
            start = time.perf_counter()
            lists = translator.translate(sources)[0]
            decoded = time.perf_counter() - start
            for utility in args.utilities:  # the same candidates, chosen by each utility
                start = time.perf_counter()
                chosen = [c[mbr_choose(c, utility)[0]] if c else "" for c in lists]
                choice = time.perf_counter() - start
                scored(name.replace("MBR", f"MBR by {utility}"), chosen, decoded + choice, choice)
            if oracle:
                best = [c[int(np.argmax(chrf_matrix(c, [r])[:, 0]))] if c else "" for c, r in zip(lists, refs)]
                scored(f"oracle of {name} (chosen by the reference)", best, 0.0)

        for alpha in args.alphas:
            start = time.perf_counter()
            outputs = make(beam_size=args.beam, alpha=alpha).translate(sources)[0]
            scored(f"beam {args.beam}, alpha {alpha:g}", outputs, time.perf_counter() - start)
        mbr_row(f"MBR among the beam's {args.beam} best (alpha {args.alphas[0]:g})",
                make(beam_size=args.beam, alpha=args.alphas[0], n_best=args.beam))
        for setting in args.sampling:
            mbr_row(f"MBR among {args.samples} samples ({SAMPLING[setting][0]})",
                    make(beam_size=1, sample=True, seed=1, n_best=args.samples, **SAMPLING[setting][1]),
                    oracle=setting == "all")
    figures["machine"] = machine()
    splits = args.splits
    print(f"| row | {' | '.join(f'{s}: BLEU lc Moses / sacreBLEU / chrF2 / length' for s in splits)} | seconds "
          f"({splits[-1]}; MBR choice) |")
    print("|---|" + "---:|" * (len(splits) + 1))
    for name, by_split in figures["rows"].items():
        cells = [f"{r['bleu_lc_moses']} / {r['sacrebleu']} / {r['chrf2']} / {r['length_ratio']}"
                 for r in (by_split[s] for s in splits)]
        last = by_split[splits[-1]]
        extra = f"; {last['mbr_choice_seconds']}" if "mbr_choice_seconds" in last else ""
        print(f"| {name} | {' | '.join(cells)} | {last['seconds']}{extra} |")
    return print_and_write(figures, args.json, leading_newline=True)


if __name__ == "__main__":
    sys.exit(main())
