"""Run directories and experiment ids.

A run directory holds one experiment: ``experiment.json``, ``requests.jsonl``,
``histograms/``, ``snapshots/``, ``specproxy.log`` and the rendered reports.
"""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

from specproxy.errors import ConfigError

_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")
RECORDS_FILE = "requests.jsonl"
ROLLED_GLOB = "requests-*.jsonl"


def rolled_name(number: int) -> str:
    """File name of the ``number``-th rolled records file (from 1; sorts in write order)."""
    return f"requests-{number:06d}.jsonl"


def new_experiment_id() -> str:
    """A short random id (12 hex digits) naming one experiment."""
    return secrets.token_hex(6)


def new_run_dir(base: Path | None, label: str, *, experiment_id: str | None = None) -> Path:
    """Create and return a run directory.

    With ``base`` None: ``runs/<UTC yyyymmdd-hhmmss>-<label>-<short id>/`` under the
    current directory; otherwise ``base`` itself (created if missing; it must be empty
    of records, so that two runs never mix their records).
    """
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
        records = base / RECORDS_FILE
        if (records.exists() and records.stat().st_size) or any(base.glob(ROLLED_GLOB)):
            raise ConfigError(f"{base}: run directory already holds request records; use a new one")
        return base
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    short = (experiment_id or new_experiment_id())[:6]
    safe = _LABEL.sub("-", label).strip("-") or "run"
    path = Path("runs") / f"{stamp}-{safe}-{short}"
    path.mkdir(parents=True, exist_ok=False)
    return path
