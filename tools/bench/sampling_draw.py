"""What one sampling draw costs: ways to pick one token per row of ``[rows, vocab]`` logits.

    python tools/bench/sampling_draw.py [--rows 64] [--vocab 10000] [--repeats 200]

Each variant inside a ``tf.function`` (graph mode, as decoding runs), after a warm-up call;
milliseconds per call, median of ``--repeats``:

- ``gumbel``: Gumbel-max on one stateless uniform tensor (what sampling did before each
  sentence had its own random numbers: one uniform per token, shared seed per batch);
- ``gumbel, per-row map_fn``: Gumbel-max on per-row noise from one stateless uniform call per
  row (a ``tf.map_fn``), the other way to give each row its own numbers;
- ``cumsum float32`` / ``cumsum float64``: the inverse CDF with one ``tf.cumsum`` over the
  whole vocabulary (one uniform per row);
- ``two-level``: the inverse CDF in two levels (sums of blocks of 128 tokens, then one
  block; what a first version of per-sentence sampling did); the fraction of rows where it
  picks the same token as ``cumsum float64`` is printed too;
- ``ours`` (``tf_transformer.decoding.greedy._draw``): Gumbel-max on per-row fmix32 noise, its
  integer ops one XLA kernel (on the CPU); ``ours, plain ops``: the same noise from TensorFlow's
  ops one by one (what it was before the kernel; the same tokens);
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

    from tf_transformer.decoding import greedy
    from tf_transformer.decoding.greedy import _draw, _nucleus_floor

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

    keys = tf.constant(rng.integers(-2**31, 2**31, size=args.rows), tf.int32)
    pairs = tf.constant(rng.integers(0, 2**31, size=(args.rows, 2)), tf.int64)

    def gumbel_of(noise):
        return tf.argmax(x - tf.math.log(-tf.math.log(noise)), axis=-1, output_type=tf.int32)

    def mapped():  # per row: a stateless uniform row of its own seed, in a tf.map_fn
        width = tf.shape(x)[1]
        return gumbel_of(tf.map_fn(lambda s: tf.random.stateless_uniform([width], s, minval=1.1754944e-38, maxval=1.0),
                                   pairs, fn_output_signature=tf.float32))

    def two_level(block=128):
        rows, width = tf.shape(x)[0], tf.shape(x)[1]
        weights = tf.exp(x - tf.reduce_max(x, axis=-1, keepdims=True))
        n = (width + block - 1) // block
        blocks = tf.reshape(tf.pad(weights, [[0, 0], [0, n * block - width]]), [rows, n, block])
        sums = tf.cast(tf.reduce_sum(blocks, axis=-1), tf.float64)
        upto = tf.cumsum(sums, axis=-1)
        target = u * upto[:, -1]
        which = tf.minimum(tf.reduce_sum(tf.cast(upto < target[:, None], tf.int32), axis=-1), n - 1)
        inside = tf.cumsum(tf.cast(tf.gather(blocks, which, batch_dims=1), tf.float64), axis=-1)
        left = target - (tf.gather(upto, which, batch_dims=1) - tf.gather(sums, which, batch_dims=1))
        return which * block + tf.reduce_sum(tf.cast(inside < left[:, None], tf.int32), axis=-1)

    log_probs = tf.nn.log_softmax(x)

    def plain_ops():  # _draw with the noise's integer ops left to TensorFlow, one op at a time
        tokens = tf.range(args.vocab, dtype=tf.int32)[None, :]
        return tf.argmax(log_probs - tf.math.log(-tf.math.log(greedy._uniform(keys, tokens))), axis=-1,
                         output_type=tf.int32)

    variants = {"gumbel": gumbel, "ours": lambda: _draw(log_probs, 0, 1.0, keys),
                "ours, plain ops": plain_ops, "gumbel, per-row map_fn": mapped,
                "cumsum float32": inverse_cdf(tf.float32),
                "cumsum float64": inverse_cdf(tf.float64), "two-level": two_level,
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
    print(f"ours and ours, plain ops pick the same token in {np.mean(picked['ours'] == picked['ours, plain ops']):.1%}"
          " of the rows")
    print(f"machine: {machine()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
