"""Label-smoothed cross-entropy and token metrics against a NumPy reference."""

import math

import numpy as np
import pytest

from tf_transformer.training.losses import (
    LabelSmoothedCrossEntropy,
    Perplexity,
    TokenAccuracy,
    label_smoothed_loss,
    smoothing_entropy,
    token_statistics,
)


def numpy_reference(targets, logits, eps, pad_id=0):
    """Explicit smoothed distributions: (1-eps) on gold, eps/(V-1) elsewhere; KL to the model."""
    batch, length, vocab = logits.shape
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    loss_sum = nll_sum = correct = tokens = 0.0
    for b in range(batch):
        for t in range(length):
            y = targets[b, t]
            if y == pad_id:
                continue
            q = np.full(vocab, eps / (vocab - 1))
            q[y] = 1.0 - eps
            entropy = -sum(qi * math.log(qi) for qi in q if qi > 0)
            loss_sum += -(q * logp[b, t]).sum() - entropy
            nll_sum += -logp[b, t, y]
            correct += float(np.argmax(logits[b, t]) == y)
            tokens += 1
    return loss_sum, nll_sum, correct, tokens


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 5, 11)).astype("float32") * 3
    targets = rng.integers(1, 11, size=(3, 5)).astype("int32")
    targets[0, 3:] = 0  # padding
    targets[2, 1:] = 0
    logits[1, 2, targets[1, 2]] += 20.0  # one confident correct prediction
    return targets, logits


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_statistics_match_numpy(batch, eps):
    targets, logits = batch
    stats = {k: float(v) for k, v in token_statistics(targets, logits, eps).items()}
    loss_sum, nll_sum, correct, tokens = numpy_reference(targets, logits, eps)
    assert stats["tokens"] == tokens == 9
    assert stats["correct"] == correct
    assert stats["nll_sum"] == pytest.approx(nll_sum, rel=1e-5)
    assert stats["loss_sum"] == pytest.approx(loss_sum, rel=1e-5)
    assert float(label_smoothed_loss(targets, logits, eps)) == pytest.approx(loss_sum / tokens, rel=1e-5)
    loss = LabelSmoothedCrossEntropy(epsilon=eps)
    assert float(loss(targets, logits)) == pytest.approx(loss_sum / tokens, rel=1e-5)


def test_padding_contributes_nothing(batch):
    targets, logits = batch
    changed = logits.copy()
    changed[targets == 0] = np.random.default_rng(1).normal(size=changed[targets == 0].shape) * 100
    a = token_statistics(targets, logits, 0.1)
    b = token_statistics(targets, changed, 0.1)
    for key in a:
        assert float(a[key]) == pytest.approx(float(b[key]), rel=1e-6)


def test_perfect_smoothed_prediction_has_zero_loss():
    vocab, eps = 7, 0.1
    targets = np.array([[3, 5, 0]], "int32")
    q = np.full((1, 3, vocab), eps / (vocab - 1))
    for t, y in enumerate(targets[0]):
        q[0, t, y] = 1 - eps
    stats = token_statistics(targets, np.log(q).astype("float32"), eps)
    assert float(stats["loss_sum"]) == pytest.approx(0.0, abs=1e-5)
    assert smoothing_entropy(eps, vocab) > 0 and smoothing_entropy(0.0, vocab) == 0.0


def test_metrics_ignore_padding(batch):
    targets, logits = batch
    _, nll_sum, correct, tokens = numpy_reference(targets, logits, 0.0)
    acc, ppl = TokenAccuracy(), Perplexity()
    acc.update_state(targets, logits)
    ppl.update_state(targets, logits)
    assert float(acc.result()) == pytest.approx(correct / tokens)
    assert float(ppl.result()) == pytest.approx(math.exp(nll_sum / tokens), rel=1e-5)
    # accumulating two halves equals one pass (token-weighted, not a mean of batch means)
    acc2 = TokenAccuracy()
    acc2.update_state(targets[:1], logits[:1])
    acc2.update_state(targets[1:], logits[1:])
    assert float(acc2.result()) == pytest.approx(correct / tokens)


def test_no_one_hot_in_the_graph():
    import tensorflow as tf

    fn = tf.function(lambda t, l: token_statistics(t, l, 0.1)["loss_sum"])
    graph = fn.get_concrete_function(tf.TensorSpec([None, None], tf.int32),
                                     tf.TensorSpec([None, None, 50_000], tf.float32)).graph
    ops = {op.type for op in graph.get_operations()}
    assert "OneHot" not in ops and "SparseToDense" not in ops
    rng = np.random.default_rng(2)
    logits = rng.normal(size=(2, 3, 50_000)).astype("float32")
    targets = np.array([[1, 2, 0], [4, 0, 0]], "int32")
    assert float(token_statistics(targets, logits, 0.1)["tokens"]) == 3
