"""Decoding speed and quality: greedy vs beam 4, cached vs uncached.

    python tools/bench/decode_throughput.py --model runs/multi30k_small/model.keras \
        --vocab runs/multi30k_small/spm.model [--config multi30k_small] [--split test]
        [--limit N] [--batch-size 64] [--xla] [--json tools/bench/results/decode.json]
    python tools/bench/decode_throughput.py --tiny --limit 64      # plumbing check, tiny random-ish model

Three measurements, each after one untimed warm-up call (tracing):

1. **Throughput over the test set** (Multi30k test2016 by default): ``tft translate``'s
   own path (:class:`tf_transformer.decoding.translator.Translator`: sentences sorted by
   length, batches of ``--batch-size``, one compiled graph), greedy and beam 4 (alpha 0.6,
   max length = input + 50). Reported: sentences/s and output tokens/s (subword tokens of
   the translations, EOS not counted), wall time including tokenization and
   detokenization.
2. **Cached vs uncached decoding for 50-token outputs**: the same greedy / beam search
   loop over ``--cache-sentences`` test sentences in one batch with EOS suppressed, so
   every hypothesis is exactly 50 tokens long. *Cached* = the model's key/value cache
   (cross-attention K/V once per sentence, self-attention K/V appended per step);
   *uncached* = every step re-runs the whole decoder over the prefix (the encoder output
   is still computed once). Reported: seconds per batch and the speedup.
3. **Quality**: sacreBLEU (and the other metrics of ``tft evaluate``) of the greedy and the
   beam-4 translations against the references.

Prints a table and, with ``--json``, writes every figure with the command line, machine
and date.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="trained .keras model")
    p.add_argument("--vocab", help="its SentencePiece .model")
    p.add_argument("--tiny", action="store_true",
                   help="use the tiny test model and toy sentences (checks the script, figures meaningless)")
    p.add_argument("--config", default=None, help="config whose data section names the test set (default: Multi30k)")
    p.add_argument("--split", default="test", choices=("test", "valid"))
    p.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--max-extra-len", type=int, default=50)
    p.add_argument("--xla", action="store_true", help="compile the test-set decoding with XLA")
    p.add_argument("--cache-length", type=int, default=50, help="output length for the cached/uncached comparison")
    p.add_argument("--cache-sentences", type=int, default=16, help="batch size of the cached/uncached comparison")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per cell of measurement 2 (median)")
    p.add_argument("--skip-uncached", action="store_true", help="skip measurement 2")
    p.add_argument("--only-cache", action="store_true",
                   help="only measurement 2 (needs no trained model: EOS is suppressed anyway)")
    p.add_argument("--json", default=None, help="write the results here")
    args = p.parse_args(argv)
    if not args.tiny and not (args.model and args.vocab):
        p.error("--model and --vocab are required (or --tiny)")
    return args


def load(args):
    from tf_transformer.decoding.translator import load_tokenizer
    from tf_transformer.io import load_model

    if args.tiny:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the suite's helpers
        from helpers.tiny_model import make_tiny_assets, toy_sentences

        directory = os.path.join(tempfile.gettempdir(), "tft_bench_tiny_model")
        args.model, args.vocab = make_tiny_assets(directory)
        sources = toy_sentences(args.limit or 200, seed=7)
        refs = list(sources)  # the tiny model is trained to copy
        what = "toy sentences (tiny copy model)"
    else:
        from tf_transformer.config import Config, load_config
        from tf_transformer.data import read_parallel_text
        from tf_transformer.data.sources import describe

        cfg = load_config(args.config) if args.config else Config()
        sources, refs = read_parallel_text(cfg.data, args.split)
        what = describe(cfg.data, args.split)
        if args.limit:
            sources, refs = sources[: args.limit], refs[: args.limit]
    model = load_model(args.model)
    tok = load_tokenizer(args.vocab, model)
    return model, tok, sources, refs, what


def test_set_throughput(model, tok, sources, refs, args):
    from tf_transformer.decoding.translator import Translator
    from tf_transformer.evaluation.bleu import evaluate_translations

    results = {}
    for name, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
        tr = Translator(model, tok, beam_size=beam, alpha=args.alpha, max_extra_length=args.max_extra_len,
                        batch_size=args.batch_size, jit_compile=args.xla)
        tr.translate(sources[: min(len(sources), args.batch_size)])  # warm-up: tracing
        start = time.perf_counter()
        hyps, _, stats = tr.translate(sources)
        seconds = time.perf_counter() - start
        scores = evaluate_translations(hyps, refs)
        results[name] = {
            "beam_size": beam,
            "alpha": args.alpha if beam > 1 else None,
            "sentences": len(sources),
            "seconds": round(seconds, 3),
            "sentences_per_s": round(len(sources) / seconds, 2),
            "output_tokens": stats.output_tokens,
            "output_tokens_per_s": round(stats.output_tokens / seconds, 1),
            "mean_output_tokens": round(stats.output_tokens / max(stats.decoded, 1), 2),
            "scores": {k: {"name": s.name, "score": round(s.score, 2), "signature": s.signature}
                       for k, s in scores.items()},
        }
        print(f"  {name:>7}: {len(sources)} sentences in {seconds:.1f} s = {len(sources) / seconds:.2f} sent/s, "
              f"{stats.output_tokens / seconds:.0f} tok/s; sacreBLEU {scores['sacrebleu'].score:.2f}",
              file=sys.stderr, flush=True)
    return results


def cache_speedup(model, tok, sources, args):
    """Greedy and beam search with EOS suppressed: every output is exactly cache-length tokens."""
    import numpy as np
    import tensorflow as tf

    from tf_transformer.decoding.beam_search import beam_search
    from tf_transformer.decoding.greedy import greedy_search
    from tf_transformer.decoding.model_fns import cached_decoder, uncached_decoder

    L = args.cache_length
    if L > model.max_length:
        raise SystemExit(f"--cache-length {L} exceeds the model's max_length {model.max_length}")
    n = min(args.cache_sentences, len(sources))
    ids = [s[: model.max_length] for s in tok.encode(sources[:n])]
    ids = [s or [tok.unk_id] for s in ids]
    width = max(map(len, ids))
    src = np.zeros((n, width), np.int32)
    for i, s in enumerate(ids):
        src[i, : len(s)] = s
    src = tf.constant(src)
    eos = tok.eos_id
    no_eos = tf.one_hot(eos, model.vocab_size, on_value=-1e9, off_value=0.0)

    def make(cached, beam):
        maker = cached_decoder if cached else uncached_decoder

        @tf.function
        def run(source):
            fn, cache = maker(model, source, L, beam_size=beam)

            def fn_no_eos(ids, step, cache):
                logits, cache = fn(ids, step, cache)
                return logits + no_eos, cache

            bos = tf.fill([tf.shape(source)[0]], tok.bos_id)
            if beam == 1:
                return greedy_search(fn_no_eos, bos, cache, L, eos)
            return beam_search(fn_no_eos, bos, cache, model.vocab_size, beam, args.alpha, L, eos)

        return run

    results = {}
    for label, beam in (("greedy", 1), (f"beam{args.beam}", args.beam)):
        row = {}
        outputs = {}
        for cached in (True, False):
            run = make(cached, beam)
            out = run(src)  # warm-up: tracing
            times = []
            for _ in range(max(args.repeats, 1)):
                start = time.perf_counter()
                out = run(src)
                outputs[cached] = out[0].numpy()
                times.append(time.perf_counter() - start)
            seconds = statistics.median(times)
            row["cached_s" if cached else "uncached_s"] = round(seconds, 3)
        row["speedup"] = round(row["uncached_s"] / row["cached_s"], 2)
        row["same_output"] = bool((outputs[True] == outputs[False]).all())
        first = outputs[True][:, 0] if beam > 1 else outputs[True]
        row["output_tokens_per_sentence"] = int((first[:, 1:] != 0).sum(axis=1).min())
        row["sentences"] = n
        results[label] = row
        print(f"  {label:>7}: {n} sentences x {L} tokens: cached {row['cached_s']:.2f} s, uncached "
              f"{row['uncached_s']:.2f} s, speedup {row['speedup']:.1f}x (same output: {row['same_output']})",
              file=sys.stderr, flush=True)
    return results


def machine() -> dict:
    import tensorflow as tf

    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "tensorflow": tf.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M")}


def main(argv=None):
    args = parse_args(argv)
    model, tok, sources, refs, what = load(args)
    print(f"decode_throughput: {len(sources)} sentences of {what}; model {args.model}", file=sys.stderr)
    throughput = {}
    if not args.only_cache:
        print("1. test-set throughput (translator path)", file=sys.stderr)
        throughput = test_set_throughput(model, tok, sources, refs, args)
    speed = None
    if not args.skip_uncached:
        print(f"2. cached vs uncached, {args.cache_length}-token outputs", file=sys.stderr)
        speed = cache_speedup(model, tok, sources, args)
    result = {"command": "python " + " ".join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:])),
              "data": what, "model": args.model, "batch_size": args.batch_size, "xla": args.xla,
              "machine": machine(), "throughput": throughput, "cache": speed}

    if throughput:
        print()
        print("| decoding | sentences/s | output tokens/s | mean output tokens | sacreBLEU | BLEU lc (13a) | chrF2 |")
        print("|---|---|---|---|---|---|---|")
    for name, r in throughput.items():
        s = r["scores"]
        print(f"| {name} | {r['sentences_per_s']:.2f} | {r['output_tokens_per_s']:.0f} | {r['mean_output_tokens']:.1f} "
              f"| {s['sacrebleu']['score']:.2f} | {s['bleu_lc']['score']:.2f} | {s['chrf']['score']:.2f} |")
    if speed:
        print()
        print(f"| {args.cache_length}-token outputs | cached s | uncached s | speedup |")
        print("|---|---|---|---|")
        for name, r in speed.items():
            print(f"| {name}, batch {r['sentences']} | {r['cached_s']:.2f} | {r['uncached_s']:.2f} "
                  f"| {r['speedup']:.1f}x |")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"decode_throughput: wrote {args.json}", file=sys.stderr)
    return result


if __name__ == "__main__":
    main()
