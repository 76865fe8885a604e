"""Modules over 400 lines and functions over 50 lines in a package: the house size rule.

Run from the repository root::

    .venv/bin/python -m tools.sizes [specproxy] [--module-lines 400] [--function-lines 50]

Prints one line per offender (``path:line  what  lines``), largest first, then a count;
exits 0 either way (it reports, it does not judge). A function's length runs from its
``def`` (decorators excluded) to its last line, docstring and comments included; nested
functions count on their own and inside their parent.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def module_offenders(root: Path, limit: int) -> list[tuple[int, str]]:
    """(lines, path) of every ``.py`` file under ``root`` longer than ``limit`` lines."""
    found = []
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append((lines, str(path)))
    return found


def function_offenders(root: Path, limit: int) -> list[tuple[int, str]]:
    """(lines, "path:line name") of every function under ``root`` longer than ``limit``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append((lines, f"{path}:{node.lineno} {node.name}()"))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", default="specproxy")
    parser.add_argument("--module-lines", type=int, default=400)
    parser.add_argument("--function-lines", type=int, default=50)
    args = parser.parse_args(argv)
    root = Path(args.package)
    if not root.is_dir():
        parser.error(f"{root}: not a directory")
    modules = sorted(module_offenders(root, args.module_lines), reverse=True)
    functions = sorted(function_offenders(root, args.function_lines), reverse=True)
    out = sys.stdout
    for lines, where in modules:
        out.write(f"{where}  module  {lines} lines\n")
    for lines, where in functions:
        out.write(f"{where}  function  {lines} lines\n")
    out.write(
        f"{len(modules)} modules over {args.module_lines} lines, "
        f"{len(functions)} functions over {args.function_lines} lines\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
