"""``tft status``: where training runs stand, read from their directories alone (no
TensorFlow, no model; instant, and safe beside a running training).

    tft status runs/multi30k_tiny                 # one run
    tft status runs/seed*                         # several
    tft status runs/multi30k_tiny --json -        # everything, as JSON on stdout

For each run: its state (training now, finished by the update limit or early stopping,
stopped by the time budget, a signal or an error and resumable, or cut off without a
recorded end), the newest backup (the update a resumed run starts from) and its age, the
latest and best validation evaluation with the early-stopping count, the checkpoints kept,
and its sittings (each training command's span, updates, speed and host).
"""

from __future__ import annotations

import argparse
import json
import sys

from tf_transformer.cli._common import plain


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = plain(__doc__.split("\n\n", 1)[1])
    parser.add_argument("runs", nargs="+", metavar="RUN", help="run directories (tft train --model-dir)")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write every run's status as JSON to FILE ('-': stdout, instead of the text)")


def run(args: argparse.Namespace) -> int:
    from tf_transformer.cli._common import check_output_file
    from tf_transformer.training.status import describe_status, run_state, run_status

    check_output_file(args.json, "--json")  # before anything is printed
    statuses = [run_status(path) for path in args.runs]  # a bad directory: one line, exit 2, nothing printed
    for status in statuses:
        status["state"] = run_state(status)
    if args.json != "-":
        print("\n\n".join(describe_status(s) for s in statuses))
    if args.json:
        text = json.dumps(statuses if len(statuses) > 1 else statuses[0], indent=1) + "\n"
        if args.json == "-":
            sys.stdout.write(text)
        else:
            from tf_transformer.io import atomic_write

            atomic_write(args.json, text)
    return 0
