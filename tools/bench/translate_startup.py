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
``--before-env NAME=VALUE`` (repeatable) sets environment variables for the before processes
only (with or without ``--before``: the same tree under another environment, e.g.
``TF_ENABLE_ONEDNN_OPTS=1``).
Then the warm passes, one per side, each in a process of its own with that side's tree and
environment (the decoding environment ``tft translate`` sets for itself included): the same
:class:`Translator` setting (one decoding thread per usable core), one untimed pass, then
``--warm-rounds`` timed passes (median). Each side's ratio is to its own warm pass.

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
    p.add_argument("--before-env", action="append", default=[], metavar="NAME=VALUE",
                   help="an environment variable for the before processes only (repeatable)")
    p.add_argument("--json", default=None)
    p.add_argument("--warm-only", default=None, metavar="JSON", help=argparse.SUPPRESS)  # one side's warm pass
    args = p.parse_args(argv)
    for item in args.before_env:
        if "=" not in item:
            p.error(f"--before-env {item}: expected NAME=VALUE")
    return args


PHASE = re.compile(r"(?:^|, )([a-zA-Z][^,;(]*?) (\d+\.\d\d) s")


def side_env(tree: str | None, extra_path: str = "", overrides: dict | None = None) -> dict:
    """The environment of one side's processes: its tree (and ``extra_path``) first on the path."""
    env = dict(os.environ, **(overrides or {}))
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, tree, env.get("PYTHONPATH", "")) if p)
    return env


def one_process(args, source: str, beam: int, out: str, tree: str | None, extra_path: str = "",
                overrides: dict | None = None) -> dict:
    cmd = [sys.executable, "-m", "tf_transformer.cli", "translate", "--model", args.model, "--vocab", args.vocab,
           "--input", source, "--output", out, "--beam", str(beam), "--alpha", str(args.alpha), "--quiet",
           "--timings"]
    env = side_env(tree, extra_path, overrides)
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


def warm_pass_process(args, source: str, beams, label: str, tree: str | None, extra_path: str = "",
                      overrides: dict | None = None) -> dict:
    """:func:`warm_pass` in a process of its own, with side ``label``'s tree and environment."""
    out = os.path.join(os.path.dirname(source), f"warm-{label}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--model", args.model, "--vocab", args.vocab,
           "--input", source, "--beams", ",".join(map(str, beams)), "--alpha", str(args.alpha),
           "--warm-rounds", str(args.warm_rounds), "--warm-only", out]
    proc = subprocess.run(cmd, cwd=tree or ROOT, env=side_env(tree, extra_path, overrides), capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    with open(out, encoding="utf-8") as f:
        return {int(b): v for b, v in json.load(f).items()}


def warm_pass(args, lines, beams) -> dict:
    """The warm passes in this process, under the decoding environment ``tft translate`` sets
    for itself (where the tree on the path has one: an older tree may not)."""
    try:
        from tf_transformer.decoding import decoding_environment
    except ImportError:  # trees before a398c2e kept it in the CLI
        try:
            from tf_transformer.cli._quiet import decoding_environment
        except ImportError:
            decoding_environment = None
    if decoding_environment is not None:
        decoding_environment()
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
    if args.warm_only:
        with open(args.warm_only, "w", encoding="utf-8") as f:
            json.dump(warm_pass(args, lines, beams), f)
        return
    work = tempfile.mkdtemp(prefix="translate_startup.")
    source = os.path.join(work, "input.txt")
    with open(source, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    before_env = dict(item.split("=", 1) for item in args.before_env)
    compare = bool(args.before or before_env)
    # (label, tree, extra path, environment overrides)
    sides = ([("before", os.path.abspath(args.before) if args.before else None, args.before_pythonpath, before_env)]
             if compare else []) + [("after", None, "", {})]
    runs: dict = {(label, b): [] for label, *_ in sides for b in beams}
    for r in range(args.rounds):
        for beam in beams:
            for label, tree, extra, env in sides:
                res = one_process(args, source, beam, os.path.join(work, f"{label}.{beam}.out"), tree, extra, env)
                runs[(label, beam)].append(res)
                print(f"round {r + 1} beam {beam} {label}: {res['wall']:.2f} s wall, {res['cpu']:.1f} CPU-s",
                      file=sys.stderr, flush=True)
    warm = {label: warm_pass_process(args, source, beams, label, tree, extra, env) for label, tree, extra, env in sides}
    from decode_throughput import machine

    report = {"machine": machine(), "model": args.model, "sentences": len(lines), "rounds": args.rounds,
              "before": {"tree": args.before, "env": before_env} if compare else None, "results": {}}
    for beam in beams:
        for label, *_ in sides:
            rs = runs[(label, beam)]
            names = list(rs[-1]["phases"])
            med = {n: statistics.median(x["phases"].get(n, 0.0) for x in rs) for n in names}
            wall = statistics.median(x["wall"] for x in rs)
            w = warm[label][beam]["median"]
            ratio = wall / w
            report["results"][f"{label} beam{beam}"] = {
                "wall": [round(x["wall"], 2) for x in rs], "wall_median": round(wall, 2),
                "cpu_median": round(statistics.median(x["cpu"] for x in rs), 2),
                "phases_median": {n: round(v, 2) for n, v in med.items()},
                "warm_pass": [round(x, 2) for x in warm[label][beam]["seconds"]], "warm_median": round(w, 2),
                "process_over_warm": round(ratio, 2)}
            shown = ", ".join(f"{n} {v:.2f}" for n, v in med.items())
            print(f"beam {beam} {label}: whole process {wall:.2f} s (median of {len(rs)}), warm pass "
                  f"{w:.2f} s, ratio {ratio:.2f}x" + (f"; phases: {shown}" if shown else ""))
        if compare:
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
