"""Where a whole ``tft translate`` process spends its time, against the warm decoding pass.

    python tools/bench/translate_startup.py --model runs/demo/model.keras --vocab runs/demo/spm.model \
        [--input test2016.en] [--beams 1,4] [--rounds 3] [--before /path/to/older/checkout] [--json OUT]

Each round runs ``tft translate --timings`` of the input (default: the bundled Multi30k
test2016 English side) once per beam size, as a subprocess with the default threads, and
records its wall time (start to exit, as the shell sees it), its CPU time and the phases
``--timings`` prints (Python start-up, TensorFlow import, model, tracing, decoding, writing).
With ``--before DIR`` each round first runs the same command from the checkout in DIR
(``python -m tf_transformer.cli`` with DIR first on the path, same interpreter, and
``--before-pythonpath`` before it), for a
before/after in one run on one machine; its phases are shown where that tree has ``--timings``.
Then the warm pass: in this process, the same :class:`Translator` setting (one decoding
thread per usable core), one untimed pass, then ``--warm-rounds`` timed passes (median).

Reported per beam size: the medians over the rounds, and whole process / warm pass (the
issue-15 goal: within 2x). Identical outputs before and after are checked when ``--before``
is given.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True)
    p.add_argument("--vocab", required=True)
    p.add_argument("--input", default=os.path.join(ROOT, "data", "multi30k", "test2016.en.gz"),
                   help="one sentence per line (.gz read as gzip; default: the bundled test2016 English side)")
    p.add_argument("--beams", default="1,4")
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warm-rounds", type=int, default=3)
    p.add_argument("--before", default=None, metavar="DIR", help="an older checkout to time in the same rounds")
    p.add_argument("--before-pythonpath", default="", metavar="PATHS",
                   help="put first on PYTHONPATH for the --before runs only (e.g. a directory holding the "
                        "older version of a dependency, installed there with pip install --target)")
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


PHASE = re.compile(r"(?:^|, )([a-zA-Z][^,;(]*?) (\d+\.\d\d) s")


def one_process(args, source: str, beam: int, out: str, tree: str | None, extra_path: str = "") -> dict:
    cmd = [sys.executable, "-m", "tf_transformer.cli", "translate", "--model", args.model, "--vocab", args.vocab,
           "--input", source, "--output", out, "--beam", str(beam), "--alpha", str(args.alpha), "--quiet",
           "--timings"]
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, tree, env.get("PYTHONPATH", "")) if p)
    before = os.times()
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree or ROOT, env=env, capture_output=True, text=True, check=False)
    if proc.returncode == 2 and "--timings" in proc.stderr:  # an older tree without --timings
        proc = subprocess.run(cmd[:-1], cwd=tree or ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = os.times()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    phases = {}
    for line in proc.stderr.splitlines():
        if line.startswith("tft translate: timings: "):
            body = line.split(": ", 2)[2].rsplit(";", 1)[0]
            phases = {name: float(s) for name, s in PHASE.findall(body)}
    return {"wall": wall, "cpu": (after.children_user - before.children_user)
            + (after.children_system - before.children_system), "phases": phases}


def warm_pass(args, lines, beams) -> dict:
    from tf_transformer.cli.decode import import_tensorflow
    from tf_transformer.data.batching import usable_cores
    from tf_transformer.decoding.translator import Translator, load_tokenizer
    from tf_transformer.io import load_model

    threads = usable_cores()
    import_tensorflow(threads)
    model = load_model(args.model)
    tok = load_tokenizer(args.vocab, model)
    out = {}
    for beam in beams:
        tr = Translator(model, tok, beam_size=beam, alpha=args.alpha, batch_size=64, workers=threads)
        tr.translate(lines)
        times = []
        for _ in range(args.warm_rounds):
            start = time.perf_counter()
            tr.translate(lines)
            times.append(time.perf_counter() - start)
        out[beam] = {"seconds": times, "median": statistics.median(times)}
    return out


def main(argv=None) -> None:
    args = parse_args(argv)
    beams = [int(b) for b in args.beams.split(",")]
    opener = gzip.open if args.input.endswith(".gz") else open
    with opener(args.input, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    work = tempfile.mkdtemp(prefix="translate_startup.")
    source = os.path.join(work, "input.txt")
    with open(source, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    trees = ([("before", os.path.abspath(args.before))] if args.before else []) + [("after", None)]
    runs: dict = {(label, b): [] for label, _ in trees for b in beams}
    for r in range(args.rounds):
        for beam in beams:
            for label, tree in trees:
                res = one_process(args, source, beam, os.path.join(work, f"{label}.{beam}.out"), tree,
                                  args.before_pythonpath if tree else "")
                runs[(label, beam)].append(res)
                print(f"round {r + 1} beam {beam} {label}: {res['wall']:.2f} s wall, {res['cpu']:.1f} CPU-s",
                      file=sys.stderr, flush=True)
    warm = warm_pass(args, lines, beams)
    from decode_throughput import machine

    report = {"machine": machine(), "model": args.model, "sentences": len(lines), "rounds": args.rounds,
              "results": {}}
    for beam in beams:
        for label, _ in trees:
            rs = runs[(label, beam)]
            names = list(rs[-1]["phases"])
            med = {n: statistics.median(x["phases"].get(n, 0.0) for x in rs) for n in names}
            wall = statistics.median(x["wall"] for x in rs)
            ratio = wall / warm[beam]["median"]
            report["results"][f"{label} beam{beam}"] = {
                "wall": [round(x["wall"], 2) for x in rs], "wall_median": round(wall, 2),
                "cpu_median": round(statistics.median(x["cpu"] for x in rs), 2),
                "phases_median": {n: round(v, 2) for n, v in med.items()},
                "warm_pass": round(warm[beam]["median"], 2), "process_over_warm": round(ratio, 2)}
            shown = ", ".join(f"{n} {v:.2f}" for n, v in med.items())
            print(f"beam {beam} {label}: whole process {wall:.2f} s (median of {len(rs)}), warm pass "
                  f"{warm[beam]['median']:.2f} s, ratio {ratio:.2f}x" + (f"; phases: {shown}" if shown else ""))
        if args.before:
            same = open(os.path.join(work, f"before.{beam}.out"), "rb").read() == \
                open(os.path.join(work, f"after.{beam}.out"), "rb").read()
            report["results"][f"identical beam{beam}"] = same
            print(f"beam {beam}: outputs before/after {'identical' if same else 'DIFFER'}")
    print(json.dumps(report["machine"]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
