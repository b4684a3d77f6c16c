"""What the decoding modes beyond the 1-best search cost, and what they give.

    python tools/bench/decode_modes.py --model runs/m30k/model.keras --vocab runs/m30k/vocab.model \
        [--config multi30k_tiny] [--split test] [--limit N] [--stream-lines 100] [--json FILE]
    python tools/bench/decode_modes.py --tiny --limit 64      # plumbing check, tiny copy model

On the split's sources (Multi30k test2016 by default), in one process, each row after an
untimed warm-up pass of its own (tracing), batches of ``--batch-size`` sorted by length
(as ``tft translate``), ``--threads`` batches at once:

1. beam 4 (alpha 0.6), the 1-best search ``tft translate`` runs;
2. ``--n-best 4`` with beam 4: the same search run until 4 hypotheses have finished and none
   can be displaced; the mean list length and whether every list starts with row 1's output;
3. greedy, and ``--sample`` from all tokens, from the top 10 and from the nucleus of 0.9
   (``--sample-topp 0.9``; seed 1): what back-translation would use; the quality of each
   against the references, and how many of the sampled translations differ from the greedy ones;
   and 4 samples per line (``--sample --n-best 4``): how many distinct, and whether the first is
   the single sample;
4. ``--score-target``: the teacher-forced log-probability of the references and of row 1's
   outputs (per token), and its speed;
5. ``--stream``: each of the first ``--stream-lines`` sentences decoded alone, as ``tft
   translate --stream`` does when lines come one by one; the latency per line (median, 90th
   percentile) against the batch path's mean time per sentence; and the whole input through
   ``--stream``'s reader as a pipe that runs ahead of the decoder gives it (the lines that
   wait decoded together, up to ``--batch-size`` per thread), against the batch path.

Wall sentences/s and sentences per CPU-second (user + system time of the process); the
CPU-time figure is the stable one on a shared machine. Prints a table and, with ``--json``,
writes every figure with the command line, machine, load average and date.
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


def parse_args(argv=None):
    p = model_parser(__doc__)
    p.add_argument("--stream-lines", type=int, default=100)
    p.add_argument("--json", help="write the figures here")
    return parse_model_arguments(p, argv)


def timed(fn, *args):
    """``(result, wall seconds, CPU seconds)`` of ``fn(*args)`` after one untimed warm-up call
    (both at least a microsecond)."""
    fn(*args)
    start, cpu = time.perf_counter(), cpu_seconds()
    result = fn(*args)
    return result, max(time.perf_counter() - start, 1e-6), max(cpu_seconds() - cpu, 1e-6)


def quality(outputs, refs) -> dict:
    from tf_transformer.evaluation.bleu import lowercase_bleu, sacre_bleu

    return {"sacrebleu": round(sacre_bleu(outputs, refs).score, 2),
            "bleu_lc": round(lowercase_bleu(outputs, refs).score, 2)}


def main(argv=None):
    from tf_transformer.io import one_model_after_another

    with one_model_after_another():  # a translator per row: TensorFlow counts them as retracings
        return measure(parse_args(argv), argv)


def measure(args, argv):
    from tf_transformer.decoding import decoding_environment

    decoding_environment()  # as tft translate decodes
    from tf_transformer.decoding.translator import Translator, set_cpu_threads

    set_cpu_threads(args.threads)
    model, tok, sources, refs, what = load(args)
    n = len(sources)
    print(f"decode_modes: {n} sentences of {what}; model {args.model}", file=sys.stderr)

    def make(**kw):
        return Translator(model, tok, batch_size=args.batch_size, workers=args.threads, max_extra_length=50, **kw)

    rows = {}

    def row(name, translator, texts=sources, extra=None):
        (outputs, scores, stats), wall, cpu = timed(translator.translate, texts)
        rows[name] = {"sentences_per_s": round(n / wall, 2), "sentences_per_cpu_s": round(n / cpu, 2),
                      "seconds": round(wall, 2), **(extra(outputs, scores) if extra else {})}
        print(f"  {name}: {rows[name]}", file=sys.stderr, flush=True)
        return outputs, scores

    beam, _ = row("beam 4", make(beam_size=4, alpha=0.6), extra=lambda o, s: quality(o, refs))
    row("beam 4, n-best 4", make(beam_size=4, alpha=0.6, n_best=4),
        extra=lambda o, s: {"mean_list_length": round(statistics.mean(map(len, o)), 2),
                            "full_lists": sum(len(x) == 4 for x in o),
                            "first_is_the_1_best": sum(x[0] == b for x, b in zip(o, beam))})
    greedy, _ = row("greedy", make(beam_size=1), extra=lambda o, s: quality(o, refs))
    drawn = {}
    for name, top_k, top_p in (("sample, all tokens", 0, 1.0), ("sample, top 10", 10, 1.0),
                               ("sample, nucleus 0.9", 0, 0.9)):
        drawn[name], _ = row(name, make(beam_size=1, sample=True, top_k=top_k, top_p=top_p, seed=1),
                             extra=lambda o, s: {**quality(o, refs),
                                                 "differ_from_greedy": sum(a != b for a, b in zip(o, greedy))})
    single = drawn["sample, all tokens"]

    row("sample, 4 per line", make(beam_size=1, sample=True, seed=1, n_best=4),
        extra=lambda o, s: {"mean_distinct_per_line": round(statistics.mean(len(set(x)) for x in o), 2),
                            "first_is_the_single_sample": sum(x[0] == y for x, y in zip(o, single))})
    scorer = make(beam_size=1)
    for name, targets in (("score the references", refs), ("score the beam-4 outputs", beam)):
        (log_probs, tokens, _), wall, cpu = timed(scorer.score, sources, targets)
        rows[name] = {"sentences_per_s": round(n / wall, 2), "sentences_per_cpu_s": round(n / cpu, 2),
                      "seconds": round(wall, 2),
                      "log_prob_per_token": round(sum(log_probs) / sum(tokens), 4)}
        print(f"  {name}: {rows[name]}", file=sys.stderr, flush=True)

    alone = make(beam_size=4, alpha=0.6)
    alone.translate(sources[:1])
    latencies = []
    for text in sources[: args.stream_lines]:
        start = time.perf_counter()
        alone.translate([text])
        latencies.append(time.perf_counter() - start)
    latencies.sort()
    rows["stream, beam 4"] = {"lines": len(latencies), "median_ms": round(1000 * statistics.median(latencies), 1),
                              "p90_ms": round(1000 * latencies[int(0.9 * (len(latencies) - 1))], 1),
                              "batch_path_ms_per_sentence": round(1000 * rows["beam 4"]["seconds"] / n, 1)}
    print(f"  stream, beam 4: {rows['stream, beam 4']}", file=sys.stderr, flush=True)

    import io

    from tf_transformer.cli.decode import _arrived

    piped = make(beam_size=4, alpha=0.6)
    text = "".join(t.replace("\n", " ") + "\n" for t in sources).encode("utf-8")

    def stream_all():
        out, count = [], 0
        for raws in _arrived(io.BytesIO(text), args.batch_size * args.threads):  # as tft translate --stream
            out += piped.translate([r.decode("utf-8").rstrip("\n") for r in raws])[0]
            count += 1
        return out, count

    (streamed, count), wall, cpu = timed(stream_all)
    rows["stream, a pipe that runs ahead"] = {
        "sentences_per_s": round(n / wall, 2), "sentences_per_cpu_s": round(n / cpu, 2), "seconds": round(wall, 2),
        "batches": count, "same_as_batch_path": sum(a == b for a, b in zip(streamed, beam))}
    print(f"  stream, a pipe that runs ahead: {rows['stream, a pipe that runs ahead']}", file=sys.stderr, flush=True)

    result = {"command": "python " + " ".join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:])),
              "data": what, "model": args.model, "batch_size": args.batch_size, "threads": args.threads,
              "machine": machine(), "rows": rows}
    print()
    print("| mode | sentences/s | per CPU-s | what it gives |")
    print("|---|---:|---:|---|")
    for name, r in rows.items():
        if "sentences_per_s" in r:
            rest = {k: v for k, v in r.items() if k not in ("sentences_per_s", "sentences_per_cpu_s", "seconds")}
            print(f"| {name} | {r['sentences_per_s']:.1f} | {r['sentences_per_cpu_s']:.1f} | "
                  f"{', '.join(f'{k} {v}' for k, v in rest.items())} |")
    s = rows["stream, beam 4"]
    print(f"\nstream: {s['lines']} lines one at a time, latency median {s['median_ms']} ms, 90th percentile "
          f"{s['p90_ms']} ms; batch path {s['batch_path_ms_per_sentence']} ms per sentence")
    print(f"machine: {result['machine']}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
