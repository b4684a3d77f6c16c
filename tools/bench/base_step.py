"""Time one forward+backward+Adam step of a preset (default: the paper's base) on a
4,096-token batch, on this machine's CPU.

    python tools/bench/base_step.py [--config base] [--tokens 4096] [--length 32] [--steps 3]

Prints wall seconds per step (after one warm-up step that traces the graph), the process's
CPU seconds per step (user+sys, both cores), and peak resident memory.
"""

import argparse
import os
import resource
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="base")
    ap.add_argument("--vocab-size", type=int, default=37000)
    ap.add_argument("--tokens", type=int, default=4096, help="source tokens = target tokens per batch")
    ap.add_argument("--length", type=int, default=32, help="sentence length (batch = tokens / length)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--jit", action="store_true", help="compile the step with XLA")
    args = ap.parse_args()

    import dataclasses

    import keras
    import numpy as np
    import tensorflow as tf

    from tf_transformer.config import load_config
    from tf_transformer.model import Transformer, count_parameters

    cfg = load_config(args.config)
    model = Transformer.from_config_section(dataclasses.replace(cfg.model, vocab_size=args.vocab_size))
    model.build()
    optimizer = keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    optimizer.build(model.trainable_variables)
    rows = args.tokens // args.length
    rng = np.random.default_rng(0)
    src = tf.constant(rng.integers(4, args.vocab_size, size=(rows, args.length)), tf.int32)
    tgt = tf.constant(rng.integers(4, args.vocab_size, size=(rows, args.length + 1)), tf.int32)

    @tf.function(jit_compile=args.jit)
    def step(src, tgt):
        with tf.GradientTape() as tape:
            logits = model((src, tgt[:, :-1]), training=True)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(tgt[:, 1:], logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    t0 = time.perf_counter()
    step(src, tgt).numpy()
    warm = time.perf_counter() - t0
    cpu0, t0 = time.process_time(), time.perf_counter()
    for _ in range(args.steps):
        step(src, tgt).numpy()
    wall = (time.perf_counter() - t0) / args.steps
    cpu = (time.process_time() - cpu0) / args.steps
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"config={args.config} params={count_parameters(model) / 1e6:.1f}M batch={rows}x{args.length} "
          f"(+{args.tokens} source, {args.tokens} target tokens) jit={args.jit}")
    print(f"first step (trace+run) {warm:.1f} s; steady step: wall {wall:.2f} s, process CPU {cpu:.2f} s, "
          f"{args.tokens / wall:,.0f} target tokens/s; peak RSS {rss:,.0f} MiB; cores={os.cpu_count()}")


if __name__ == "__main__":
    main()
