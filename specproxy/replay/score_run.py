"""``specproxy score RUN_DIR``: the output-distribution check's scoring for a finished run.

For a ``serve`` run in mirror mode started with ``--record --record-text``: its records hold
each side's output text and its ``trace.jsonl`` the client's request body with the pair id
(``x_pair_id``, ``proxy.trace_recording``). The complete pairs (both sides completed, text on
both) in record order, up to ``limit // 2``, are scored on the baseline exactly as a replay's
are (``replay.scoring``: after the traffic, never recorded as traffic, bounded and counted),
writing ``scores.jsonl`` and ``scoring.json`` into the run directory. A run without text, or
without the trace's bodies, is refused with the option that was missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from specproxy.backends.base import BackendSpec
from specproxy.backends.http import open_backend
from specproxy.core.records.model import Role, Route
from specproxy.core.records.runfiles import order_record_files, trace_name
from specproxy.errors import ConfigError
from specproxy.replay.scoring import Pending, block_of, score_pairs


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    with path.open("rb") as fh:
        for raw in fh:
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue  # a last line cut off mid-write
            if isinstance(value, dict):
                out.append(value)
    return out


def _outputs(run_dir: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """Completed, texted, non-warm-up records by pair id and side."""
    names = order_record_files(p.name for p in run_dir.glob("requests*.jsonl"))
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for name in names:
        for r in _lines(run_dir / name):
            usable = r.get("error_kind") is None and not r.get("warmup")
            if usable and r.get("output_text") and r.get("pair_id"):
                found.setdefault(str(r["pair_id"]), {})[str(r.get("side"))] = r
    return found


def _bodies(run_dir: Path) -> dict[str, tuple[Route, dict[str, Any]]]:
    path = run_dir / trace_name()
    if not path.is_file():
        return {}
    out = {}
    for line in _lines(path):
        body, pair, route = line.get("body"), line.get("x_pair_id"), line.get("route")
        if isinstance(body, dict) and isinstance(pair, str) and route in {r.value for r in Route}:
            out[pair] = (Route(route), body)
    return out


def pending_pairs(run_dir: Path) -> list[Pending]:
    """The run's complete pairs with their prompts (ConfigError naming what is missing)."""
    outputs = _outputs(run_dir)
    if not outputs:
        raise ConfigError(
            f"{run_dir}: the records hold no output text: start serve with --record-text"
        )
    bodies = _bodies(run_dir)
    if not bodies:
        raise ConfigError(
            f"{run_dir}: no {trace_name()} with request bodies and pair ids: start serve in "
            "mirror mode with --record --record-text"
        )
    pairs = []
    for pair_id, sides in outputs.items():
        if len(sides) != 2 or pair_id not in bodies:
            continue
        first = sides[Role.BASELINE.value]
        route, body = bodies[pair_id]
        identity = {
            "pair_id": pair_id,
            "experiment_id": first.get("experiment_id"),
            "block": block_of(first.get("labels")),
            "sent_at_unix_s": first.get("sent_at_unix_s"),
        }
        pending = Pending(identity, body, route)
        for role in Role:
            pending.texts[role] = str(sides[role.value]["output_text"])
            pending.tokens[role] = int(sides[role.value].get("completion_tokens") or 0)
        pairs.append(pending)
    return pairs


async def score_run_dir(
    run_dir: Path, baseline: str, limit: int, api_key: str | None = None
) -> dict[str, Any]:
    """Score ``run_dir``'s pairs on the ``baseline`` server; returns the counts."""
    if limit < 2:
        raise ConfigError(f"--score-requests: at least 2 (one pair), got {limit}")
    pairs = pending_pairs(run_dir)[: limit // 2]
    async with open_backend(BackendSpec(baseline, Role.BASELINE, api_key=api_key)) as reader:
        return await score_pairs(reader, pairs, limit, run_dir)
