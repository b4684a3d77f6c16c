"""Typed configuration: schema (:mod:`~tf_transformer.config.schema`), loading and presets
(:mod:`~tf_transformer.config.loading`).

::

    from tf_transformer.config import load_config
    cfg = load_config("multi30k_small", ["train.train_steps=500"])
    cfg.model.d_model, cfg.train.warmup_steps, cfg.decode.beam_size
"""

from tf_transformer.config.loading import (
    PRESET_DIR,
    apply_overrides,
    config_from_dict,
    list_presets,
    load_config,
    parse_override,
)
from tf_transformer.config.schema import (
    SECTIONS,
    STRATEGIES,
    Config,
    DataConfig,
    DecodeConfig,
    ModelConfig,
    TrainConfig,
)
from tf_transformer.errors import ConfigError

__all__ = [
    "PRESET_DIR", "SECTIONS", "STRATEGIES", "Config", "ConfigError", "DataConfig", "DecodeConfig",
    "ModelConfig", "TrainConfig", "apply_overrides", "config_from_dict", "list_presets", "load_config",
    "parse_override",
]
