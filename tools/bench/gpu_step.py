"""One training step of our Transformer under JAX (no TensorFlow), for a lent GPU.

    KERAS_BACKEND=jax python tools/bench/gpu_step.py [--config base] [--tokens 25000] [--length 50]
                                              [--steps 20] [--warmup 3] [--policy mixed_bfloat16]
    KERAS_BACKEND=jax python tools/bench/gpu_step.py --smoke     # tiny shapes, any CPU, seconds

Run it through ``tools/bench/gpu_step.sh``, which installs the carried Keras wheels first.

The model is ``tf_transformer.model.Transformer`` (written in ``keras.ops`` only), run
by Keras' JAX backend. The step is stateless JAX and touches no TensorFlow:
``model.stateless_call`` for the forward pass, our label-smoothed loss
(``tf_transformer.training.losses.label_smoothed_loss``, ``keras.ops``), ``jax.value_and_grad``
for the backward pass, and Adam (beta 0.9/0.98, eps 1e-9) with the paper's learning-rate
schedule written in ``jax.numpy``; the whole step is one ``jax.jit`` (= one XLA program)
with the parameter and optimizer buffers donated. Mixed precision: ``mixed_bfloat16``
keeps float32 weights and Adam moments and computes in bfloat16; logits, softmax and
the loss are float32.

The batch is ``tokens // length`` random sentence pairs of ``length`` source and target
tokens, no padding (the paper's ~25,000 source + ~25,000 target tokens per step, here on
one GPU instead of eight). Timed: the median of ``--steps`` steps after ``--warmup``
(compilation), each ended by ``block_until_ready``.

Reported: step time, target tokens/s, model FLOPs per step (the analytic matmul count of
``tools/bench/train_throughput.py``: forward x 3), MFU against the H200's dense bf16 peak of
989 TFLOP/s (NVIDIA's H200 SXM datasheet figure: 1,979 TFLOP/s "with sparsity", halved
for dense) and against a bf16 matmul rate measured on the spot, and the projected time for
the paper's 100,000 base steps (paper: 12 hours on 8 x P100, section 5.2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository: tools/bench/../..
sys.path[:0] = [ROOT, HERE]

H200_BF16_DENSE_TFLOPS = 989.0  # vendor datasheet (H200 SXM), dense = half the "with sparsity" figure
PAPER_BASE_STEPS = 100_000
PAPER_BASE_HOURS = 12.0


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="base", help="preset or YAML path (its model section is used)")
    ap.add_argument("--vocab-size", type=int, default=37000, help="paper's shared BPE vocabulary for En-De")
    ap.add_argument("--tokens", type=int, default=25000, help="source tokens = target tokens per step")
    ap.add_argument("--length", type=int, default=50, help="sentence length; batch = tokens // length")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--policy", default="mixed_bfloat16", help="Keras dtype policy (float32 to compare)")
    ap.add_argument("--warmup-steps", type=int, default=4000, help="learning-rate warmup of the schedule")
    ap.add_argument("--matmul-n", type=int, default=8192, help="size of the bf16 matmul rate check; 0 = skip")
    ap.add_argument("--smoke", action="store_true", help="tiny model and batch, runs on a CPU in seconds")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.smoke:
        args.tokens, args.length, args.steps, args.warmup, args.matmul_n = 64, 8, 2, 1, 256
    return args


def build_model(args):
    import keras

    from tf_transformer.config import load_config
    from tf_transformer.model import Transformer

    keras.mixed_precision.set_global_policy(args.policy)
    cfg = load_config(args.config).model
    cfg = dataclasses.replace(cfg, vocab_size=args.vocab_size)
    if args.smoke:
        cfg = dataclasses.replace(cfg, vocab_size=128, d_model=32, num_layers=2, num_heads=4, d_ff=64)
    model = Transformer.from_config_section(cfg)
    model.build()
    return model, cfg


def make_train_step(model, cfg, label_smoothing, warmup_steps):
    """A pure function ``(params, state, m, v, step, src, tgt_in, y) -> (..., loss)``, jitted."""
    import jax
    import jax.numpy as jnp

    from tf_transformer.training.losses import label_smoothed_loss

    b1, b2, eps = 0.9, 0.98, 1e-9

    def loss_fn(params, state, src, tgt_in, y):
        logits, state = model.stateless_call(params, state, (src, tgt_in), training=True)
        return label_smoothed_loss(y, logits, label_smoothing, pad_id=0), state

    def learning_rate(step):  # paper section 5.3, step counted from 1
        s = step.astype(jnp.float32)
        return cfg.d_model ** -0.5 * jnp.minimum(s ** -0.5, s * warmup_steps ** -1.5)

    def train_step(params, state, m, v, step, src, tgt_in, y):
        (loss, state), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, src, tgt_in, y)
        step = step + 1
        lr = learning_rate(step)
        c1 = 1.0 - b1 ** step.astype(jnp.float32)
        c2 = 1.0 - b2 ** step.astype(jnp.float32)
        m = [b1 * mi + (1.0 - b1) * g for mi, g in zip(m, grads)]
        v = [b2 * vi + (1.0 - b2) * g * g for vi, g in zip(v, grads)]
        params = [p - lr * (mi / c1) / (jnp.sqrt(vi / c2) + eps) for p, mi, vi in zip(params, m, v)]
        return params, state, m, v, step, loss

    return jax.jit(train_step, donate_argnums=(0, 1, 2, 3))


def bf16_matmul_tflops(n, repeats=10):
    """Best-of-``repeats`` bf16 ``n^3`` matmul rate of the default JAX device, TFLOP/s."""
    import jax
    import jax.numpy as jnp

    ka, kb = jax.random.split(jax.random.PRNGKey(0))
    a = jax.random.normal(ka, (n, n), jnp.bfloat16)
    b = jax.random.normal(kb, (n, n), jnp.bfloat16)
    mm = jax.jit(lambda a, b: a @ b)
    mm(a, b).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        mm(a, b).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best / 1e12


def main(argv=None):
    args = parse_args(argv)
    import jax
    import jax.numpy as jnp
    import keras
    import numpy as np
    from train_throughput import forward_flops

    device = jax.devices()[0]
    print(f"jax {jax.__version__}, keras {keras.__version__} (backend {keras.backend.backend()}), "
          f"device {device.device_kind} ({device.platform}), policy {args.policy}", flush=True)
    if keras.backend.backend() != "jax":
        raise SystemExit("set KERAS_BACKEND=jax (this benchmark is the JAX/XLA path)")

    model, cfg = build_model(args)
    batch = max(1, args.tokens // args.length)
    tokens = batch * args.length
    params = [v.value for v in model.trainable_variables]
    state = [v.value for v in model.non_trainable_variables]
    m = [jnp.zeros_like(p) for p in params]
    v = [jnp.zeros_like(p) for p in params]
    step = jnp.array(0, jnp.int32)
    n_params = int(sum(np.prod(p.shape) for p in params))

    rng = np.random.default_rng(0)
    src = jnp.asarray(rng.integers(4, cfg.vocab_size, (batch, args.length)), jnp.int32)
    y = jnp.asarray(rng.integers(4, cfg.vocab_size, (batch, args.length)), jnp.int32)
    tgt_in = jnp.concatenate([jnp.full((batch, 1), 2, jnp.int32), y[:, :-1]], axis=1)

    train_step = make_train_step(model, cfg, 0.1, args.warmup_steps)
    flops = 3 * forward_flops(batch, args.length, args.length, cfg.d_model, cfg.num_layers, cfg.d_ff,
                              cfg.vocab_size)
    print(f"model: d_model {cfg.d_model}, {cfg.num_layers}+{cfg.num_layers} layers, {cfg.num_heads} heads, "
          f"d_ff {cfg.d_ff}, vocab {cfg.vocab_size}, {n_params / 1e6:.1f}M parameters; batch {batch}x{args.length}"
          f" = {tokens} source + {tokens} target tokens; {flops / 1e12:.2f} TFLOP/step (3 x forward matmuls)",
          flush=True)

    times, losses = [], []
    t_compile = time.perf_counter()
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        params, state, m, v, step, loss = train_step(params, state, m, v, step, src, tgt_in, y)
        loss.block_until_ready()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss))
        if i == 0:
            print(f"first step (compile + run) {times[0]:.1f} s, loss {losses[0]:.3f}", flush=True)
    warm_s = time.perf_counter() - t_compile - sum(times[args.warmup:])
    timed = times[args.warmup:]
    step_s = statistics.median(timed)
    if not all(np.isfinite(losses)):
        raise SystemExit(f"non-finite loss: {losses}")

    result = dict(
        device=device.device_kind, platform=device.platform, jax=jax.__version__, keras=keras.__version__,
        policy=args.policy, batch=batch, length=args.length, tokens=tokens, params=n_params,
        flops_per_step=flops, step_s=step_s, step_s_min=min(timed), step_s_max=max(timed),
        warmup_s=warm_s, tokens_per_s=tokens / step_s, model_tflops=flops / step_s / 1e12,
        mfu_vs_peak=flops / step_s / 1e12 / H200_BF16_DENSE_TFLOPS,
        projected_100k_hours=PAPER_BASE_STEPS * step_s / 3600, first_loss=losses[0], last_loss=losses[-1],
    )
    try:
        stats = device.memory_stats() or {}
        result["peak_memory_gib"] = stats.get("peak_bytes_in_use", 0) / 2 ** 30
    except Exception:  # noqa: BLE001 - not every backend reports memory
        pass
    if args.matmul_n:
        result["measured_bf16_matmul_tflops"] = bf16_matmul_tflops(args.matmul_n)
        result["mfu_vs_measured"] = result["model_tflops"] / result["measured_bf16_matmul_tflops"]

    print(f"step: median {step_s * 1e3:.1f} ms of {len(timed)} (min {min(timed) * 1e3:.1f}, "
          f"max {max(timed) * 1e3:.1f}); loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print(f"throughput: {result['tokens_per_s']:,.0f} target tokens/s; {result['model_tflops']:.1f} model TFLOP/s")
    line = f"MFU: {result['mfu_vs_peak']:.1%} of {H200_BF16_DENSE_TFLOPS:.0f} TFLOP/s (H200 bf16 dense, vendor)"
    if "measured_bf16_matmul_tflops" in result:
        line += (f"; {result['mfu_vs_measured']:.1%} of the {result['measured_bf16_matmul_tflops']:.0f} TFLOP/s "
                 f"measured here ({args.matmul_n}^3 bf16 matmul)")
    print(line)
    if "peak_memory_gib" in result:
        print(f"peak device memory {result['peak_memory_gib']:.1f} GiB")
    print(f"projected {PAPER_BASE_STEPS:,} steps of {tokens} tokens: {result['projected_100k_hours']:.2f} h on one "
          f"{device.device_kind} (paper: {PAPER_BASE_HOURS:.0f} h on 8 x P100, ~0.4 s/step)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
        print(f"wrote {args.json}")
    return result


if __name__ == "__main__":
    main()
