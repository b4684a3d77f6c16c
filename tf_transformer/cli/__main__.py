"""``python -m tf_transformer.cli``: the same as ``tft``."""

from tf_transformer.cli import entry

entry()
