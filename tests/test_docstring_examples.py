"""The ``>>>`` examples in the package's docstrings run and print what they say."""

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tf_transformer"
MODULES = sorted(
    ".".join(("tf_transformer", *path.relative_to(PACKAGE).with_suffix("").parts))
    for path in PACKAGE.rglob("*.py") if ">>>" in path.read_text(encoding="utf-8"))


def test_the_examples_are_found():
    expected = {"tf_transformer.model", "tf_transformer.layers.attention", "tf_transformer.training.schedule"}
    assert expected <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    import keras

    module = importlib.import_module(name)
    result = doctest.testmod(module, extraglobs={"keras": keras}, report=True,
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (printed above)"
