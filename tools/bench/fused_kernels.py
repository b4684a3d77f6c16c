"""Three kernels of the training step, each timed against the plain version it stands for.

    python tools/bench/fused_kernels.py [--rounds 15] [--threads 0] [--tokens 4096] [--vocab 8000] [--d-model 256]

All variants run in one process, round-robin (``--rounds`` rounds, median wall and process
CPU time per call), forward + backward inside one ``tf.function``, at the benchmark shape of
``tools/bench/train_throughput.py`` (4,096 tokens = 128 x 32, d_model 256, vocab 8,000):

* **head**: the tied pre-softmax projection and the label-smoothed loss (0.1) with its
  token statistics. ``head-logits`` = ``logits = h T^T`` then ``token_statistics`` on the
  logits (the unfused path); ``head-fused`` =
  ``losses.tied_head_statistics(targets, h, T)`` (what the trainer uses); ``head-matmuls`` = the
  same three matmuls with nothing else (the floor).
* **kernels** over one ``[tokens, vocab]`` float32 matrix: TensorFlow's fused sparse
  softmax-cross-entropy kernel, ``softmax``, ``reduce_logsumexp``, ``argmax``, ``exp`` and a
  multiply (what a plain elementwise pass costs).
* **layernorm**: ``keras.layers.LayerNormalization`` vs ``layers.normalization.LayerNorm``
  (closed-form gradient), on ``[128, 32, 256]``, objective ``sum(y * w)``.
* **qkv**: the fused self-attention projection split into q, k, v heads by strided slices
  (before) or ``ops.split`` (now).

Prints one table; ``--json`` writes the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=0, help="TensorFlow intra/inter-op threads (0: default)")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    import keras
    import numpy as np
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    from tf_transformer.layers.normalization import LayerNorm
    from tf_transformer.training.losses import tied_head_statistics, token_statistics

    rng = np.random.default_rng(0)
    n, d, v = args.tokens, args.d_model, args.vocab
    batch, length = n // 32, 32
    hidden = tf.constant(rng.normal(size=(batch, length, d)).astype("float32"))
    table = tf.Variable(rng.normal(size=(v, d)).astype("float32") * d ** -0.5)
    targets = tf.constant(rng.integers(1, v, size=(batch, length)).astype("int32"))
    logits2d = tf.constant(rng.normal(size=(n, v)).astype("float32"))
    labels = tf.reshape(targets, [-1])

    def head(stat_fn):
        @tf.function
        def f():
            with tf.GradientTape() as tape:
                tape.watch(hidden)
                loss = stat_fn()["loss_sum"]
            return tape.gradient(loss, [hidden, table])
        return f

    @tf.function
    def head_matmuls():
        h = tf.reshape(hidden, [-1, d])
        lg = tf.matmul(h, table, transpose_b=True)
        return tf.matmul(lg, table), tf.matmul(lg, h, transpose_a=True)

    def ln(layer):
        layer.build(hidden.shape)
        w = tf.constant(rng.normal(size=hidden.shape).astype("float32"))

        @tf.function
        def f():
            with tf.GradientTape() as tape:
                tape.watch(hidden)
                obj = tf.reduce_sum(layer(hidden) * w)
            return tape.gradient(obj, [hidden] + layer.trainable_variables)
        return f

    kernel = tf.Variable(rng.normal(size=(d, 3 * d)).astype("float32") * d ** -0.5)

    def qkv(split):
        @tf.function
        def f():
            with tf.GradientTape() as tape:
                tape.watch(hidden)
                y = tf.matmul(tf.reshape(hidden, [-1, d]), kernel)
                parts = (keras.ops.split(y, [d, 2 * d], axis=-1) if split
                         else (y[..., :d], y[..., d:2 * d], y[..., 2 * d:]))
                heads = [tf.transpose(tf.reshape(p, [batch, length, 4, d // 4]), [0, 2, 1, 3]) for p in parts]
                obj = sum(tf.reduce_sum(hh * (i + 1.0)) for i, hh in enumerate(heads))
            return tape.gradient(obj, hidden)
        return f

    variants = {
        "head-logits": head(lambda: token_statistics(targets, tf.matmul(hidden, table, transpose_b=True), 0.1, 0)),
        "head-fused": head(lambda: tied_head_statistics(targets, hidden, table, 0.1, 0)),
        "head-matmuls": head_matmuls,
        "kernel-sparse-xent": tf.function(lambda: tf.raw_ops.SparseSoftmaxCrossEntropyWithLogits(
            features=logits2d, labels=labels)[0]),
        "kernel-softmax": tf.function(lambda: tf.nn.softmax(logits2d)[:, 0]),
        "kernel-logsumexp": tf.function(lambda: tf.reduce_logsumexp(logits2d, axis=-1)),
        "kernel-argmax": tf.function(lambda: tf.argmax(logits2d, axis=-1)),
        "kernel-exp": tf.function(lambda: tf.exp(logits2d)[:, 0]),
        "kernel-mul": tf.function(lambda: (logits2d * 2.0)[:, 0]),
        "layernorm-keras": ln(keras.layers.LayerNormalization(epsilon=1e-6)),
        "layernorm-ours": ln(LayerNorm(epsilon=1e-6)),
        "qkv-slices": qkv(False),
        "qkv-split": qkv(True),
    }
    for f in variants.values():  # trace + warm up
        f()
        f()
    wall = {k: [] for k in variants}
    cpu = {k: [] for k in variants}
    for _ in range(args.rounds):
        for name, f in variants.items():
            t, c = time.perf_counter(), time.process_time()
            tf.nest.map_structure(lambda x: tf.convert_to_tensor(x).numpy(), f())
            wall[name].append(time.perf_counter() - t)
            cpu[name].append(time.process_time() - c)
    load = os.getloadavg()
    print(f"tokens {n}, d_model {d}, vocab {v}; {args.rounds} rounds; threads {args.threads or 'default'}; "
          f"load average at end {load[0]:.2f}")
    print(f"{'variant':22s}{'wall ms':>10s}{'CPU ms':>10s}")
    out = {}
    for name in variants:
        w, c = 1000 * float(np.median(wall[name])), 1000 * float(np.median(cpu[name]))
        out[name] = {"wall_ms": w, "cpu_ms": c}
        print(f"{name:22s}{w:10.1f}{c:10.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": out, "load": load}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
