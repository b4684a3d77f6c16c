"""Our side of the same-start, same-batches comparison (tools/bench/RESULTS.md, issue 12, "second
part"): fairseq's initial weights and batches (fs_side.py dump), our Transformer,
TrainingModel.train_step and FusedAdam with the preset's schedule; fairseq's sinusoids (positions
from 2, sines then cosines) patched in.

usage: our_side.py DIR N DROPOUT EVAL
  INIT=keras         our initializers for every weight instead of fairseq's
  KERAS_PARTS=ffn/   our initializers only for weights whose path contains one of these (comma-separated)
  BATCHES=FILE.npz   other batches (dump_ours.py) instead of DIR/batches.npz
"""
import json
import os
import sys

import numpy as np
import tensorflow as tf

from tf_transformer.layers import embedding as emb_mod
from tf_transformer.model import Transformer
from tf_transformer.training.losses import tied_head_statistics
from tf_transformer.training.schedule import make_optimizer
from tf_transformer.training.trainer import TrainingModel

out, N, dropout, every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
PAD = 1
# fairseq's sinusoids: sin block then cos block, frequencies exp(-j ln(10000) / (half - 1)), positions from 2
half = 64
freq = np.exp(np.arange(half) * -(np.log(10000.0) / (half - 1)))
ang = (np.arange(1200)[:, None] + 2) * freq[None]
TABLE = tf.constant(np.concatenate([np.sin(ang), np.cos(ang)], 1), tf.float32)

def fs_positions(self, inputs, start_index=0):
    n = tf.shape(inputs)[1]
    return inputs + tf.gather(TABLE, tf.range(n) + start_index)[None]
emb_mod.SinusoidalPositionalEncoding.call = fs_positions

init = np.load(f"{out}/init.npz")
V = init["encoder.embed_tokens.weight"].shape[0]
INIT = os.environ.get("INIT", "fairseq")  # fairseq: fairseq's initial weights; keras: our initializers
m = Transformer(vocab_size=V, d_model=128, num_layers=4, num_heads=4, d_ff=256, dropout=dropout,
                attention_bias=True, layer_norm_epsilon=1e-5, pad_id=PAD, qkv_init_gain=0.7071067811865476)
m((np.full((1, 3), 5, "int32"), np.full((1, 3), 5, "int32")))
names = {"self_attention": "self_attn", "cross_attention": "encoder_attn"}
proj = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "output": "out_proj"}
norms = {"self_attention_norm": "self_attn_layer_norm", "cross_attention_norm": "encoder_attn_layer_norm",
         "ffn_norm": "final_layer_norm"}
keras_init_parts = set(os.environ.get("KERAS_PARTS", "all" if INIT == "keras" else "").split(","))
for w in m.weights:
    p = w.path.split("/")[1:]
    if p[0] == "shared_embedding":
        val = init["encoder.embed_tokens.weight"]
    else:
        base = f"{p[0]}.layers.{p[1].split('_')[1]}."
        part, leaf = p[2], p[3]
        if part in names:
            kind, what = leaf.rsplit("_", 1)
            key = base + f"{names[part]}.{proj[kind]}." + ("weight" if what == "kernel" else "bias")
            val = init[key].T if what == "kernel" else init[key]
        elif part in norms:
            val = init[base + f"{norms[part]}." + ("weight" if leaf == "gamma" else "bias")]
        else:  # ffn
            fc = {"inner": "fc1", "outer": "fc2"}[leaf.split("_")[0]]
            key = base + f"{fc}." + ("weight" if leaf.endswith("kernel") else "bias")
            val = init[key].T if leaf.endswith("kernel") else init[key]
    assert tuple(val.shape) == tuple(w.shape), (w.path, val.shape, w.shape)
    if "all" in keras_init_parts or any(k and k in w.path for k in keras_init_parts):
        continue  # keep our initializer's draw
    w.assign(val)

tm = TrainingModel(m, label_smoothing=0.0, clip_norm=25.0, nominal_tokens=8192.0)
tm.compile(optimizer=make_optimizer(d_model=128, warmup_steps=2000, learning_rate_scale=2.5298221281347035,
                                    adam_epsilon=1e-8))
tm.build(None)
tm.optimizer.build(tm.trainable_variables)

def right_pad(a):
    rows = [r[r != PAD] for r in a]
    n = max(len(r) for r in rows)
    return np.stack([np.pad(r, (0, n - len(r)), constant_values=PAD) for r in rows])

def cat(arrs):
    n = max(a.shape[1] for a in arrs)
    return np.concatenate([np.pad(a, ((0, 0), (0, n - a.shape[1])), constant_values=PAD) for a in arrs])

data = np.load(os.environ.get("BATCHES", f"{out}/batches.npz"))
val = np.load(f"{out}/valid.npz")
nval = len(val.files) // 3
spec = tf.TensorSpec([None, None], tf.int32)

@tf.function(input_signature=[spec, spec, spec])
def step(src, tin, tout):
    return tm.train_step(((src, tin), tout))

@tf.function(input_signature=[spec, spec, spec])
def val_stats(src, tin, tout):
    h = m.hidden_states((src, tin), training=False)
    s = tied_head_statistics(tout, h, m.output_table, 0.0, PAD)
    return s["nll_sum"], s["tokens"]

def val_nll():
    tot = n = 0.0
    for i in range(nval):
        a, b = val_stats(right_pad(val[f"{i}_src"]), val[f"{i}_prev"], val[f"{i}_tgt"])
        tot += float(a)
        n += float(b)
    return tot / n

for u in range(N):
    parts = []
    j = 0
    while f"{u}_{j}_src" in data.files:
        parts.append((right_pad(data[f"{u}_{j}_src"]), data[f"{u}_{j}_prev"], data[f"{u}_{j}_tgt"]))
        j += 1
    src, tin, tout = (cat([p[k] for p in parts]) for k in range(3))
    for metric in tm.metrics:
        metric.reset_state()
    logs = step(src, tin, tout)
    rec = {"update": u + 1, "train_nll": float(np.log(logs["perplexity"].numpy()))}
    if (u + 1) % every == 0 or u == 0:
        rec["val_nll"] = val_nll()
    print(json.dumps(rec), flush=True)
