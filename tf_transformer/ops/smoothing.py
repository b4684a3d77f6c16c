"""The label-smoothed target distribution's constants (paper section 5.4), in plain Python.

The target for a position whose gold token is ``y`` puts ``1 - eps`` on ``y`` and
``eps / (V - 1)`` on each other token.
"""

from __future__ import annotations

import math


def smoothing_entropy(epsilon: float, vocab_size: int) -> float:
    """Entropy (nats) of the smoothed target distribution: the floor of its cross-entropy."""
    if epsilon <= 0.0:
        return 0.0
    low = epsilon / (vocab_size - 1)
    return -((1.0 - epsilon) * math.log(1.0 - epsilon) + epsilon * math.log(low))


def smoothing_weights(epsilon: float, vocab_size: int) -> tuple:
    """``(confidence, low)``: the smoothed target's probability of the gold token and of each
    other token (``(1, 0)`` without smoothing)."""
    if epsilon > 0.0:
        return 1.0 - epsilon, epsilon / (vocab_size - 1.0)
    return 1.0, 0.0
