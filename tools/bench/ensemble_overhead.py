"""What decoding with an ensemble costs beyond its members' own decoding, with the mixture as
:mod:`tf_transformer.decoding.ensemble` computes it and as it did before (the members'
log-softmaxes stacked into one tensor and ``tf.reduce_logsumexp`` over it, then the searches'
own log-softmax of those already normalised log-probabilities), in one process.

    python tools/bench/ensemble_overhead.py --model runs/a/averaged-5.keras --member runs/b/averaged-5.keras \
        --vocab runs/a/vocab.model [--split test] [--beam 5] [--rounds 3] [--json FILE]
    python tools/bench/ensemble_overhead.py --tiny --limit 64      # plumbing check (the tiny model twice)

Each round decodes the split with every member alone, then with the ensemble both ways (beam
``--beam``, alpha 0.6, fairseq's stop rule, batches of ``--batch-size``, ``--threads`` at once),
each after 64 untimed sentences (tracing). Prints each round's wall and CPU seconds, the medians,
the ensemble's time over its members' added up, and whether both ways wrote the same
translations.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_throughput import cpu_seconds, load, machine, model_parser, parse_model_arguments, print_and_write  # noqa: E402


def stacked_mixture(logits):
    """The mixture as computed before: ``reduce_logsumexp`` over the stacked log-softmaxes."""
    import tensorflow as tf

    log_probs = tf.stack([tf.nn.log_softmax(tf.cast(x, tf.float32), axis=-1) for x in logits])
    return tf.reduce_logsumexp(log_probs, axis=0) - math.log(len(logits))


def main(argv=None) -> int:
    p = model_parser(__doc__)
    p.add_argument("--member", action="append", default=[], metavar="KERAS",
                   help="a further member of the ensemble (repeat for more; with --tiny: the tiny model again)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", help="write the figures here")
    args = parse_model_arguments(p, argv)
    if not args.member and not args.tiny:
        p.error("give at least one --member (the ensemble's further models)")

    from tf_transformer.decoding import decoding_environment

    decoding_environment()  # as tft translate decodes
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")  # each round traces afresh, on purpose: no retracing warnings
    from tf_transformer.decoding import ensemble as ensemble_module
    from tf_transformer.decoding.translator import Translator, set_cpu_threads
    from tf_transformer.io import load_model

    set_cpu_threads(args.threads)
    model, tok, sources, _, what = load(args)
    members = [model] + [load_model(path) for path in (args.member or [args.model])]
    print(f"ensemble_overhead: {len(sources)} sentences of {what}; {len(members)} members", file=sys.stderr)
    now_mixture = ensemble_module.mean_probabilities
    ways = {"ensemble, now": (now_mixture, True),
            "ensemble, before (stacked; searches re-normalise)": (stacked_mixture, False)}

    def decode(system):
        translator = Translator(system, tok, beam_size=args.beam, alpha=0.6, max_extra_length=50,
                                batch_size=args.batch_size, workers=args.threads, stop_rule="beam_finished")
        translator.translate(sources[:64])
        start, cpu = time.perf_counter(), cpu_seconds()
        outputs = translator.translate(sources)[0]
        return outputs, time.perf_counter() - start, cpu_seconds() - cpu

    rounds = {name: [] for name in ["members alone, added up", *ways]}
    outputs = {}
    try:
        for r in range(args.rounds):
            alone = [decode(m)[1:] for m in members]
            rounds["members alone, added up"].append((sum(w for w, _ in alone), sum(c for _, c in alone)))
            for name, (mixture, normalized) in ways.items():
                ensemble_module.mean_probabilities = mixture  # read when the decoding graph is traced
                system = ensemble_module.Ensemble(members)
                system.outputs_log_probabilities = normalized
                outputs[name], wall, cpu = decode(system)
                rounds[name].append((wall, cpu))
            print(f"  round {r + 1}: " + "; ".join(f"{n} {w:.2f} s ({c:.2f} CPU-s)" for n, [*_, (w, c)] in
                                                   rounds.items()), file=sys.stderr, flush=True)
    finally:
        ensemble_module.mean_probabilities = now_mixture
    medians = {name: (statistics.median(w for w, _ in rs), statistics.median(c for _, c in rs))
               for name, rs in rounds.items()}
    base_wall, base_cpu = medians["members alone, added up"]
    print(f"| decoding {len(sources)} sentences, beam {args.beam} | wall s per round | median | CPU-s median "
          "| x members (wall / CPU) |")
    print("|---|---|---:|---:|---:|")
    for name, rs in rounds.items():
        wall, cpu = medians[name]
        print(f"| {name} | {', '.join(f'{w:.2f}' for w, _ in rs)} | {wall:.2f} | {cpu:.2f} | "
              f"{wall / base_wall:.2f} / {cpu / base_cpu:.2f} |")
    now, before = outputs.values()
    same = sum(a == b for a, b in zip(now, before))
    print(f"\nthe same translations both ways: {same} of {len(now)}")
    figures = {"command": sys.argv, "what": what, "rounds": rounds, "medians": medians, "same_translations": same,
               "sentences": len(sources), "machine": machine()}
    return print_and_write(figures, args.json)


if __name__ == "__main__":
    sys.exit(main())
