"""The sweep's experiment log: ``DIR/sweep.json`` (rewritten atomically after every batch)
and ``DIR/experiments.jsonl`` (one line per experiment, appended and flushed).

``sweep.json`` (schema ``specproxy.sweep/1``): ``status`` (``running``, ``completed``,
``aborted``), the ladder (``kind``, ``ladder``, ``order``, ``stopping_rule``), and per
setting value an entry of ``settings`` with its ``levels``, ``crossover`` (E2E) and
``crossovers`` (E2E and TPOT). At the top level: ``levels`` (every level of every value,
each tagged with its ``setting``), ``crossover`` (the E2E crossover of the recommended
value, else of the first accepted one; null before any level finished) and
``recommendation`` with ``recommendation_reason``.

An ``experiments.jsonl`` line uses the lab's experiment-log fields: ``status``,
``baseline`` (with ``speculation``), ``candidate`` (with ``algorithm``),
``target_revision``, ``draft_revision``, ``acceptance_metrics``, plus ``setting``,
``launch_diff`` (against the previous setting value), ``level``, ``kind``, ``verdict``
and the level's ratios. A refused or failed-preflight value is a line with status
``rejected`` / ``preflight_failed`` and the server's or the check's own error.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import orjson

from specproxy.recording.experiment import write_json_atomic
from specproxy.sweep.ladder import LevelRun

SCHEMA = "specproxy.sweep/1"
EXPERIMENT_SCHEMA = "specproxy.sweep-experiment/1"
SWEEP_FILE = "sweep.json"
EXPERIMENTS_FILE = "experiments.jsonl"


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _side(experiment: dict[str, Any] | None, role: str) -> dict[str, Any] | None:
    side = (experiment or {}).get(role)
    return dict(side) if isinstance(side, dict) else None


def level_line(
    run: LevelRun,
    setting: dict[str, str],
    launch_diff: Any,
    status: str,
    candidate_args: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The experiments.jsonl line of one finished (or stopped) level."""
    exp = run.first_experiment or {}
    fig = run.figures
    line: dict[str, Any] = {
        "schema": EXPERIMENT_SCHEMA,
        "status": status,
        "experiment_ids": list(run.experiment_ids),
        "setting": setting,
        "level": run.level,
        "kind": fig.kind if fig else None,
        "run_dir": str(run.folder),
        "batches": [str(p) for p in run.batches],
        "aborted_batches": [str(p) for p in run.aborted_batches],
        "closed": run.state.closed,
        "baseline": _side(exp, "baseline"),
        "candidate": _side(exp, "candidate"),
        "target_revision": exp.get("target_revision"),
        "draft_revision": exp.get("draft_revision"),
        "simulated": bool(exp.get("simulated")) or bool(fig and fig.simulated),
        "acceptance_metrics": run.acceptance,
        "candidate_args": candidate_args,
        "launch_diff": launch_diff,
    }
    if fig is not None:
        level = fig.to_json()
        for key in ("verdict", "e2e_ratio", "e2e_ci", "tpot_ratio", "tpot_ci", "pairs",
                    "units", "e2e_medians_ratio", "e2e_medians_ci", "drift",
                    "accept_length", "failures"):  # fmt: skip
            line[key] = level[key]
    else:
        line["verdict"] = None
    return line


class SweepLog:
    """Owns ``sweep.json`` and ``experiments.jsonl`` of one sweep directory."""

    def __init__(self, root: Path, header: dict[str, Any]) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        if (root / SWEEP_FILE).exists() or (root / EXPERIMENTS_FILE).exists():
            raise ValueError(f"{root}: already holds a sweep; use a new --run-dir")
        self.doc: dict[str, Any] = {
            "schema": SCHEMA,
            "status": "running",
            "started_at": now_iso(),
            **header,
            "settings": [],
            "levels": [],
            "crossover": None,
            "capacity": None,
            "recommendation": None,
            "recommendation_reason": "the sweep is running",
        }
        self.save()

    def save(self, **changes: Any) -> None:
        self.doc.update(changes)
        write_json_atomic(self.root / SWEEP_FILE, self.doc)

    def append(self, line: dict[str, Any]) -> None:
        with (self.root / EXPERIMENTS_FILE).open("ab") as fh:
            fh.write(orjson.dumps(line) + b"\n")
            fh.flush()
