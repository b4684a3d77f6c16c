"""The process environment for decoding, set before TensorFlow is imported.

A process that only decodes (``tft translate``, ``tft evaluate``, a script that loads a model
and translates) runs faster with TensorFlow's own CPU kernels than with oneDNN's::

    from tf_transformer.decoding import decoding_environment
    decoding_environment()          # first, before anything imports TensorFlow
    import keras, tensorflow as tf  # ...

This module imports nothing from TensorFlow.
"""

from __future__ import annotations

import os
import sys

__all__ = ["DECODING_ENVIRONMENT", "decoding_environment"]

#: What a process that only decodes sets before TensorFlow is imported (a user's own value wins).
#: ``TF_ENABLE_ONEDNN_OPTS=0``: TensorFlow's own (Eigen) CPU kernels instead of oneDNN's. A greedy
#: pass over Multi30k's test2016 meets about 1,500 matmul and softmax shapes (batches shrink as
#: sentences finish, the key/value cache grows by a position per step), and oneDNN prepares a
#: kernel the first time it meets each; at these small sizes it does not win that back. Measured
#: on a 2-core CPU: warm test2016 passes of the demo model 1.78x (greedy) and 1.38x (beam 4)
#: faster, of the Transformer-Tiny model 1.23x / 1.11x, whole ``tft translate`` processes 14-18%
#: shorter with the demo model, the same outputs (tools/bench/RESULTS.md, issue 15, sixth round).
#: Training keeps oneDNN.
DECODING_ENVIRONMENT = {"TF_ENABLE_ONEDNN_OPTS": "0"}


def decoding_environment() -> None:
    """Set :data:`DECODING_ENVIRONMENT` where the user has not. Nothing once TensorFlow is
    imported (it has read its environment by then, and the variables would only reach the
    processes this one starts): call it first in a process that only decodes."""
    if "tensorflow" in sys.modules:
        return
    for name, value in DECODING_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
