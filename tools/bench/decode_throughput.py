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
4. **CTranslate2** (``--ct2``; needs the ``[ct2]`` extra): the model exported with
   ``tft export --format ctranslate2`` (float32 and int8 weights) decodes the same test set
   in the same process, its rows timed right after ours (same batches of ``--batch-size``
   sorted by length, same length limits; ``--ct2-threads`` CPU threads, ``--ct2-int8-threads``
   for int8). Identity: the share of sentences where CTranslate2 float32 and ours give the
   same ids, for greedy and for beam 4 with alpha 0 (``--alpha 0`` run of both), and the
   largest difference of the forward (teacher-forced) log-probabilities of our greedy
   outputs, ours vs CTranslate2's ``score_batch``.
5. **Whole process** (``--process``): ``tft translate`` of the test set as a subprocess,
   for each engine: wall time and CPU time (the child's user + system).

Ours runs as ``tft translate`` does: under its decoding environment (TensorFlow without oneDNN,
``tf_transformer.decoding.DECODING_ENVIRONMENT``) unless the environment sets
``TF_ENABLE_ONEDNN_OPTS`` itself. ``--tf-threads N`` decodes N batches at once, one thread each
(ours, in this process, and the ``tft translate --threads N`` processes); ``--ct2-threads`` and ``--ct2-int8-threads``
set CTranslate2's intra-op threads.

Every timed figure is given as wall sentences/s and as sentences per CPU-second (the
process's user + system time over all its threads). On a shared machine the CPU-time
figure is the stable one: a process that waits for the CPU is charged wall time, not CPU
time. Prints tables and, with ``--json``, writes every figure with the command line,
machine, load average and date.
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
    model_arguments(p)
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
    p.add_argument("--ct2", action="store_true", help="add CTranslate2 rows (float32, int8) and identity figures")
    p.add_argument("--ct2-threads", type=int, default=2, help="CPU threads of CTranslate2 float32 (default 2)")
    p.add_argument("--ct2-int8-threads", type=int, default=1, help="CPU threads of CTranslate2 int8 (default 1)")
    p.add_argument("--skip-identity", action="store_true", help="with --ct2: no alpha-0 beam identity run")
    p.add_argument("--tf-threads", type=int, default=0,
                   help="ours and `tft translate --threads`: N batches at once, one thread each (default 0: "
                        "TensorFlow's threads, one batch at a time)")
    p.add_argument("--process", action="store_true",
                   help="also time whole `tft translate` processes over the test set (each engine)")
    p.add_argument("--skip-quality", action="store_true", help="no BLEU (faster)")
    p.add_argument("--json", default=None, help="write the results here")
    return parse_model_arguments(p, argv)


def model_arguments(p) -> None:
    """The model and sentences options :func:`load` reads, on parser ``p``."""
    p.add_argument("--model", help="trained .keras model (not with --tiny)")
    p.add_argument("--vocab", help="its SentencePiece .model")
    p.add_argument("--tiny", action="store_true",
                   help="use the tiny test model and toy sentences (checks the script, figures meaningless)")
    p.add_argument("--config", default=None, help="config whose data section names the split (default: Multi30k)")
    p.add_argument("--split", default="test", choices=("train", "valid", "test"))
    p.add_argument("--limit", type=int, default=0, help="only the first N sentences (0: all)")
    p.add_argument("--batch-size", type=int, default=64)


def model_parser(doc: str) -> argparse.ArgumentParser:
    """A parser for a decoding benchmark whose docstring is ``doc`` (its first paragraph the
    description, the whole the epilog), with :func:`model_arguments` and ``--threads``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=doc)
    model_arguments(p)
    p.add_argument("--threads", type=int, default=2, help="batches decoded at once (tft translate --threads)")
    return p


def parse_model_arguments(p, argv=None):
    """``p.parse_args(argv)``, refusing a model without its vocabulary (or neither, without --tiny)."""
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


def cpu_seconds() -> float:
    """User + system CPU time of this process, all threads (TensorFlow's and CTranslate2's)."""
    t = os.times()
    return t.user + t.system


def timed(translator, sources):
    """``(outputs, stats, wall seconds, CPU seconds)`` of one ``translate_ids`` pass."""
    start, cpu = time.perf_counter(), cpu_seconds()
    outputs, _, stats = translator.translate_ids(sources)
    return outputs, stats, time.perf_counter() - start, cpu_seconds() - cpu


def row(name, outputs, stats, wall, cpu, n, tok=None, refs=None, **extra):
    r = {"sentences": n, "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
         "sentences_per_s": round(n / wall, 2), "sentences_per_cpu_s": round(n / cpu, 2),
         "output_tokens": stats.output_tokens, "output_tokens_per_s": round(stats.output_tokens / wall, 1),
         "mean_output_tokens": round(stats.output_tokens / max(stats.decoded, 1), 2),
         "load_average": round(os.getloadavg()[0], 2), **extra}
    if tok is not None and refs is not None:
        from tf_transformer.evaluation.bleu import evaluate_translations

        scores = evaluate_translations(tok.decode(outputs), refs)
        r["scores"] = {k: {"name": s.name, "score": round(s.score, 2), "signature": s.signature}
                       for k, s in scores.items()}
    bleu = f"; sacreBLEU {r['scores']['sacrebleu']['score']:.2f}" if "scores" in r else ""
    print(f"  {name:>22}: {n} sentences in {wall:.1f} s = {n / wall:.2f} sent/s ({n / cpu:.2f} per CPU-s, "
          f"load {r['load_average']:.1f}){bleu}", file=sys.stderr, flush=True)
    return r


def test_set_throughput(model, tok, sources, refs, args, ct2_dirs=None):
    """Measurements 1, 3 and 4: each decoding setting, ours then each CTranslate2 export."""
    from tf_transformer.decoding.translator import Translator

    ids = tok.encode(sources)
    refs = None if args.skip_quality else refs
    results, outputs = {}, {}
    settings = [("greedy", 1, args.alpha), (f"beam{args.beam}", args.beam, args.alpha)]
    if ct2_dirs and not args.skip_identity and args.alpha != 0:
        settings.append((f"beam{args.beam}_alpha0", args.beam, 0.0))
    for name, beam, alpha in settings:
        tr = Translator(model, tok, beam_size=beam, alpha=alpha, max_extra_length=args.max_extra_len,
                        batch_size=args.batch_size, jit_compile=args.xla, workers=max(args.tf_threads, 1))
        start = time.perf_counter()
        tr.translate_ids(ids[: min(len(ids), args.batch_size)])  # warm-up: tracing
        first = time.perf_counter() - start
        out, stats, wall, cpu = timed(tr, ids)
        outputs[("ours", name)] = out
        results[f"ours {name}"] = row(f"ours {name}", out, stats, wall, cpu, len(ids), tok, refs, beam_size=beam,
                                      alpha=alpha if beam > 1 else None, warmup_seconds=round(first, 2))
        for label, (path, threads) in (ct2_dirs or {}).items():
            from tf_transformer.serving.ctranslate2 import CT2Translator

            ct = CT2Translator(path, tok, beam_size=beam, alpha=alpha, max_extra_length=args.max_extra_len,
                               batch_size=args.batch_size, threads=threads)
            ct.translate_ids(ids[: min(len(ids), args.batch_size)])  # warm-up
            out, stats, wall, cpu = timed(ct, ids)
            outputs[(label, name)] = out
            key = f"{label} {name}"
            results[key] = row(key, out, stats, wall, cpu, len(ids), tok, refs, beam_size=beam, threads=threads,
                               alpha=alpha if beam > 1 else None)
    identity = {}
    if ct2_dirs:
        f32 = next(iter(ct2_dirs))
        for name, beam, alpha in settings:
            if beam > 1 and alpha != 0:
                continue
            same = sum(a == b for a, b in zip(outputs[("ours", name)], outputs[(f32, name)]))
            identity[name] = {"identical": same, "sentences": len(ids), "share": round(same / len(ids), 4)}
            print(f"  identity {name}: {same}/{len(ids)} sentences identical (ours vs {f32})", file=sys.stderr)
        identity["forward_log_prob_max_abs_diff"] = forward_log_prob_diff(
            model, ct2_dirs[f32][0], tok, ids, outputs[("ours", "greedy")], args)
        print(f"  forward log-probs of our greedy outputs: max |ours - CTranslate2| = "
              f"{identity['forward_log_prob_max_abs_diff']:.2e}", file=sys.stderr)
    return results, identity


def forward_log_prob_diff(model, ct2_dir, tok, sources, targets, args, n: int = 256) -> float:
    """Largest |ours - CTranslate2| of the teacher-forced log-probabilities of ``targets`` + EOS."""
    import numpy as np
    import tensorflow as tf

    from tf_transformer.serving.ctranslate2 import CT2Translator

    pairs = [(s[: model.max_length], t[: model.max_length - 1]) for s, t in zip(sources, targets)][:n]
    theirs = CT2Translator(ct2_dir, tok, batch_size=args.batch_size).token_log_probs([p[0] for p in pairs],
                                                                                  [p[1] for p in pairs])
    worst = 0.0
    for b in range(0, len(pairs), 64):
        chunk = pairs[b: b + 64]
        ws, wt = max(len(p[0]) for p in chunk), max(len(p[1]) for p in chunk) + 1
        src = np.zeros((len(chunk), ws), np.int32)
        tgt_in = np.zeros((len(chunk), wt), np.int32)
        for i, (s, t) in enumerate(chunk):
            src[i, : len(s)] = s
            tgt_in[i, : len(t) + 1] = [tok.bos_id] + list(t)
        log_probs = tf.nn.log_softmax(model((src, tgt_in), training=False), axis=-1).numpy()
        for i, (s, t) in enumerate(chunk):
            ours = log_probs[i, np.arange(len(t) + 1), list(t) + [tok.eos_id]]
            worst = max(worst, float(np.max(np.abs(ours - np.array(theirs[b + i])))))
    return worst


def export_ct2(model, tok, args) -> dict:
    """CTranslate2 exports of the model in a temporary directory: ``{label: (dir, threads)}``."""
    from tf_transformer.serving.ctranslate2 import export_ctranslate2

    root = tempfile.mkdtemp(prefix="tft_bench_ct2_")
    dirs = {}
    for label, quant, threads in (("ct2-float32", None, args.ct2_threads), ("ct2-int8", "int8", args.ct2_int8_threads)):
        path = os.path.join(root, label)
        export_ctranslate2(model, tok, path, quantization=quant, source=args.model)
        dirs[label] = (path, threads)
    return dirs


def whole_process(args, sources, ct2_dirs) -> dict:
    """Measurement 5: ``tft translate`` processes over the test set (wall and child CPU time)."""
    import subprocess

    tft = os.path.join(os.path.dirname(sys.executable), "tft")
    src = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8")
    src.write("".join(s.replace("\n", " ") + "\n" for s in sources))
    src.close()
    dest = src.name + ".out"
    runs = []
    for beam in (1, args.beam):
        common = ["--input", src.name, "--output", dest, "--beam", str(beam), "--alpha", str(args.alpha),
                  "--batch-size", str(args.batch_size), "--max-extra-len", str(args.max_extra_len), "--quiet"]
        threads = ["--threads", str(args.tf_threads)]  # 0: TensorFlow's own threads (tft's default is one per core)
        runs.append(("tft translate greedy" if beam == 1 else f"tft translate beam{beam}",
                     [tft, "translate", "--model", args.model, "--vocab", args.vocab] + threads + common))
        if ct2_dirs:
            path, threads = ct2_dirs["ct2-float32"]
            runs.append((f"tft translate --engine ctranslate2 {'greedy' if beam == 1 else f'beam{beam}'}",
                         [tft, "translate", "--engine", "ctranslate2", "--model", path, "--threads",
                          str(threads)] + common))
    results = {}
    for name, cmd in runs:
        before = os.times()
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - start
        after = os.times()
        cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
        results[name] = {"seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
                         "sentences_per_s": round(len(sources) / wall, 2),
                         "sentences_per_cpu_s": round(len(sources) / cpu, 2),
                         "load_average": round(os.getloadavg()[0], 2)}
        print(f"  {name}: {wall:.1f} s wall, {cpu:.1f} s CPU ({len(sources) / wall:.2f} sent/s, "
              f"{len(sources) / cpu:.2f} per CPU-s)", file=sys.stderr, flush=True)
    for path in (src.name, dest):
        if os.path.exists(path):
            os.unlink(path)
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


def print_and_write(figures: dict, json_path=None, leading_newline: bool = False) -> int:
    """The end of a decoding benchmark: print ``figures["machine"]``, write every figure to
    ``json_path`` when given; returns the exit code 0."""
    print(f"{chr(10) if leading_newline else ''}machine: {figures['machine']}")
    if json_path:
        Path(json_path).write_text(json.dumps(figures, indent=1))
    return 0


def machine() -> dict:
    import tensorflow as tf

    from tf_transformer.training.precision import cpu_flags, cpu_model_name

    cpu = cpu_model_name() or platform.processor() or ""
    flags = sorted(cpu_flags() & {"avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"})
    info = {"cpu": cpu, "simd": flags, "cores": os.cpu_count(), "python": platform.python_version(),
            "tensorflow": tf.__version__, "load_average": [round(x, 2) for x in os.getloadavg()],
            "date": time.strftime("%Y-%m-%d %H:%M")}
    try:
        import ctranslate2

        info["ctranslate2"] = ctranslate2.__version__
    except ImportError:
        pass
    return info


def main(argv=None):
    args = parse_args(argv)
    from tf_transformer.decoding import decoding_environment

    decoding_environment()  # ours decodes as `tft translate` does (set TF_ENABLE_ONEDNN_OPTS=1 for oneDNN)
    if args.tf_threads:
        from tf_transformer.decoding.translator import set_cpu_threads

        set_cpu_threads(args.tf_threads)  # before TensorFlow's first op
    model, tok, sources, refs, what = load(args)
    print(f"decode_throughput: {len(sources)} sentences of {what}; model {args.model}", file=sys.stderr)
    throughput, identity, process = {}, {}, {}
    ct2_dirs = export_ct2(model, tok, args) if args.ct2 else None
    if not args.only_cache:
        print("1. test-set throughput (translator path)" + (" and CTranslate2" if ct2_dirs else ""), file=sys.stderr)
        throughput, identity = test_set_throughput(model, tok, sources, refs, args, ct2_dirs)
    if args.process:
        print("5. whole `tft translate` processes", file=sys.stderr)
        process = whole_process(args, sources, ct2_dirs)
    speed = None
    if not args.skip_uncached:
        print(f"2. cached vs uncached, {args.cache_length}-token outputs", file=sys.stderr)
        speed = cache_speedup(model, tok, sources, args)
    result = {"command": "python " + " ".join([sys.argv[0]] + (argv if argv is not None else sys.argv[1:])),
              "data": what, "model": args.model, "batch_size": args.batch_size, "xla": args.xla,
              "tf_threads": args.tf_threads,
              "machine": machine(), "throughput": throughput, "identity": identity, "process": process,
              "cache": speed}

    if throughput:
        print()
        print("| decoding | sentences/s | sentences per CPU-s | output tokens/s | mean output tokens | sacreBLEU "
              "| BLEU lc (13a) | chrF2 |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in throughput.items():
        s = r.get("scores")
        quality = (f"{s['sacrebleu']['score']:.2f} | {s['bleu_lc']['score']:.2f} | {s['chrf']['score']:.2f}"
                   if s else "- | - | -")
        print(f"| {name} | {r['sentences_per_s']:.2f} | {r['sentences_per_cpu_s']:.2f} | "
              f"{r['output_tokens_per_s']:.0f} | {r['mean_output_tokens']:.1f} | {quality} |")
    if identity:
        print()
        for name, r in identity.items():
            if isinstance(r, dict):
                print(f"- identical to CTranslate2 float32, {name}: {r['identical']}/{r['sentences']}")
        print(f"- forward log-probs, max |ours - CTranslate2 float32|: {identity['forward_log_prob_max_abs_diff']:.2e}")
    if process:
        print()
        print("| whole process | wall s | CPU s | sentences/s | sentences per CPU-s |")
        print("|---|---:|---:|---:|---:|")
        for name, r in process.items():
            print(f"| {name} | {r['seconds']:.1f} | {r['cpu_seconds']:.1f} | {r['sentences_per_s']:.2f} "
                  f"| {r['sentences_per_cpu_s']:.2f} |")
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
