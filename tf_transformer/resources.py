"""Files shipped with the package: the config presets and the bundled Multi30k corpus.

In a source checkout (and an editable install) they are the repository's ``configs/`` and
``data/multi30k/``. A built wheel carries copies of both inside the package, under
``tf_transformer/_shipped/`` (pyproject.toml maps the two directories there), so an installed
package finds them wherever it is run from. :func:`shipped_dir` looks in both places.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

_PACKAGE = Path(__file__).resolve().parent

#: name -> directory of the repository it is copied from.
SHIPPED = {"configs": "configs", "multi30k": "data/multi30k"}


def candidates(name: str) -> list[Path]:
    """Where :func:`shipped_dir` looks for ``name``, in order: the installed copy, the checkout's."""
    if name not in SHIPPED:
        raise KeyError(f"no shipped directory {name!r}; known: {', '.join(SHIPPED)}")
    return [_PACKAGE / "_shipped" / name, _PACKAGE.parent / SHIPPED[name]]


def shipped_dir(name: str) -> Optional[Path]:
    """The directory of shipped files ``name`` (``"configs"`` or ``"multi30k"``), or ``None``."""
    for path in candidates(name):
        if path.is_dir():
            return path
    return None


def missing_message(name: str, what: str) -> str:
    """An error message for a missing shipped directory, naming the places looked at."""
    where = " or ".join(str(p) for p in candidates(name))
    return f"{what} are not installed: looked for {where} (reinstall the package, e.g. pip install .)"
