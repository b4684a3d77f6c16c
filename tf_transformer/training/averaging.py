"""Checkpoint averaging (paper section 6.1: the base models average the last 5 checkpoints,
written at 10-minute intervals; the big models the last 20), behind ``tft average``.

::

    from tf_transformer.training.averaging import average_run
    average_run("runs/base", last=5)                     # -> runs/base/averaged.keras

The average is the element-wise arithmetic mean of every weight, computed in float64.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from tf_transformer.errors import UserError
from tf_transformer.io import load_weights, read_run_config, save_model, save_weights


def average_checkpoints(model, paths: Sequence, progress=None):
    """Set ``model``'s weights to the mean of the weight files ``paths``
    (``.weights.h5`` written by ``model.save_weights`` for the same architecture).
    A truncated file, or one holding NaN or infinity, is refused, naming it. Returns ``model``."""
    if not paths:
        raise UserError("no checkpoints to average")
    if not model.built:
        model.build()
    total = None
    for i, path in enumerate(paths):
        load_weights(model, path, "checkpoint")  # complete, loadable and finite, or it names the file
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


def average_run(model_dir, last: Optional[int] = None, output=None, progress=None) -> dict:
    """Average the last ``last`` (default ``train.average_last``) checkpoints of the run in
    ``model_dir`` and save the result to ``output`` (default ``model_dir/averaged.keras``;
    a name ending in ``.weights.h5`` saves weights only). Returns a summary dict."""
    from tf_transformer.model import Transformer
    from tf_transformer.training.callbacks import list_checkpoints

    start = time.time()
    model_dir = Path(model_dir)
    cfg = read_run_config(model_dir)
    last = int(last or cfg.train.average_last)
    if last < 1:
        raise UserError(f"last={last}: must be >= 1")
    output = Path(output) if output else model_dir / "averaged.keras"
    if not (str(output).endswith(".weights.h5") or output.suffix == ".keras"):  # before reading any checkpoint
        raise UserError(f"output {output}: expected a name ending in .keras or .weights.h5")
    found = list_checkpoints(model_dir / "checkpoints")
    if not found:
        raise UserError(f"no checkpoints (ckpt-<step>.weights.h5) in {model_dir / 'checkpoints'}")
    chosen = found[-last:]
    if len(chosen) < last and progress:
        progress(f"average: only {len(chosen)} checkpoint(s) in {model_dir / 'checkpoints'}, averaging all of them")
    model = Transformer.from_config_section(cfg.model)
    model.build()
    average_checkpoints(model, [p for _, p in chosen], progress)
    if str(output).endswith(".weights.h5"):
        save_weights(model, output)
    else:
        save_model(model, output)
    steps = [s for s, _ in chosen]
    return {
        "output": output, "count": len(chosen), "steps": steps, "seconds": time.time() - start,
        "summary": f"averaged {len(chosen)} checkpoint(s) of {model_dir} (steps {steps[0]}..{steps[-1]}) "
                   f"into {output}",
    }
