"""Golden outputs: the decoding speed work must not change what is decoded.

``tests/data/decoding_golden.json`` holds the ids and scores that the decoding code gave
before the key/value cache learned to grow (commit 5aee34c; regenerated once since, when the
searches stopped writing PAD and BOS ids, which this random model favoured, with a steeper
EOS ramp, 1.2, so that greedy outputs still end with EOS at varied lengths), for a fixed set of sources on a
small Transformer whose weights come from a seeded NumPy generator (no training, so no
dependence on the training kernels). The test rebuilds that model and requires the same ids
and scores within 1e-5, for greedy search and beam search (alpha 0 and 0.6), with the
growing cache (the default in graphs), the preallocated one and under XLA.

Regenerate (only when outputs are meant to change) with::

    python tests/test_decoding_golden.py --write
"""

import json
import os
import sys

import numpy as np
import pytest

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "decoding_golden.json")
SETTINGS = [  # (name, beam_size, alpha)
    ("greedy", 1, 0.0),
    ("beam4_alpha0", 4, 0.0),
    ("beam4_alpha0.6", 4, 0.6),
    ("beam3_alpha1", 3, 1.0),
]
MAX_EXTRA = 7
RAMP = 1.2


def golden_model():
    """A 2+2-layer Transformer (vocab 40, d_model 32, learned positions) with seeded random
    weights, sharpened so that hypotheses differ clearly; the position table leans more
    towards EOS's row at every position, so outputs end at varied lengths."""
    import keras

    from tf_transformer.model import Transformer

    model = Transformer(vocab_size=40, d_model=32, num_layers=2, num_heads=4, d_ff=64, dropout=0.0, max_length=32,
                        position_encoding="learned")
    model.build()
    rng = np.random.default_rng(20261201)
    for w in model.weights:
        shape = tuple(w.shape)
        if "gamma" in w.path:
            value = 1.0 + 0.1 * rng.standard_normal(shape)
        elif "beta" in w.path or "bias" in w.path:
            value = 0.1 * rng.standard_normal(shape)
        else:
            value = rng.standard_normal(shape) / np.sqrt(shape[0])
        w.assign(value.astype("float32"))
    table = keras.ops.convert_to_numpy(model.embedding.embeddings).copy() * 2.5
    model.embedding.embeddings.assign(table)
    eos = table[3] / np.linalg.norm(table[3])
    positions = keras.ops.convert_to_numpy(model.positions.table)
    ramp = RAMP * np.arange(positions.shape[0], dtype="float32")[:, None] * eos[None, :]
    model.positions.table.assign((positions + ramp).astype("float32"))
    return model


def golden_sources():
    rng = np.random.default_rng(7)
    lengths = [1, 2, 3, 5, 8, 13, 4, 6, 9, 11, 7, 10]
    src = np.zeros((len(lengths), max(lengths)), np.int32)
    for i, n in enumerate(lengths):
        src[i, :n] = rng.integers(4, 40, n)
    return src


def decode_all(model, src, **kwargs):
    from tf_transformer.decoding.model_fns import translate_batch

    out = {}
    for name, beam, alpha in SETTINGS:
        ids, scores = translate_batch(model, src, beam_size=beam, alpha=alpha, max_extra_length=MAX_EXTRA, **kwargs)
        out[name] = {"ids": np.asarray(ids).tolist(), "scores": np.asarray(scores).tolist()}
    return out


@pytest.fixture(scope="module")
def golden():
    with open(GOLDEN) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def model():
    return golden_model()


def check(got, golden):
    for name, _, _ in SETTINGS:
        np.testing.assert_array_equal(np.array(got[name]["ids"]), np.array(golden[name]["ids"]), err_msg=name)
        np.testing.assert_allclose(got[name]["scores"], golden[name]["scores"], atol=1e-5, rtol=0, err_msg=name)


def test_golden_is_not_trivial(golden):
    limits = (golden_sources() != 0).sum(1) + MAX_EXTRA
    for name, _, _ in SETTINGS:
        lengths = (np.array(golden[name]["ids"]) != 0).sum(1)
        assert len(set(lengths.tolist())) >= 5, name  # outputs of varied lengths
        assert (lengths < limits).sum() >= 4, name  # finished with EOS ...
        assert (lengths == limits).any(), name  # ... and cut at the length limit
    assert golden["greedy"]["ids"] != golden["beam4_alpha0"]["ids"]  # beam search finds other outputs
    assert golden["beam4_alpha0"]["ids"] != golden["beam4_alpha0.6"]["ids"]  # and alpha matters


@pytest.mark.parametrize("mode", ["graph", "graph_static_cache", "xla", "eager"])
def test_outputs_unchanged(model, golden, mode):
    import tensorflow as tf

    src = golden_sources()
    if mode == "eager":
        got = decode_all(model, tf.constant(src))
    elif mode == "xla":
        got = tf.function(lambda s: decode_all_tensors(model, s), jit_compile=True)(tf.constant(src))
        got = {k: {"ids": v[0].numpy().tolist(), "scores": v[1].numpy().tolist()} for k, v in got.items()}
    else:
        static = mode == "graph_static_cache"
        fn = tf.function(lambda s: decode_all_tensors(model, s, static_cache=static),
                         input_signature=[tf.TensorSpec([None, None], tf.int32)])
        got = {k: {"ids": v[0].numpy().tolist(), "scores": v[1].numpy().tolist()} for k, v in fn(src).items()}
    check(got, golden)


def decode_all_tensors(model, src, **kwargs):
    from tf_transformer.decoding.model_fns import translate_batch

    return {name: translate_batch(model, src, beam_size=beam, alpha=alpha, max_extra_length=MAX_EXTRA, **kwargs)
            for name, beam, alpha in SETTINGS}


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_decoding_golden.py --write")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    out = decode_all(golden_model(), tf.constant(golden_sources()))
    os.makedirs(os.path.dirname(GOLDEN), exist_ok=True)
    with open(GOLDEN, "w") as f:
        json.dump(out, f)
        f.write("\n")
    for name, v in out.items():
        print(name, [sum(1 for t in row if t) for row in v["ids"]])
