"""The longest functions of the package: ``python tools/longest_functions.py [--most N] [PATHS...]``.

Counts each function's (or method's) lines from its ``def`` to its last line (decorators and
docstring included) with :mod:`ast`; nested functions are counted on their own too.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path


def functions(path: Path):
    """``(lines, "path:line name")`` for every function in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []

    def visit(node, prefix=""):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((child.end_lineno - start + 1, f"{path}:{child.lineno} {prefix}{child.name}"))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", default=["tf_transformer"])
    parser.add_argument("--most", type=int, default=10)
    args = parser.parse_args(argv)
    found = []
    for root in map(Path, args.paths):
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            found += functions(path)
    for lines, where in sorted(found, reverse=True)[: args.most]:
        print(f"{lines:5d}  {where}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
