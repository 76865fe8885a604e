"""Run directories and experiment ids.

A run directory holds one experiment: ``experiment.json``, ``requests.jsonl``,
``histograms/``, ``snapshots/``, ``specproxy.log`` and the rendered reports (with
``serve --workers N``, one records file, histogram log and run log per worker:
``core.records.runfiles`` names them).
"""

from __future__ import annotations

import re
import secrets
import time
from pathlib import Path

from specproxy.core.records.runfiles import (
    RECORDS_FILE,
    ROLLED_GLOB,
    SHARD_RECORDS_GLOB,
    rolled_name,
)
from specproxy.errors import ConfigError

__all__ = ["RECORDS_FILE", "ROLLED_GLOB", "new_experiment_id", "new_run_dir", "rolled_name"]
_LABEL = re.compile(r"[^A-Za-z0-9_.-]+")


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
        shards = any(p.stat().st_size for p in base.glob(SHARD_RECORDS_GLOB))  # --workers N
        if (records.exists() and records.stat().st_size) or any(base.glob(ROLLED_GLOB)) or shards:
            raise ConfigError(f"{base}: run directory already holds request records; use a new one")
        return base
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    short = (experiment_id or new_experiment_id())[:6]
    safe = _LABEL.sub("-", label).strip("-") or "run"
    path = Path("runs") / f"{stamp}-{safe}-{short}"
    path.mkdir(parents=True, exist_ok=False)
    return path
