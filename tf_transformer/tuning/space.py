"""The search space of ``tft tune`` and :class:`~tf_transformer.tuning.TransformerHyperModel`
(no TensorFlow or Keras Tuner import: ``tft tune`` checks its flags before loading them)."""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from tf_transformer.config import ConfigError


@dataclasses.dataclass
class SearchSpace:
    """Values tried for each hyper-parameter (each is an ``hp.Choice``; one value = fixed).

    ``num_heads`` must divide the config's ``d_model`` (``d_k = d_v = d_model / h``).
    ``word_dropout`` (``None``: not searched, each trial keeps the config's
    ``model.source_word_dropout`` and ``model.target_word_dropout``) sets both sides' word dropout
    to one value per trial.
    """

    num_heads: Sequence[int] = (1, 2, 4, 8)
    num_layers: Sequence[int] = (2, 3, 4)
    d_ff: Sequence[int] = (512, 1024)
    dropout: Sequence[float] = (0.0, 0.1, 0.2, 0.3)
    word_dropout: Optional[Sequence[float]] = None

    @classmethod
    def around(cls, model_config) -> "SearchSpace":
        """A default space around a config: heads dividing d_model (d_k >= 8) among 1..16,
        depth N-1..N+1, d_ff 2x and 4x d_model, dropout 0..0.3."""
        d, n = model_config.d_model, model_config.num_layers
        heads = tuple(h for h in (1, 2, 4, 8, 16) if d % h == 0 and d // h >= 8) or (model_config.num_heads,)
        layers = tuple(range(max(1, n - 1), n + 2))
        return cls(num_heads=heads, num_layers=layers, d_ff=(2 * d, 4 * d), dropout=(0.0, 0.1, 0.2, 0.3))

    def searched(self) -> dict:
        """``{name: values}`` of every hyper-parameter searched (``word_dropout`` only when set)."""
        return {f.name: tuple(getattr(self, f.name)) for f in dataclasses.fields(self)
                if getattr(self, f.name) is not None}

    def validate(self, d_model: int) -> "SearchSpace":
        for name, values in self.searched().items():
            values = list(values)
            if not values:
                raise ConfigError(f"search space {name} is empty")
            if len(set(values)) != len(values):
                raise ConfigError(f"search space {name}={values} repeats a value")
        for h in self.num_heads:
            if int(h) < 1 or d_model % int(h):
                raise ConfigError(
                    f"search space num_heads={h} does not divide model.d_model={d_model} "
                    "(d_k = d_v = d_model / h)")
        for name in ("num_layers", "d_ff"):
            for v in getattr(self, name):
                if int(v) < 1:
                    raise ConfigError(f"search space {name}={v} must be >= 1")
        for name in ("dropout", "word_dropout"):
            for p in self.searched().get(name, ()):
                if not 0.0 <= float(p) < 1.0:
                    raise ConfigError(f"search space {name}={p} must be in [0, 1)")
        return self
