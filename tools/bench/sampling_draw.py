"""What one sampling draw costs: ways to pick one token per row of ``[rows, vocab]`` logits.

    python tools/bench/sampling_draw.py [--rows 64] [--vocab 10000] [--repeats 200]

Each variant inside a ``tf.function`` (graph mode, as decoding runs), after a warm-up call;
milliseconds per call, median of ``--repeats``:

- ``gumbel``: Gumbel-max on one stateless uniform tensor (what sampling did before each
  sentence had its own random numbers: one uniform per token, shared seed per batch);
- ``cumsum float32`` / ``cumsum float64``: the inverse CDF with one ``tf.cumsum`` over the
  whole vocabulary (one uniform per row);
- ``two-level`` (what ``tf_transformer.decoding.greedy`` does: ``_inverse_cdf``): sums of
  blocks of 128 tokens, then one block; the fraction of rows where it picks the same token as
  ``cumsum float64`` is printed too;
- ``nucleus 0.9 floor`` (``_nucleus_floor``) and ``tf.sort`` of the rows, for scale.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_throughput import machine  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--vocab", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=200)
    args = p.parse_args(argv)

    import numpy as np
    import tensorflow as tf

    from tf_transformer.decoding.greedy import _inverse_cdf, _nucleus_floor

    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(0, 2, (args.rows, args.vocab)).astype(np.float32))
    u = tf.constant(rng.random(args.rows))

    def inverse_cdf(dtype):
        def pick():
            weights = tf.cast(tf.exp(x - tf.reduce_max(x, axis=-1, keepdims=True)), dtype)
            upto = tf.cumsum(weights, axis=-1)
            return tf.reduce_sum(tf.cast(upto < tf.cast(u, dtype)[:, None] * upto[:, -1:], tf.int32), axis=-1)
        return pick

    def gumbel():
        noise = tf.random.stateless_uniform(tf.shape(x), (1, 2), minval=1.1754944e-38, maxval=1.0)
        return tf.argmax(x - tf.math.log(-tf.math.log(noise)), axis=-1, output_type=tf.int32)

    variants = {"gumbel": gumbel, "cumsum float32": inverse_cdf(tf.float32),
                "cumsum float64": inverse_cdf(tf.float64), "two-level": lambda: _inverse_cdf(x, u),
                "nucleus 0.9 floor": lambda: _nucleus_floor(x, 0.9),
                "tf.sort": lambda: tf.sort(x, axis=-1, direction="DESCENDING")}
    print(f"| variant ([{args.rows}, {args.vocab}]) | ms per call (median of {args.repeats}) |")
    print("|---|---:|")
    picked = {}
    for name, fn in variants.items():
        graph = tf.function(fn, autograph=False)
        picked[name] = graph().numpy()
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            graph()
            times.append(time.perf_counter() - start)
        print(f"| {name} | {1000 * statistics.median(times):.3f} |", flush=True)
    same = float(np.mean(picked["two-level"] == picked["cumsum float64"]))
    print(f"\ntwo-level picks the same token as cumsum float64 in {same:.1%} of the rows")
    print(f"machine: {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
