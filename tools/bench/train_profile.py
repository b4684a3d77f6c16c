"""Where our training step's time goes, and what alternatives would gain (CPU, TensorFlow).

    python tools/bench/train_profile.py [--variants all] [--rounds 5] [--pad-fraction 0.25]
                                  [--trace DIR]

Same shape as ``tools/bench/train_throughput.py`` (d_model 256, 3+3 layers, 4 heads, d_ff 1024,
vocab 8000, 128 x 32 tokens). All variants live in ONE process and are timed
round-robin: every round runs each variant once, and the median over rounds is reported.
On a machine shared with other jobs the load drifts over minutes; interleaving makes the
drift hit every variant alike, so the differences between variants are trustworthy even
when the absolute times are not. Besides wall time (median, min, max) it reports the
process CPU seconds per call (median; both cores: up to 2x wall), which other jobs on the
machine disturb less than wall time.

Variants (``--variants`` takes a comma list, or ``all``); ``-xla`` = ``jit_compile=True``:

* ``fwd``, ``fwd-xla``: forward only (training mode: dropout on).
* ``fwd_loss``: forward + our label-smoothed loss.
* ``grad``, ``grad-xla``: forward + loss + backward (gradients, no update).
* ``step``, ``step-xla``: + Adam update: the full step of ``ours-step`` in train_throughput.
* ``fit``, ``fit-xla``: the step of ``model.fit`` (Keras' own ``train_function``, called
  directly on a repeated in-memory dataset).
* ``step_nodrop``, ``step_nodrop-xla``: full step with dropout 0 (the cost of dropout).
* ``step_fusedqkv``, ``step_fusedqkv-xla``: full step with a prototype attention whose
  Q,K,V (self-attention) or K,V (cross-attention) projections are one matmul against the
  concatenated kernels (bench-only subclass; the package's layers are untouched).
* ``head``, ``head-xla``: only the output projection + loss (forward and backward) on a
  fixed hidden state: the vocabulary part of the step.
* ``head_fusedce``, ``head_fusedce-xla``: the same with the loss written around TF's fused
  ``sparse_softmax_cross_entropy_with_logits`` (one kernel for log-softmax + gather + its
  gradient) plus the smoothing term.
* ``head_densece``, ``head_densece-xla``, ``step_densece``, ``step_densece-xla``: the loss as
  TF's fused ``softmax_cross_entropy_with_logits`` against the smoothed target distribution
  written out densely (``one_hot(y, V, 1 - eps, eps / (V - 1))``): the kernel returns the
  loss and its gradient ``softmax - labels`` in one pass over the logits.
* ``head_xlaloss``, ``step_xlaloss``: our loss unchanged but wrapped in its own
  ``tf.function(jit_compile=True)`` inside an otherwise non-XLA step, so XLA fuses the
  elementwise work over the logits while the matmuls stay on TensorFlow's kernels.
* ``step_xlaloss_ln``: ``step_xlaloss`` with every LayerNormalization's ``call`` also
  compiled by XLA on its own; ``step_xlaloss_ln_attn``: and the attention core
  (``scaled_dot_product_attention``: scores, mask, softmax, context) too. Matmuls of the
  projections and FFNs stay on TensorFlow's kernels.
* ``step_pad``: full step on a batch where ``--pad-fraction`` of the target and source
  positions are padding (trailing, random lengths); ``step_pad_gather``: the same batch,
  but the decoder's output is gathered at the real target tokens before the vocabulary
  projection and the loss (dynamic shape, so no XLA variant).
* ``matmul``, ``matmul-xla``: one 2048^3 float32 matmul (the utilization denominator,
  and how XLA's CPU matmul compares with TensorFlow's).
* ``matmuls``, ``matmuls-xla``: every matmul of one training step at the model's own
  shapes and nothing else (for each forward matmul ``[M,K] x [K,N]`` also the backward
  ``dX = dY W^T`` and ``dW = X^T dY``), on random data: the step's matmul-only floor. Step
  time minus this = the time spent outside matmuls (elementwise ops, softmax, LayerNorm,
  dropout, the loss, Adam, framework overhead).

``--trace DIR`` also records a TensorFlow profiler trace of 2 ``step`` calls into DIR
(open it with TensorBoard's profile plugin).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(HERE)), HERE]

ALL = ("fwd", "fwd-xla", "fwd_loss", "grad", "grad-xla", "step", "step-xla", "fit", "fit-xla",
       "step_nodrop", "step_nodrop-xla", "step_fusedqkv", "step_fusedqkv-xla", "head", "head-xla",
       "head_fusedce", "head_fusedce-xla", "head_densece", "head_densece-xla", "head_xlaloss", "step_densece",
       "step_densece-xla", "step_xlaloss",
       "step_xlaloss_ln", "step_xlaloss_ln_attn",
       "step_pad", "step_pad_gather", "matmul", "matmul-xla", "matmuls", "matmuls-xla")


def fused_qkv_attention_class():
    """A MultiHeadAttention whose projections of the same input share one matmul."""
    from keras import ops

    from tf_transformer.layers.attention import MultiHeadAttention

    class FusedQKVAttention(MultiHeadAttention):
        def _split(self, y, depth):
            b, t = ops.shape(y)[0], ops.shape(y)[1]
            return ops.transpose(ops.reshape(y, (b, t, self.num_heads, depth)), (0, 2, 1, 3))

        def project_key_value(self, value):
            kernel = ops.concatenate([self.key_kernel, self.value_kernel], axis=1)
            kv = ops.matmul(value, ops.cast(kernel, value.dtype))
            hk = self.num_heads * self.key_dim
            return self._split(kv[..., :hk], self.key_dim), self._split(kv[..., hk:], self.value_dim)

        def call(self, query, value=None, attention_mask=None, return_attention_scores=False, training=None):
            if value is not None and value is not query:
                return super().call(query, value, attention_mask, return_attention_scores, training)
            kernel = ops.concatenate([self.query_kernel, self.key_kernel, self.value_kernel], axis=1)
            qkv = ops.matmul(query, ops.cast(kernel, query.dtype))
            hk = self.num_heads * self.key_dim
            q = self._split(qkv[..., :hk], self.key_dim)
            k = self._split(qkv[..., hk:2 * hk], self.key_dim)
            v = self._split(qkv[..., 2 * hk:], self.value_dim)
            output, weights = self.attend(q, k, v, mask=attention_mask, training=training)
            return (output, weights) if return_attention_scores else output

    return FusedQKVAttention


def fused_loss(targets, logits, eps=0.1):
    """Label-smoothed loss around TF's fused ``sparse_softmax_cross_entropy_with_logits``.

    ``(1 - eps - low) * NLL + low * (V * lse - sum(logits))`` with ``low = eps / (V - 1)``:
    :func:`tf_transformer.training.losses.label_smoothed_loss` without its constant entropy.
    """
    import tensorflow as tf

    v = logits.shape[-1]
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(targets, logits)
    lse = tf.reduce_logsumexp(logits, axis=-1)
    low = eps / (v - 1)
    loss = (1 - eps - low) * nll + low * (v * lse - tf.reduce_sum(logits, axis=-1))
    mask = tf.cast(tf.not_equal(targets, 0), tf.float32)
    return tf.reduce_sum(loss * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def dense_ce_loss(targets, logits, eps=0.1):
    """Label-smoothed loss through TF's fused dense ``softmax_cross_entropy_with_logits``.

    Equals :func:`tf_transformer.training.losses.label_smoothed_loss` (the smoothing
    entropy is subtracted here too, a constant).
    """
    import tensorflow as tf

    from tf_transformer.training.losses import smoothing_entropy

    v = logits.shape[-1]
    labels = tf.one_hot(targets, v, on_value=1.0 - eps, off_value=eps / (v - 1), dtype=logits.dtype)
    ce = tf.nn.softmax_cross_entropy_with_logits(labels, logits) - smoothing_entropy(eps, v)
    mask = tf.cast(tf.not_equal(targets, 0), ce.dtype)
    return tf.reduce_sum(ce * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def step_matmul_shapes(args):
    """``(count, batch_dims, M, K, N)`` of every forward matmul of one step (see train_throughput)."""
    b, s, t, d, f, v = args.batch, args.length, args.length, args.d_model, args.d_ff, args.vocab
    h = args.heads
    dk = d // h
    n_enc, n_dec = args.layers, args.layers
    return [
        (4 * n_enc + 8 * n_dec, (), b * s, d, d),  # Q,K,V,O (encoder; decoder self + cross)
        (n_enc + n_dec, (), b * s, d, f),          # FFN in
        (n_enc + n_dec, (), b * s, f, d),          # FFN out
        (n_enc + 2 * n_dec, (b * h,), s, dk, t),   # scores Q K^T (per head)
        (n_enc + 2 * n_dec, (b * h,), s, t, dk),   # context P V
        (1, (), b * t, d, v),                      # tied output projection
    ]


def build_model(args, dropout=None, fused_qkv=False):
    from tf_transformer.layers import encoder as encoder_module
    from tf_transformer.model import Transformer

    original = encoder_module.MultiHeadAttention
    if fused_qkv:  # the layers look the class up in encoder.py's namespace when they are built
        encoder_module.MultiHeadAttention = fused_qkv_attention_class()
    try:
        model = Transformer(vocab_size=args.vocab, d_model=args.d_model, num_layers=args.layers,
                            num_heads=args.heads, d_ff=args.d_ff,
                            dropout=args.dropout if dropout is None else dropout)
        model.build()
    finally:
        encoder_module.MultiHeadAttention = original
    return model


def padded_batch(args, fraction, seed=1):
    """Random ids with trailing padding: per sentence a length in [L(1-2f), L], mean ~ L(1-f)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    b, L = args.batch, args.length
    low = max(1, int(round(L * (1 - 2 * fraction))))
    src = rng.integers(4, args.vocab, size=(b, L)).astype("int32")
    y = rng.integers(4, args.vocab, size=(b, L)).astype("int32")
    for arr in (src, y):
        lengths = rng.integers(low, L + 1, size=b)
        arr[np.arange(L)[None, :] >= lengths[:, None]] = 0
    tgt_in = np.concatenate([np.full((b, 1), 2, "int32"), y[:, :-1]], axis=1)
    tgt_in[:, 1:][y[:, :-1] == 0] = 0
    return src, tgt_in, y


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="all")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (median reported)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls of each variant first")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--length", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=1024)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--pad-fraction", type=float, default=0.25, help="padding share for step_pad*")
    ap.add_argument("--threads", type=int, default=0,
                    help="TF intra- and inter-op threads (0 = TF's default, one per core). With 1, the "
                         "process CPU seconds are the work of each variant, little disturbed by other jobs")
    ap.add_argument("--trace", help="write a TF profiler trace of the plain step here")
    args = ap.parse_args(argv)
    names = ALL if args.variants == "all" else tuple(v.strip() for v in args.variants.split(","))
    bad = [n for n in names if n not in ALL]
    if bad:
        raise SystemExit(f"--variants: unknown {bad}; choose from {', '.join(ALL)}")

    import keras
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)

    from train_throughput import forward_flops, make_batch

    from tf_transformer.training.losses import label_smoothed_loss

    def adam():
        return keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)

    src, tgt_in, y = (tf.constant(a) for a in make_batch(args))
    psrc, ptgt_in, py = (tf.constant(a) for a in padded_batch(args, args.pad_fraction))
    eps = 0.1
    models = {}

    def model_for(key, **kw):
        if key not in models:
            models[key] = build_model(args, **kw)
        return models[key]

    xla_loss = tf.function(lambda t, lg: label_smoothed_loss(t, lg, eps), jit_compile=True)

    def loss_for(base):
        if base.endswith("_fusedce"):
            return lambda t, lg: fused_loss(t, lg, eps)
        if base.endswith("_densece"):
            return lambda t, lg: dense_ce_loss(t, lg, eps)
        if "_xlaloss" in base:
            return xla_loss
        return lambda t, lg: label_smoothed_loss(t, lg, eps)

    def make(name):
        base, _, x = name.partition("-")
        jit = x == "xla"
        if base == "matmul":
            a = tf.random.normal((2048, 2048))
            f = tf.function(tf.autograph.experimental.do_not_convert(lambda: tf.reduce_sum(tf.matmul(a, a))),
                            jit_compile=jit)
            return f, 2 * 2048 ** 3
        if base == "matmuls":
            ops_list = []
            for count, bd, m, k, n in step_matmul_shapes(args):
                for _ in range(count):  # distinct inputs: identical matmuls would be merged (CSE)
                    ops_list.append(tuple(tf.random.normal(bd + shape) for shape in ((m, k), (k, n), (m, n))))

            @tf.function(jit_compile=jit)
            def matmuls():
                outs = []
                for x, w, g in ops_list:
                    outs += [tf.matmul(x, w),                     # forward
                             tf.matmul(g, w, transpose_b=True),   # backward to the input
                             tf.matmul(x, g, transpose_a=True)]   # backward to the weight
                return outs  # returned whole, so neither Grappler nor XLA can drop or slice them

            def run_matmuls():
                matmuls()  # a CPU tf.function call returns when its outputs are computed
                return 0.0
            return run_matmuls, None
        if base.startswith("head"):
            model = model_for("base")
            table = model.embedding.embeddings
            hidden = tf.random.normal((args.batch, args.length, args.d_model))
            loss_fn = loss_for(base)

            @tf.function(jit_compile=jit)
            def head():
                with tf.GradientTape() as tape:
                    tape.watch(hidden)
                    loss = loss_fn(y, tf.matmul(hidden, table, transpose_b=True))
                gh, gt = tape.gradient(loss, [hidden, table])
                return loss + tf.reduce_sum(gh) + tf.reduce_sum(tf.convert_to_tensor(gt))
            return head, 3 * 2 * args.batch * args.length * args.d_model * args.vocab
        if base in ("fit",):
            model = build_model(args)
            from tf_transformer.training.losses import LabelSmoothedCrossEntropy

            model.compile(optimizer=adam(), loss=LabelSmoothedCrossEntropy(eps), jit_compile=jit)
            model.make_train_function()
            it = iter(tf.data.Dataset.from_tensors(((src, tgt_in), y)).repeat())
            return (lambda: model.train_function(it)["loss"]), None
        kw = {}
        if base == "step_nodrop":
            kw = dict(dropout=0.0)
        if base == "step_fusedqkv":
            kw = dict(fused_qkv=True)
        # forward/gradient probes share one model; every full step gets its own (own Adam state)
        from tf_transformer.layers import attention as attention_module

        original_sdpa = attention_module.scaled_dot_product_attention
        if base == "step_xlaloss_ln_attn":  # MultiHeadAttention.attend looks the function up at call time
            compiled_sdpa = tf.function(original_sdpa, jit_compile=True)
            attention_module.scaled_dot_product_attention = compiled_sdpa
        model = model_for("base") if base in ("fwd", "fwd_loss", "grad") else build_model(args, **kw)
        if base.startswith("step_xlaloss_ln"):
            for layer in model._flatten_layers():
                if isinstance(layer, keras.layers.LayerNormalization):
                    layer.call = tf.function(layer.call, jit_compile=True)
        variables = model.trainable_variables
        batch = (psrc, ptgt_in, py) if base.startswith("step_pad") else (src, tgt_in, y)

        def logits_and_targets(s, ti, t, gather):
            if not gather:
                return model((s, ti), training=True), t
            memory, source_mask = model.encode(s, training=True)
            hidden = model.decoder(model.embed(ti, training=True), memory,
                                   target_padding_mask=model.padding_mask(ti), memory_mask=source_mask,
                                   training=True)
            where = tf.where(tf.not_equal(t, 0))
            return model.embedding.logits(tf.gather_nd(hidden, where)), tf.gather_nd(t, where)

        if base in ("fwd", "fwd_loss", "grad"):
            @tf.function(jit_compile=jit)
            def fn():
                s, ti, t = batch
                if base == "fwd":
                    return tf.reduce_mean(model((s, ti), training=True))
                with tf.GradientTape() as tape:
                    loss = label_smoothed_loss(t, model((s, ti), training=True), eps)
                if base == "fwd_loss":
                    return loss
                grads = tape.gradient(loss, variables)
                return loss + tf.add_n([tf.reduce_sum(tf.convert_to_tensor(g)) for g in grads])
            return fn, None

        optimizer = adam()
        optimizer.build(variables)
        gather = base == "step_pad_gather"
        loss_fn = loss_for(base)

        @tf.function(jit_compile=jit)
        def step():
            s, ti, t = batch
            with tf.GradientTape() as tape:
                logits, targets = logits_and_targets(s, ti, t, gather)
                loss = loss_fn(targets, logits)
            grads = tape.gradient(loss, variables)
            optimizer.apply(grads, variables)
            return loss

        if base == "step_xlaloss_ln_attn":
            def step_patched():  # the patch is global: set it only while this variant runs
                attention_module.scaled_dot_product_attention = compiled_sdpa
                try:
                    return step()
                finally:
                    attention_module.scaled_dot_product_attention = original_sdpa
            attention_module.scaled_dot_product_attention = original_sdpa
            return step_patched, None
        return step, None

    fns = {}
    print(f"load average {os.getloadavg()[0]:.2f}; threads {args.threads or 'default'}; "
          f"building and warming up {len(names)} variants", flush=True)
    for name in names:
        t0 = time.perf_counter()
        fn, _ = make(name)
        for _ in range(args.warmup):
            float(fn())
        fns[name] = fn
        print(f"  {name}: warm-up {time.perf_counter() - t0:.1f} s", flush=True)

    times = {n: [] for n in names}
    cpu = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names:
            c0, t0 = time.process_time(), time.perf_counter()
            float(fns[name]())
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
        print(f"  round {r + 1}/{args.rounds} done, load average {os.getloadavg()[0]:.2f}", flush=True)

    flops_step = 3 * forward_flops(args.batch, args.length, args.length, args.d_model, args.layers, args.d_ff,
                                   args.vocab)
    med = {n: statistics.median(t) for n, t in times.items()}
    print(f"\n{'variant':<20}{'median s':>9}{'min s':>8}{'max s':>8}{'CPU s':>8}  notes (from the median)")
    for name in names:
        note = ""
        if name.startswith("matmuls"):
            note = f"{flops_step / med[name] / 1e9:.1f} GFLOP/s at the step's own matmul shapes"
        elif name.startswith("matmul"):
            note = f"{2 * 2048 ** 3 / med[name] / 1e9:.1f} GFLOP/s"
        elif name.startswith(("step", "fit")) and not name.startswith("step_pad"):
            note = f"{args.batch * args.length / med[name]:,.0f} tokens/s, {flops_step / med[name] / 1e9:.1f} GFLOP/s"
        print(f"{name:<20}{med[name]:>9.3f}{min(times[name]):>8.3f}{max(times[name]):>8.3f}"
              f"{statistics.median(cpu[name]):>8.3f}  {note}")

    if args.trace:
        step = fns.get("step") or make("step")[0]
        float(step())
        tf.profiler.experimental.start(args.trace)
        for _ in range(2):
            float(step())
        tf.profiler.experimental.stop()
        print(f"trace written under {args.trace}")
    return med


if __name__ == "__main__":
    main()
