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
    token_weights,
)


def numpy_reference(targets, logits, eps, pad_id=0, weights=None):
    """Explicit smoothed distributions: (1-eps) on gold, eps/(V-1) elsewhere; KL to the model.
    ``weights`` ``[batch, length]``: each real token's terms and count times its weight."""
    batch, length, vocab = logits.shape
    weights = np.ones(targets.shape) if weights is None else weights
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
            w = weights[b, t]
            loss_sum += w * (-(q * logp[b, t]).sum() - entropy)
            nll_sum += w * -logp[b, t, y]
            correct += w * float(np.argmax(logits[b, t]) == y)
            tokens += w
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


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_sample_weights_give_weighted_token_means(batch, eps):
    """Keras' ``sample_weight``, per sentence or per token, weighs each real token's loss in the
    loss and the metrics: weights of 1 change nothing, 0 leaves a sentence out, any others give
    the weighted mean of the NumPy reference."""
    targets, logits = batch
    per_token = np.random.default_rng(4).uniform(0.2, 3.0, size=targets.shape).astype("float32")
    loss_sum, nll_sum, correct, tokens = numpy_reference(targets, logits, eps, weights=per_token)
    stats = {k: float(v) for k, v in token_statistics(targets, logits, eps, weights=per_token).items()}
    assert stats["tokens"] == pytest.approx(tokens, rel=1e-6)
    assert stats["correct"] == pytest.approx(correct, rel=1e-6)
    assert stats["loss_sum"] == pytest.approx(loss_sum, rel=1e-5)
    assert stats["nll_sum"] == pytest.approx(nll_sum, rel=1e-5)
    loss = LabelSmoothedCrossEntropy(epsilon=eps)
    assert float(loss(targets, logits, sample_weight=per_token)) == pytest.approx(loss_sum / tokens, rel=1e-5)

    per_sentence = np.array([2.0, 0.5, 1.5], "float32")
    expanded = np.repeat(per_sentence[:, None], targets.shape[1], axis=1)
    want = numpy_reference(targets, logits, eps, weights=expanded)
    for given in (per_sentence, per_sentence[:, None]):
        assert float(loss(targets, logits, sample_weight=given)) == pytest.approx(want[0] / want[3], rel=1e-5)
    unweighted = float(loss(targets, logits))
    assert float(loss(targets, logits, sample_weight=np.ones(3, "float32"))) == pytest.approx(unweighted, rel=1e-6)
    first = float(loss(targets[:1], logits[:1]))
    assert float(loss(targets, logits, sample_weight=np.array([1.0, 0.0, 0.0], "float32"))) == pytest.approx(
        first, rel=1e-6)

    only_first = np.array([1.0, 0.0, 0.0], "float32")
    for metric_class in (TokenAccuracy, Perplexity):
        weighted, alone = metric_class(), metric_class()
        weighted.update_state(targets, logits, sample_weight=only_first)
        alone.update_state(targets[:1], logits[:1])
        assert float(weighted.result()) == pytest.approx(float(alone.result()), rel=1e-6)
    acc = TokenAccuracy()
    acc.update_state(targets, logits, sample_weight=per_token)
    assert float(acc.result()) == pytest.approx(correct / tokens, rel=1e-6)


def test_sample_weights_of_another_shape_are_refused(batch):
    targets, logits = batch
    refused = r"sample_weight of shape \(3, 4\) for targets of shape \(3, 5\).*per sentence"
    with pytest.raises(ValueError, match=refused):
        token_weights(np.ones((3, 4), "float32"), targets)
    with pytest.raises(ValueError, match="sample_weight of shape"):
        LabelSmoothedCrossEntropy()(targets, logits, sample_weight=np.ones((3, 5, 1), "float32"))
