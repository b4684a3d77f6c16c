"""What an ensemble (``tft translate --model A --model B``) gives and costs against its members
alone, each system's length penalty chosen on the validation set.

    python tools/bench/ensemble_decoding.py --model runs/a/averaged-5.keras --member runs/b/best.keras \
        --vocab runs/a/vocab.model [--config multi30k_tiny] [--beam 5] [--alphas 0.6 1.0 1.4 1.8 2.2] \
        [--json FILE]
    python tools/bench/ensemble_decoding.py --tiny --limit 32     # plumbing check (the tiny model twice)

Systems: ``--model`` alone, each ``--member`` alone, and the ensemble of all of them (the mean of
their next-token probabilities). For each: beam ``--beam`` on the validation split at every
``--alphas``, the alpha of the best validation BLEU (lowercased, Moses-tokenized; ties to the
smaller alpha) chosen, then the test split at that alpha and at the first alpha. Each row:
sacreBLEU, lowercased Moses-tokenized BLEU, chrF2, the length ratio and the decoding seconds
(batches of ``--batch-size``, ``--threads`` at once); the test rows at the first alpha give the
ensemble's decoding time against its members'.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_throughput import load, machine, model_parser, parse_model_arguments, print_and_write  # noqa: E402


def main(argv=None) -> int:
    p = model_parser(__doc__)
    p.add_argument("--member", action="append", default=[], metavar="KERAS",
                   help="a further member of the ensemble (repeat for more; with --tiny: the tiny model again)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.0, 1.4, 1.8, 2.2])
    p.add_argument("--json", help="write the figures here")
    args = parse_model_arguments(p, argv)
    if not args.member and not args.tiny:
        p.error("give at least one --member (the ensemble's further models)")

    from tf_transformer.decoding import decoding_environment

    decoding_environment()  # as tft translate decodes
    from tf_transformer.decoding.ensemble import Ensemble
    from tf_transformer.decoding.translator import Translator, load_tokenizer, set_cpu_threads
    from tf_transformer.evaluation.bleu import chrf, moses_lowercase_bleu, sacre_bleu
    from tf_transformer.io import load_model

    set_cpu_threads(args.threads)
    splits = {}
    for split in ("valid", "test"):
        args.split = split
        model, tok, sources, refs, what = load(args)
        splits[split] = (sources, refs, what)
    members = [model] + [load_model(path) for path in (args.member or [args.model])]
    load_tokenizer(args.vocab, Ensemble(members))  # one vocabulary for all
    names = [Path(args.model).name] + [Path(m).name for m in (args.member or [args.model])]
    systems = {f"member {i + 1} alone: {name}": m for i, (name, m) in enumerate(zip(names, members))}
    together = f"ensemble of {len(members)}"
    systems[together] = Ensemble(members, names=names)

    figures = {"command": sys.argv, "systems": {}}

    def decode(name, system, split, alpha):
        sources, refs, _ = splits[split]
        translator = Translator(system, tok, beam_size=args.beam, alpha=alpha, max_extra_length=50,
                                batch_size=args.batch_size, workers=args.threads, stop_rule="beam_finished")
        translator.trace()
        start = time.perf_counter()
        outputs = translator.translate(sources)[0]
        seconds = time.perf_counter() - start
        ratio = sum(len(o.split()) for o in outputs) / max(1, sum(len(r.split()) for r in refs))
        row = {"alpha": alpha, "sacrebleu": round(sacre_bleu(outputs, refs).score, 2),
               "bleu_lc_moses": round(moses_lowercase_bleu(outputs, refs, "de").score, 2),
               "chrf2": round(chrf(outputs, refs).score, 2), "length_ratio": round(ratio, 3),
               "seconds": round(seconds, 2), "sentences_per_second": round(len(sources) / seconds, 1)}
        print(f"  {name}, {split}, alpha {alpha:g}: {row}", file=sys.stderr, flush=True)
        return row

    for name, system in systems.items():
        valid = [decode(name, system, "valid", alpha) for alpha in args.alphas]
        chosen = max(valid, key=lambda r: (r["bleu_lc_moses"], -r["alpha"]))["alpha"]
        test = {alpha: decode(name, system, "test", alpha) for alpha in dict.fromkeys([chosen, args.alphas[0]])}
        figures["systems"][name] = {"valid": valid, "chosen_alpha": chosen, "test": list(test.values())}
    figures["splits"] = {split: what for split, (_, _, what) in splits.items()}
    figures["machine"] = machine()

    first = args.alphas[0]
    single = [next(r for r in s["test"] if r["alpha"] == first)["seconds"]
              for n, s in figures["systems"].items() if n != together]
    print(f"| system | alpha chosen on valid | valid BLEU lc Moses | test BLEU lc Moses / sacreBLEU / chrF2 / length "
          f"| test at alpha {first:g}: BLEU lc Moses | test seconds at alpha {first:g} |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, s in figures["systems"].items():
        best_valid = next(r for r in s["valid"] if r["alpha"] == s["chosen_alpha"])
        at_chosen = next(r for r in s["test"] if r["alpha"] == s["chosen_alpha"])
        at_first = next(r for r in s["test"] if r["alpha"] == first)
        print(f"| {name} | {s['chosen_alpha']:g} | {best_valid['bleu_lc_moses']} | {at_chosen['bleu_lc_moses']} / "
              f"{at_chosen['sacrebleu']} / {at_chosen['chrf2']} / {at_chosen['length_ratio']} | "
              f"{at_first['bleu_lc_moses']} | {at_first['seconds']} |")
    ensemble_seconds = next(r for r in figures["systems"][together]["test"] if r["alpha"] == first)["seconds"]
    print(f"\nthe ensemble's decoding time at alpha {first:g}: {ensemble_seconds / sum(single):.2f}x its members' "
          f"added up ({ensemble_seconds} s against {' + '.join(map(str, single))} s)")
    return print_and_write(figures, args.json)


if __name__ == "__main__":
    sys.exit(main())
