"""What the tests and the ``bench/`` scripts share: the proxy rig over loopback, hostile peers,
the fuzz targets, readers of the real captures, fabricated runs and the two-simulator
crossover setup.

Why a subpackage of the product rather than a module under ``tests/`` or a top-level
``benchkit/``: the editable install (``make venv``) already puts ``specproxy`` on every path,
so ``bench/`` scripts import this as they import the package, with no ``sys.path`` edits and
under ``python -P`` as on the GPU host; and mypy and ruff check it with the package. The
product's own modules never import it (``lint-imports``: "only tests and bench import
specproxy.testing"). Its readers of captures and traces take their files from the checkout
(``REPO``): it serves a checkout, not an installed wheel.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The checkout's root (``tests/fixtures`` and ``traces`` are read from here)."""
