"""Lazy package exports: ``from tf_transformer.data import Tokenizer`` imports only the
submodule that defines ``Tokenizer``, on first use, so importing a package (and ``tft --help``)
does not load TensorFlow."""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict[str, str], namespace: dict):
    """``(__getattr__, __dir__)`` for ``package`` whose public ``name`` lives in submodule
    ``exports[name]``; a resolved name is cached in ``namespace`` (the package's globals)."""

    def __getattr__(name: str):
        if name in exports:
            value = getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(list(namespace) + list(exports))

    return __getattr__, __dir__
