"""The machine's float32 matmul rate with TensorFlow (the denominator of our utilization).

    python tools/bench/matmul_rate.py [--n 2048] [--repeats 10]
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def matmul_gflops(n=2048, repeats=10):
    import tensorflow as tf

    a = tf.random.normal((n, n))
    b = tf.random.normal((n, n))

    @tf.function
    def mm(a, b):
        return tf.matmul(a, b)

    mm(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        mm(a, b).numpy()
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e9


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    print(f"float32 {args.n}^3 matmul, best of {args.repeats}: {matmul_gflops(args.n, args.repeats):.1f} GFLOP/s")
