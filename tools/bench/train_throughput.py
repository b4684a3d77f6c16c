"""Training throughput, side by side: our Transformer vs PyTorch nn.Transformer vs keras-hub.

    python tools/bench/train_throughput.py [--systems all] [--steps 10] [--warmup 2] [--jit both]
                                     [--json results.json]

One training step = forward, backward, Adam update (beta 0.9/0.98, eps 1e-9) with a
label-smoothed (0.1) cross-entropy, at one shape for every system (default: d_model 256,
3+3 layers, 4 heads, d_ff 1024, vocab 8,000, 128 sentence pairs x 32 tokens = 4,096
source and 4,096 target tokens per batch, no padding, dropout 0.1). The batch is random
ids held in memory and repeated, so only the model step is timed.

Systems (``--systems`` takes a comma list of these names, or ``all``):

* ``ours-fit`` / ``ours-fit-xla``: ``tf_transformer.model.Transformer`` compiled with
  :class:`tf_transformer.training.losses.LabelSmoothedCrossEntropy` and trained by
  ``model.fit`` on a repeated in-memory ``tf.data`` set, ``jit_compile`` False / True.
* ``ours-step`` / ``ours-step-xla``: the same model and loss in a plain
  ``tf.function`` train step (GradientTape + ``optimizer.apply``), without Keras' fit loop.
* ``ours-trainer`` / ``ours-trainer-xla``: the package's own training path,
  ``tf_transformer.training.trainer.TrainingModel`` (token-weighted loss over the global
  batch, plus the perplexity and accuracy metrics it feeds) around the same model, trained
  by ``model.fit`` (no accumulation, no clipping), ``jit_compile`` False / True.
* ``torch``: PyTorch ``nn.Transformer`` (post-LN, ``norm_first=False``, ``batch_first``),
  one embedding table for source, target and output projection, ``sqrt(d)`` scaling,
  sinusoidal positions, ``CrossEntropyLoss(label_smoothing=0.1, ignore_index=0)``,
  ``torch.optim.Adam``, eager, ``torch.set_num_threads(--torch-threads)`` (default 2 = the
  cores of the machine these figures were first taken on). ``torch-1thread``: the same with
  one thread: on a machine shared with other jobs, PyTorch's OpenMP threads lose much time
  waiting for each other at every op, so one thread can be the faster peer there.
* ``kerashub-fit`` / ``kerashub-fit-xla``: keras-hub ``TokenAndPositionEmbedding`` (one
  instance shared by source and target, its tied table also the output projection via
  ``reverse=True``), 3 ``TransformerEncoder`` + 3 ``TransformerDecoder`` layers of the same
  width, a per-token ``categorical_crossentropy(one_hot(y), logits, label_smoothing=0.1)``
  masked by Keras' padding mask, ``model.fit`` with ``jit_compile`` False / True.

Prototypes (bench-only changes to our step, reported apart from "ours"; not in ``all``
unless ``--protos``): ``proto-fit-xlaloss`` and ``proto-step-xlaloss`` are ``ours-fit`` and
``ours-step`` with only the loss wrapped in its own ``tf.function(jit_compile=True)``: XLA
fuses the elementwise work over the [tokens, vocab] logits while the matmuls stay on
TensorFlow's (oneDNN) kernels, which are faster on this CPU than XLA's (see
``tools/bench/train_profile.py`` and RESULTS.md). (``proto-trainer-xlastats``, the same for the trainer's
statistics, was retired when ``TrainingModel`` moved to the fused tied head,
``losses.tied_head_statistics``, which does without XLA what it did; RESULTS.md.)

Each system runs in its own fresh Python process, one after another, so thread pools
and compiled graphs never mix; the float32 matmul rate (``tools/bench/matmul_rate.py``'s
``matmul_gflops``, TensorFlow, 2048^3) is measured the same way in the same invocation.
The first ``--warmup`` steps (tracing, XLA compilation) are not timed; the table reports
the median of ``--steps`` timed steps.

**FLOPs.** Matmul FLOPs of one forward pass, ``2*m*n*k`` per matmul, with ``B`` sentence
pairs, source length ``S``, target length ``T``, ``Ns = B*S``, ``Nt = B*T``::

    encoder layer:  8*Ns*d^2 (Q,K,V,O) + 4*B*S^2*d (scores QK^T and context PV) + 4*Ns*d*d_ff
    decoder layer:  8*Nt*d^2 + 4*B*T^2*d           (masked self-attention)
                  + 4*Nt*d^2 + 4*Ns*d^2 + 4*B*T*S*d  (cross: Q,O on target; K,V on memory)
                  + 4*Nt*d*d_ff                      (FFN)
    output:         2*Nt*d*V                          (tied pre-softmax projection)

and ``3 x forward`` for forward + backward (the backward pass does two matmuls per forward
matmul). Embedding lookups, softmax, LayerNorm, the loss and Adam are not counted (they are
not matmuls); the causal mask is not exploited by any system, so the full T x T scores count.
Utilization = these FLOPs / median step time / the measured matmul rate.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository: tools/bench/../..

OURS = ("ours-fit", "ours-fit-xla", "ours-step", "ours-step-xla", "ours-trainer", "ours-trainer-xla")
PEERS = ("torch", "torch-1thread", "kerashub-fit", "kerashub-fit-xla")
PROTOS = ("proto-fit-xlaloss", "proto-step-xlaloss")
SYSTEMS = OURS + PEERS + PROTOS
BOS = 2


# ----------------------------------------------------------------------------------------
# shape, FLOPs, data
# ----------------------------------------------------------------------------------------
def forward_flops(batch, source_length, target_length, d_model, num_layers, d_ff, vocab_size,
                  decoder_layers=None):
    """Matmul FLOPs of one forward pass (see the module docstring for the formula)."""
    b, s, t, d = batch, source_length, target_length, d_model
    ns, nt = b * s, b * t
    decoder_layers = num_layers if decoder_layers is None else decoder_layers
    encoder = 8 * ns * d * d + 4 * b * s * s * d + 4 * ns * d * d_ff
    decoder = (8 * nt * d * d + 4 * b * t * t * d
               + 4 * nt * d * d + 4 * ns * d * d + 4 * b * t * s * d
               + 4 * nt * d * d_ff)
    output = 2 * nt * d * vocab_size
    return num_layers * encoder + decoder_layers * decoder + output


def step_flops(args):
    """Training-step FLOPs: forward x 3."""
    return 3 * forward_flops(args.batch, args.length, args.length, args.d_model, args.layers, args.d_ff,
                             args.vocab)


def make_batch(args, seed=0):
    """Random ids in [4, vocab): ``source [B,S]``, ``target_in [B,T]`` (BOS + y[:-1]), ``target_out`` y."""
    import numpy as np

    rng = np.random.default_rng(seed)
    src = rng.integers(4, args.vocab, size=(args.batch, args.length)).astype("int32")
    y = rng.integers(4, args.vocab, size=(args.batch, args.length)).astype("int32")
    tgt_in = np.concatenate([np.full((args.batch, 1), BOS, "int32"), y[:, :-1]], axis=1)
    return src, tgt_in, y


# ----------------------------------------------------------------------------------------
# workers: each runs in its own process and prints one JSON line
# ----------------------------------------------------------------------------------------
class _Timer:
    """Collects per-step wall and process-CPU seconds."""

    def __init__(self):
        self.wall, self.cpu = [], []
        self._t, self._c = time.perf_counter(), time.process_time()

    def lap(self):
        t, c = time.perf_counter(), time.process_time()
        self.wall.append(t - self._t)
        self.cpu.append(c - self._c)
        self._t, self._c = t, c


def _our_loss(xla=False):
    """Our label-smoothed loss (training/losses.py), or a documented stand-in if absent.

    ``xla=True`` (prototypes): the same loss, its ``call`` compiled by XLA on its own.
    """
    if xla:
        import tensorflow as tf

        from tf_transformer.training.losses import LabelSmoothedCrossEntropy

        class XlaLabelSmoothedCrossEntropy(LabelSmoothedCrossEntropy):
            def __init__(self, *a, **kw):
                super().__init__(*a, **kw)
                self._compiled = tf.function(super().call, jit_compile=True)

            def call(self, y_true, y_pred):
                return self._compiled(y_true, y_pred)

        return XlaLabelSmoothedCrossEntropy(epsilon=0.1, pad_id=0), "losses.py, call compiled by XLA alone"
    try:
        from tf_transformer.training.losses import LabelSmoothedCrossEntropy

        return LabelSmoothedCrossEntropy(epsilon=0.1, pad_id=0), "tf_transformer.training.losses"
    except ImportError:  # pragma: no cover - only before training/losses.py landed
        import keras
        from keras import ops

        def loss(y_true, logits):
            # eps spread over the V-1 wrong tokens, padding ignored, mean per real token
            v = logits.shape[-1]
            logp = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
            onehot = ops.one_hot(ops.cast(y_true, "int32"), v)
            target = onehot * 0.9 + (1.0 - onehot) * (0.1 / (v - 1))
            mask = ops.cast(ops.not_equal(y_true, 0), "float32")
            per_token = -ops.sum(target * logp, axis=-1)
            return ops.sum(per_token * mask) / ops.maximum(ops.sum(mask), 1.0)

        return keras.losses.LossFunctionWrapper(loss, reduction="sum"), "bench stand-in"


def _adam_keras():
    import keras

    return keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)


def _fit_and_time(model, loss, args, jit):
    """``model.fit`` for warmup+steps batches of one repeated in-memory batch; per-step times."""
    import keras
    import tensorflow as tf

    src, tgt_in, y = make_batch(args)
    ds = tf.data.Dataset.from_tensors(((src, tgt_in), y)).repeat()
    model.compile(optimizer=_adam_keras(), loss=loss, jit_compile=jit)
    timer = [None]
    losses = []

    class StepTimer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            timer[0] = _Timer()

        def on_train_batch_end(self, batch, logs=None):
            losses.append(float(logs["loss"]))  # forces the step to finish before the clock
            timer[0].lap()

    model.fit(ds, epochs=1, steps_per_epoch=args.warmup + args.steps, verbose=0, callbacks=[StepTimer()])
    return timer[0], losses


def _count(weights):
    import numpy as np

    return int(sum(int(np.prod(w.shape)) for w in weights))


def _our_model(args):
    from tf_transformer.model import Transformer

    model = Transformer(vocab_size=args.vocab, d_model=args.d_model, num_layers=args.layers,
                        num_heads=args.heads, d_ff=args.d_ff, dropout=args.dropout)
    model.build()
    return model


def worker_ours_fit(args, jit, xla_loss=False):
    model = _our_model(args)
    loss, loss_source = _our_loss(xla_loss)
    timer, losses = _fit_and_time(model, loss, args, jit)
    return dict(timer=timer, losses=losses, params=_count(model.trainable_weights), loss_source=loss_source)


def worker_ours_trainer(args, jit):
    import tensorflow as tf

    from tf_transformer.training import trainer as trainer_module

    model = _our_model(args)
    trainer = trainer_module.TrainingModel(model, label_smoothing=0.1, nominal_tokens=float(args.batch * args.length))
    trainer.build()
    src, tgt_in, y = make_batch(args)
    ds = tf.data.Dataset.from_tensors(((src, tgt_in), y)).repeat()
    trainer.compile(optimizer=_adam_keras(), jit_compile=jit)
    timer, losses = [None], []
    import keras

    class StepTimer(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            timer[0] = _Timer()

        def on_train_batch_end(self, batch, logs=None):
            losses.append(float(logs["loss"]))
            timer[0].lap()

    trainer.fit(ds, epochs=1, steps_per_epoch=args.warmup + args.steps, verbose=0, callbacks=[StepTimer()])
    return dict(timer=timer[0], losses=losses, params=_count(model.trainable_weights),
                loss_source="training.trainer.TrainingModel")


def worker_ours_step(args, jit, xla_loss=False):
    import tensorflow as tf

    model = _our_model(args)
    loss_fn, loss_source = _our_loss(xla_loss)
    optimizer = _adam_keras()
    optimizer.build(model.trainable_variables)
    src, tgt_in, y = (tf.constant(a) for a in make_batch(args))
    variables = model.trainable_variables

    @tf.function(jit_compile=jit)
    def step(src, tgt_in, y):
        with tf.GradientTape() as tape:
            logits = model((src, tgt_in), training=True)
            loss = loss_fn(y, logits)
        grads = tape.gradient(loss, variables)
        optimizer.apply(grads, variables)
        return loss

    losses = []
    timer = _Timer()
    for _ in range(args.warmup + args.steps):
        losses.append(float(step(src, tgt_in, y)))
        timer.lap()
    return dict(timer=timer, losses=losses, params=_count(variables), loss_source=loss_source)


def build_torch_model(args):
    """PyTorch nn.Transformer with tied embeddings and sinusoidal positions (the peer)."""
    import torch
    from torch import nn

    class TiedTransformer(nn.Module):
        def __init__(self, vocab, d_model, heads, layers, d_ff, dropout, max_length=512):
            super().__init__()
            self.d_model = d_model
            self.embedding = nn.Embedding(vocab, d_model)
            nn.init.normal_(self.embedding.weight, std=d_model ** -0.5)
            self.core = nn.Transformer(d_model, heads, layers, layers, d_ff, dropout,
                                       batch_first=True, norm_first=False)
            self.dropout = nn.Dropout(dropout)
            pos = torch.arange(max_length, dtype=torch.float32)[:, None]
            inv = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
            pe = torch.zeros(max_length, d_model)
            pe[:, 0::2] = torch.sin(pos * inv)
            pe[:, 1::2] = torch.cos(pos * inv)
            self.register_buffer("pe", pe)

        def embed(self, ids):
            x = self.embedding(ids) * math.sqrt(self.d_model) + self.pe[: ids.shape[1]]
            return self.dropout(x)

        def forward(self, src, tgt_in):
            t = tgt_in.shape[1]
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)  # True = blocked
            src_pad, tgt_pad = src == 0, tgt_in == 0
            h = self.core(self.embed(src), self.embed(tgt_in), tgt_mask=causal,
                          src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                          memory_key_padding_mask=src_pad)
            return nn.functional.linear(h, self.embedding.weight)

    return TiedTransformer(args.vocab, args.d_model, args.heads, args.layers, args.d_ff, args.dropout)


def worker_torch(args, threads=None):
    import torch

    torch.set_num_threads(threads or args.torch_threads)
    torch.manual_seed(0)
    model = build_torch_model(args)
    model.train()
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1, ignore_index=0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src, tgt_in, y = (torch.from_numpy(a).long() for a in make_batch(args))
    losses = []
    timer = _Timer()
    for _ in range(args.warmup + args.steps):
        optimizer.zero_grad(set_to_none=True)
        logits = model(src, tgt_in)
        loss = criterion(logits.reshape(-1, args.vocab), y.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        timer.lap()
    return dict(timer=timer, losses=losses, params=sum(p.numel() for p in model.parameters()),
                threads=torch.get_num_threads(), torch_version=torch.__version__)


def build_kerashub_model(args):
    """keras-hub layers, 3+3, one shared TokenAndPositionEmbedding, tied output projection."""
    import keras
    import keras_hub

    src = keras.Input((None,), dtype="int32", name="source")
    tgt = keras.Input((None,), dtype="int32", name="target_input")
    embedding = keras_hub.layers.TokenAndPositionEmbedding(args.vocab, max(512, args.length), args.d_model,
                                                          mask_zero=True, name="embedding")
    x = keras.layers.Dropout(args.dropout)(embedding(src))
    for i in range(args.layers):
        x = keras_hub.layers.TransformerEncoder(args.d_ff, args.heads, dropout=args.dropout,
                                                name=f"encoder_{i}")(x)
    h = keras.layers.Dropout(args.dropout)(embedding(tgt))
    for i in range(args.layers):
        h = keras_hub.layers.TransformerDecoder(args.d_ff, args.heads, dropout=args.dropout,
                                                name=f"decoder_{i}")(h, x)
    logits = embedding.token_embedding(h, reverse=True)
    return keras.Model((src, tgt), logits)


def worker_kerashub_fit(args, jit):
    import keras
    from keras import ops

    vocab = args.vocab

    def smoothed_cce(y_true, logits):
        # what a Keras user writes for sparse labels with smoothing: one-hot + categorical CE
        return keras.losses.categorical_crossentropy(ops.one_hot(ops.cast(y_true, "int32"), vocab), logits,
                                                     from_logits=True, label_smoothing=0.1)

    model = build_kerashub_model(args)
    timer, losses = _fit_and_time(model, smoothed_cce, args, jit)
    import keras_hub

    return dict(timer=timer, losses=losses, params=_count(model.trainable_weights),
                keras_hub_version=keras_hub.__version__)


def worker_matmul(args):
    sys.path.insert(0, HERE)
    from matmul_rate import matmul_gflops

    return dict(tf_gflops=matmul_gflops(args.matmul_n, args.matmul_repeats))


def worker_matmul_torch(args):
    import torch

    torch.set_num_threads(args.torch_threads)
    n = args.matmul_n
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = float("inf")
    for _ in range(args.matmul_repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return dict(torch_gflops=2 * n ** 3 / best / 1e9)


def run_worker(name, args):
    workers = {
        "ours-fit": lambda: worker_ours_fit(args, False),
        "ours-fit-xla": lambda: worker_ours_fit(args, True),
        "ours-step": lambda: worker_ours_step(args, False),
        "ours-step-xla": lambda: worker_ours_step(args, True),
        "ours-trainer": lambda: worker_ours_trainer(args, False),
        "ours-trainer-xla": lambda: worker_ours_trainer(args, True),
        "torch": lambda: worker_torch(args),
        "torch-1thread": lambda: worker_torch(args, threads=1),
        "kerashub-fit": lambda: worker_kerashub_fit(args, False),
        "kerashub-fit-xla": lambda: worker_kerashub_fit(args, True),
        "proto-fit-xlaloss": lambda: worker_ours_fit(args, False, xla_loss=True),
        "proto-step-xlaloss": lambda: worker_ours_step(args, False, xla_loss=True),
        "matmul": lambda: worker_matmul(args),
        "matmul-torch": lambda: worker_matmul_torch(args),
    }
    t0 = time.perf_counter()
    out = workers[name]()
    timer = out.pop("timer", None)
    if timer is not None:
        timed_wall = timer.wall[args.warmup:]
        timed_cpu = timer.cpu[args.warmup:]
        out.update(
            warmup_s=sum(timer.wall[: args.warmup]),
            step_s=statistics.median(timed_wall),
            step_s_min=min(timed_wall),
            step_s_max=max(timed_wall),
            cpu_per_wall=sum(timed_cpu) / sum(timed_wall),
            steps=len(timed_wall),
            first_loss=out["losses"][0],
            last_loss=out["losses"][-1],
        )
        out.pop("losses")
    out["system"] = name
    out["process_s"] = time.perf_counter() - t0
    return out


# ----------------------------------------------------------------------------------------
# driver
# ----------------------------------------------------------------------------------------
def _worker_argv(args, name):
    argv = [sys.executable, os.path.abspath(__file__), "--worker", name]
    for key in ("steps", "warmup", "batch", "length", "vocab", "d_model", "layers", "heads", "d_ff",
                "dropout", "torch_threads", "matmul_n", "matmul_repeats"):
        argv += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    return argv


def _load():
    try:
        return os.getloadavg()
    except OSError:  # pragma: no cover
        return (float("nan"),) * 3


def select_systems(spec, jit, protos=False):
    if spec == "all":
        names = OURS + PEERS + (PROTOS if protos else ())
    else:
        names = tuple(s.strip() for s in spec.split(",") if s.strip())
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise SystemExit(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)} or 'all'")
    if jit == "on":
        names = tuple(n for n in names if n.endswith("-xla") or n.startswith(("torch", "proto")))
    elif jit == "off":
        names = tuple(n for n in names if not n.endswith("-xla"))
    return names


def format_table(results, args, tf_gflops, torch_gflops=None):
    flops = step_flops(args)
    tokens = args.batch * args.length
    ok = {r["system"]: r for r in results if "step_s" in r}
    ours = [ok[n] for n in OURS if n in ok]
    peers = [ok[n] for n in PEERS if n in ok]
    best_ours = max(ours, key=lambda r: tokens / r["step_s"]) if ours else None
    lines = [f"{'system':<24}{'step s':>8}{'tokens/s':>10}{'GFLOP/s':>9}{'util':>7}{'CPU/wall':>9}"
             f"{'best ours/this':>15}"]
    for r in results:
        if "step_s" not in r:
            lines.append(f"{r['system']:<24}  FAILED: {r.get('error', '?')}")
            continue
        rate = tokens / r["step_s"]
        gflops = flops / r["step_s"] / 1e9
        util = gflops / tf_gflops if tf_gflops else float("nan")
        ratio = (tokens / best_ours["step_s"]) / rate if best_ours else float("nan")
        lines.append(f"{r['system']:<24}{r['step_s']:>8.2f}{rate:>10,.0f}{gflops:>9.1f}{util:>7.0%}"
                     f"{r['cpu_per_wall']:>9.2f}{ratio:>15.2f}")
    summary = []
    if best_ours and peers:
        fastest = max(peers, key=lambda r: tokens / r["step_s"])
        ratio = fastest["step_s"] / best_ours["step_s"]
        summary.append(f"best ours: {best_ours['system']} {tokens / best_ours['step_s']:,.0f} tokens/s; "
                       f"fastest peer: {fastest['system']} {tokens / fastest['step_s']:,.0f} tokens/s; "
                       f"ratio {ratio:.2f} (goal >= 1.2)")
    if best_ours and tf_gflops:
        util = flops / best_ours["step_s"] / 1e9 / tf_gflops
        summary.append(f"our FLOP utilization: {flops / 1e9:.1f} GFLOP/step / {best_ours['step_s']:.2f} s = "
                       f"{flops / best_ours['step_s'] / 1e9:.1f} GFLOP/s = {util:.0%} of the measured "
                       f"TF float32 matmul rate {tf_gflops:.1f} GFLOP/s (goal >= 60%)")
    protos = [ok[n] for n in PROTOS if n in ok]
    if protos and peers:
        best_proto = max(protos, key=lambda r: tokens / r["step_s"])
        fastest = max(peers, key=lambda r: tokens / r["step_s"])
        line = (f"best prototype: {best_proto['system']} {tokens / best_proto['step_s']:,.0f} tokens/s, "
                f"{fastest['step_s'] / best_proto['step_s']:.2f}x the fastest peer")
        if tf_gflops:
            line += f", {flops / best_proto['step_s'] / 1e9 / tf_gflops:.0%} utilization"
        summary.append(line)
    if torch_gflops:
        summary.append(f"(PyTorch float32 matmul rate, same run: {torch_gflops:.1f} GFLOP/s)")
    return "\n".join(lines + [""] + summary)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--systems", default="all", help=f"comma list of {', '.join(SYSTEMS)}; or 'all'")
    ap.add_argument("--protos", action="store_true", help="with --systems all: also run the prototypes")
    ap.add_argument("--jit", choices=("both", "on", "off"), default="both",
                    help="keep only the XLA variants (on; torch stays), only the non-XLA ones (off), or both")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per system (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed first steps (tracing, compilation)")
    ap.add_argument("--batch", type=int, default=128, help="sentence pairs per batch")
    ap.add_argument("--length", type=int, default=32, help="source = target length")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3, help="encoder layers = decoder layers")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--torch-threads", type=int, default=2, help="torch.set_num_threads for the PyTorch peer")
    ap.add_argument("--matmul-n", type=int, default=2048)
    ap.add_argument("--matmul-repeats", type=int, default=10)
    ap.add_argument("--no-matmul", action="store_true", help="skip the matmul-rate measurement")
    ap.add_argument("--json", help="also write all results to this JSON file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        print("RESULT " + json.dumps(run_worker(args.worker, args)), flush=True)
        return 0

    names = select_systems(args.systems, args.jit, args.protos)
    flops = step_flops(args)
    load_start = _load()
    print(f"shape: d_model {args.d_model}, {args.layers}+{args.layers} layers, {args.heads} heads, "
          f"d_ff {args.d_ff}, vocab {args.vocab}, batch {args.batch}x{args.length} "
          f"({args.batch * args.length} target tokens), dropout {args.dropout}; "
          f"{flops / 1e9:.1f} GFLOP/step (3 x forward matmuls)")
    print(f"cores {os.cpu_count()}, load average at start {load_start[0]:.2f} {load_start[1]:.2f} "
          f"{load_start[2]:.2f}; warmup {args.warmup}, timed steps {args.steps}", flush=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    jobs = ([] if args.no_matmul else ["matmul"]) + list(names)
    if not args.no_matmul and "torch" in names:
        jobs.append("matmul-torch")
    results, extra = [], {}
    for i, name in enumerate(jobs, 1):
        print(f"[{i}/{len(jobs)}] {name} ...", end=" ", flush=True)
        proc = subprocess.run(_worker_argv(args, name), capture_output=True, text=True, env=env, cwd=ROOT)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            result = dict(system=name, error=f"exit {proc.returncode}: {tail[0][:200]}")
            print(result["error"], flush=True)
        else:
            result = json.loads(lines[-1][len("RESULT "):])
            if "step_s" in result:
                print(f"{result['step_s']:.2f} s/step (warm-up {result['warmup_s']:.1f} s, "
                      f"loss {result['first_loss']:.3f} -> {result['last_loss']:.3f})", flush=True)
            else:
                print(", ".join(f"{k} {v:.1f}" for k, v in result.items() if isinstance(v, float)), flush=True)
        if name.startswith("matmul"):
            extra.update({k: v for k, v in result.items() if k.endswith("gflops")})
        else:
            results.append(result)
    load_end = _load()
    print()
    print(format_table(results, args, extra.get("tf_gflops"), extra.get("torch_gflops")))
    print(f"load average at end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), flops_per_step=flops, load_start=load_start, load_end=load_end,
                           results=results, **extra), f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
