"""``tft config``: what a config resolves to, without TensorFlow.

    tft config show -c multi30k_small --set train.train_steps=500   # the YAML tft train would use
    tft config show -c runs/m30k/config.yaml                        # a run's own config
    tft config show                                                  # the defaults (the paper's base)
    tft config list                                                  # the presets

``show`` prints the config after ``extends`` and every ``--set``, validated, as YAML that
``-c`` reads back (``model.vocab_size`` stays empty when it comes from the vocabulary).
"""

from __future__ import annotations

import argparse

from tf_transformer.cli._common import add_config_arguments, plain


def configure(parser: argparse.ArgumentParser) -> None:
    parser.epilog = plain(__doc__.split("\n\n", 1)[1])
    parser.add_argument("action", choices=("show", "list"), help="show: print the resolved YAML; list: the presets")
    add_config_arguments(parser, what=" (default: none, i.e. the built-in defaults: the paper's base model)")


def run(args: argparse.Namespace) -> int:
    import yaml

    from tf_transformer.config import Config, config_from_dict, list_presets, load_config
    from tf_transformer.config.loading import apply_overrides

    if args.action == "list":
        print("\n".join(list_presets()))
        return 0
    if args.config:
        cfg = load_config(args.config, args.overrides)
        raw = {"name": cfg.name, **cfg.to_dict()} if cfg.name else cfg.to_dict()
    else:
        cfg = config_from_dict(apply_overrides(Config().to_dict(), args.overrides), source="--set")
        raw = cfg.to_dict()
    print(yaml.safe_dump(raw, sort_keys=False), end="")
    return 0
