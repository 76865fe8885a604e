"""Every module imports on its own, and the import-layer contracts hold."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import specproxy


def _all_modules() -> list[str]:
    found = pkgutil.walk_packages(specproxy.__path__, prefix="specproxy.")
    names = ["specproxy", *(i.name for i in found if i.name != "specproxy.__main__")]
    return sorted(names)


def test_every_module_imports_alone() -> None:
    """Each module imports in a fresh interpreter, so no module relies on another's side effects."""
    modules = _all_modules()
    script = (
        "import importlib, subprocess, sys\n"
        "mods = sys.argv[1:]\n"
        "procs = [subprocess.Popen([sys.executable, '-c', f'import {m}'], stderr=subprocess.PIPE)"
        " for m in mods]\n"
        "bad = [(m, p.communicate()[1].decode()[-400:]) for m, p in zip(mods, procs)"
        " if p.wait() != 0]\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, *modules], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(modules) > 5


def test_core_imports_no_io_library() -> None:
    """Importing the pure core pulls in neither aiohttp nor asyncio-based specproxy layers."""
    code = (
        "import sys, pkgutil, importlib, specproxy.core as c\n"
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(c.__path__, 'specproxy.core.')]\n"
        "bad = [m for m in ('aiohttp', 'structlog', 'specproxy.backends', 'specproxy.recording')"
        " if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
