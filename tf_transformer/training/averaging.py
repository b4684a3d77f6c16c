"""``tft average``: average the last N checkpoints of a run into one model (paper section 6.1:
the base models average the last 5 checkpoints, written at 10-minute intervals; the big
models the last 20).

::

    tft average --model-dir runs/base --last 5            # -> runs/base/averaged.keras

The average is the element-wise arithmetic mean of every weight, computed in float64.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from tf_transformer.errors import UserError


def average_checkpoints(model, paths: Sequence, progress=None):
    """Set ``model``'s weights to the mean of the weight files ``paths``
    (``.weights.h5`` written by ``model.save_weights`` for the same architecture).
    Returns ``model``."""
    if not paths:
        raise UserError("no checkpoints to average")
    if not model.built:
        model.build()
    total = None
    for i, path in enumerate(paths):
        try:
            model.load_weights(str(path))
        except Exception as e:  # h5py/keras raise several types for unreadable or mismatched files
            raise UserError(f"cannot load checkpoint {path} into the model: {e}") from None
        values = [np.asarray(w.numpy(), dtype=np.float64) for w in model.weights]
        if total is None:
            total = values
        else:
            for t, v in zip(total, values):
                t += v
        if progress:
            progress(f"average: read {i + 1}/{len(paths)} {path}")
    model.set_weights([(t / len(paths)).astype(w.dtype) for t, w in zip(total, model.weights)])
    return model


def _load_run_config(model_dir: Path):
    from tf_transformer.config import load_config

    path = model_dir / "config.yaml"
    if not path.is_file():
        raise UserError(f"{path} does not exist: --model-dir must be a directory written by tft train")
    return load_config(str(path), require_vocab=True)


def average_run(model_dir, last: Optional[int] = None, output=None, progress=None) -> dict:
    """Average the last ``last`` (default ``train.average_last``) checkpoints of the run in
    ``model_dir`` and save the result to ``output`` (default ``model_dir/averaged.keras``;
    a name ending in ``.weights.h5`` saves weights only). Returns a summary dict."""
    from tf_transformer.model import Transformer
    from tf_transformer.training.callbacks import list_checkpoints

    start = time.time()
    model_dir = Path(model_dir)
    cfg = _load_run_config(model_dir)
    last = int(last or cfg.train.average_last)
    if last < 1:
        raise UserError(f"--last {last} must be >= 1")
    found = list_checkpoints(model_dir / "checkpoints")
    if not found:
        raise UserError(f"no checkpoints (ckpt-<step>.weights.h5) in {model_dir / 'checkpoints'}")
    chosen = found[-last:]
    if len(chosen) < last and progress:
        progress(f"average: only {len(chosen)} checkpoint(s) in {model_dir / 'checkpoints'}, averaging all of them")
    model = Transformer.from_config_section(cfg.model)
    model.build()
    average_checkpoints(model, [p for _, p in chosen], progress)
    output = Path(output) if output else model_dir / "averaged.keras"
    output.parent.mkdir(parents=True, exist_ok=True)
    if str(output).endswith(".weights.h5"):
        model.save_weights(str(output), overwrite=True)
    elif output.suffix == ".keras":
        model.save(str(output))
    else:
        raise UserError(f"--output {output}: expected a name ending in .keras or .weights.h5")
    steps = [s for s, _ in chosen]
    return {
        "output": output, "count": len(chosen), "steps": steps, "seconds": time.time() - start,
        "summary": f"averaged {len(chosen)} checkpoint(s) of {model_dir} (steps {steps[0]}..{steps[-1]}) "
                   f"into {output}",
    }


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-dir", required=True, help="a run directory written by tft train")
    parser.add_argument("--last", type=int, default=None,
                        help="how many of the newest checkpoints to average (default: train.average_last "
                             "of the run's config.yaml; the paper: 5 base, 20 big)")
    parser.add_argument("--output", default=None,
                        help="where to write the averaged model (.keras, or .weights.h5 for weights only; "
                             "default MODEL_DIR/averaged.keras)")


def run(args: argparse.Namespace) -> int:
    def progress(msg):
        print(msg, file=sys.stderr, flush=True)

    result = average_run(args.model_dir, args.last, args.output, progress)
    print(result["summary"])
    return 0
