"""Sampled decoding with the per-row noise's integer ops as one XLA kernel, against the same
noise from TensorFlow's ops one at a time (what sampling ran before the kernel), in one process.

    python tools/bench/sampling_noise.py --model runs/m30k/model.keras --vocab runs/m30k/vocab.model \
        [--config multi30k_tiny] [--split test] [--rounds 3] [--top-p 1.0 0.9] [--json FILE]
    python tools/bench/sampling_noise.py --tiny --limit 64      # plumbing check, tiny copy model

For each ``--top-p`` (1.0: from all tokens; ``tft translate --sample --sample-topp P``), the
two ways alternate for ``--rounds`` rounds, each round a fresh ``Translator`` (seed 1, batches
of ``--batch-size``, ``--threads`` at once) that first decodes 64 sentences untimed (tracing,
and the kernel's compilations for the first batch shapes), then the whole split timed. Prints
sentences/s and sentences per CPU-second of each round, the medians, their ratio, and whether
the two ways wrote the same translations (they should: the same bits).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_throughput import cpu_seconds, load, machine, model_parser, parse_model_arguments  # noqa: E402


def main(argv=None) -> int:
    p = model_parser(__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--top-p", type=float, nargs="+", default=[1.0, 0.9])
    p.add_argument("--json", help="write the figures here")
    args = parse_model_arguments(p, argv)

    from tf_transformer.decoding import decoding_environment

    decoding_environment()  # as tft translate decodes
    from tf_transformer.decoding import greedy
    from tf_transformer.decoding.translator import Translator, set_cpu_threads

    set_cpu_threads(args.threads)
    model, tok, sources, _, what = load(args)
    n = len(sources)
    print(f"sampling_noise: {n} sentences of {what}; model {args.model}", file=sys.stderr)
    ways = {"fused kernel": greedy._fused_uniform, "plain ops": greedy._uniform}
    figures = {}
    try:
        for top_p in args.top_p:
            outputs, rounds = {}, {name: [] for name in ways}
            for _ in range(args.rounds):
                for name, uniform in ways.items():
                    greedy._fused_uniform = uniform  # read when the decoding graph is traced
                    translator = Translator(model, tok, beam_size=1, batch_size=args.batch_size,
                                            workers=args.threads, sample=True, seed=1, top_p=top_p)
                    translator.translate(sources[:64])
                    start, cpu = time.perf_counter(), cpu_seconds()
                    outputs[name] = translator.translate(sources)[0]
                    wall, cpu = time.perf_counter() - start, max(cpu_seconds() - cpu, 1e-2)  # os.times: 10 ms steps
                    rounds[name].append((round(n / wall, 1), round(n / cpu, 1)))
                    print(f"  top_p {top_p}, {name}: {rounds[name][-1][0]} sentences/s, "
                          f"{rounds[name][-1][1]} per CPU-s", file=sys.stderr, flush=True)
            medians = {name: [statistics.median(r[i] for r in rs) for i in (0, 1)] for name, rs in rounds.items()}
            figures[f"top_p {top_p}"] = {"rounds": rounds, "medians": medians,
                                         "same_translations": outputs["fused kernel"] == outputs["plain ops"]}
    finally:
        greedy._fused_uniform = ways["fused kernel"]
    print(f"| sampling ({n} sentences) | way | sentences/s (rounds) | median | per CPU-s (median) |")
    print("|---|---|---|---:|---:|")
    for setting, f in figures.items():
        for name, rs in f["rounds"].items():
            print(f"| {setting} | {name} | {', '.join(str(r[0]) for r in rs)} | {f['medians'][name][0]} | "
                  f"{f['medians'][name][1]} |")
        ratio = f["medians"]["fused kernel"][0] / f["medians"]["plain ops"][0]
        print(f"| {setting} | ratio, same translations | {f['same_translations']} | {ratio:.2f}x | |")
    info = machine()
    print(f"\nmachine: {info}")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": sys.argv, "machine": info, "figures": figures}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
