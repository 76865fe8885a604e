"""Public function and class names defined at top level in more than one module of a package.

Run from the repository root::

    .venv/bin/python -m tools.twins [specproxy]

A public name is a top-level ``def``, ``async def`` or ``class`` whose name does not start
with an underscore. Excepted, as the house rule allows: the CLI's ``command`` entry points
(``specproxy/cli/``) and the simulator's mirror of SGLang's routes (the ``async def``
route handlers of ``sim/app.py``, named after SGLang's own). Prints one line per duplicated name with the
modules that define it, then a count; exits 0 either way (it reports, it does not judge).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

EXCEPTED = {"command"}
ROUTE_MIRROR = "sim/app.py"


def public_definitions(root: Path) -> dict[str, list[str]]:
    """Public top-level function/class name -> sorted module paths that define it."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            if not isinstance(node, kinds) or node.name.startswith("_"):
                continue
            route = isinstance(node, ast.AsyncFunctionDef) and path.as_posix().endswith(
                ROUTE_MIRROR
            )
            if not route:
                found[node.name].add(str(path))
    return {name: sorted(paths) for name, paths in found.items()}


def twins(root: Path) -> dict[str, list[str]]:
    """The names of ``public_definitions`` defined in two or more modules, exceptions left out."""
    return {
        name: paths
        for name, paths in sorted(public_definitions(root).items())
        if len(paths) > 1 and name not in EXCEPTED
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", default="specproxy")
    args = parser.parse_args(argv)
    root = Path(args.package)
    if not root.is_dir():
        parser.error(f"{root}: not a directory")
    found = twins(root)
    for name, paths in found.items():
        sys.stdout.write(f"{name}  {'  '.join(paths)}\n")
    sys.stdout.write(f"{len(found)} public names defined in more than one module\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
