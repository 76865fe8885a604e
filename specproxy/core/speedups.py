"""The optional C speedups (``core/_speedups.c``), or None.

None when the module was not built (no C compiler when the package was installed) or
when the environment sets ``SPECPROXY_PURE_PYTHON`` to anything but an empty string:
every caller then takes its Python path. Both paths give the same results
(``tests/core/test_speedups.py``); the Python one is the reference.
"""

from __future__ import annotations

import os
from types import ModuleType


def load() -> ModuleType | None:
    """The C module, unless it is missing or switched off."""
    if os.environ.get("SPECPROXY_PURE_PYTHON"):
        return None
    try:
        from specproxy.core import _speedups
    except ImportError:
        return None
    return _speedups


SPEEDUPS = load()
