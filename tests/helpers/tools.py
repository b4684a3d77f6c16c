"""Import a script of ``tools/`` (not a package) as a module, for tests of its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def load_tool(name: str):
    """``tools/<name>.py`` as a module (its top level runs; the scripts import TensorFlow lazily)."""
    spec = importlib.util.spec_from_file_location(f"tft_tool_{name}", TOOLS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
