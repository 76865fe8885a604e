"""The sweep's capacity answer: each side's highest load within ``--slo``'s percentile
bounds, and their ratio, with intervals (the maths: ``core.load.capacity``).

``level_sample`` takes one level's requests from its record columns after each batch:
the complete pairs outside warm-up and cool-down, grouped by the unit of replication
the level's paired intervals rest on (``core.compare.blocks.assign_units``), each side's
TTFT, TPOT and E2E in ms with ``inf`` for a failed request; and each side's served
requests/s (completed over active time, the report's side summary). ``capacity_json``
is the ``capacity`` object of ``sweep.json`` (see ``docs/contract.md``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from specproxy.core.compare.column_figures import PairColumns
from specproxy.core.compare.units import assign_units
from specproxy.core.load.capacity import (
    SIDES,
    Bound,
    CapacityResult,
    Estimate,
    LevelSample,
    estimate_capacity,
    pooled_percentile,
)
from specproxy.core.records.columns import NULL, RecordColumns
from specproxy.core.records.model import Role
from specproxy.report.model import Report

METHOD = (
    "per level, the percentile of each side's requests (a failed request counts as an infinite"
    " latency); across levels a non-decreasing (isotonic) fit, crossed with the bound by linear"
    " interpolation in load; 95% interval: 1000 bootstrap resamples of each level's block"
    " pairs, the same draw for both sides, as the ratio intervals: estimate * exp(+-t(B-1) * sd"
    " * sqrt(B/(B-1))), sd the resamples' standard deviation of the log capacity, B block pairs"
    " (the fewest of any level); where some resamples cross outside the ladder, their 2.5th and"
    " 97.5th percentiles stretched by t(B-1)/z * sqrt(B/(B-1)), an open end kept open"
)
REPEATED_LOOKS = (
    "the stopping rule looks at each level after every batch; the interval is not corrected"
    " for that (its coverage on the simulator is measured by bench/capacity_coverage.py)"
)


def level_sample(cols: RecordColumns, report: Report, load: float, kind: str) -> LevelSample:
    """One level's ``LevelSample`` (module docstring); on a rate ladder the served rate is
    the offered one (the capacity is then in requests/s already)."""
    pairs = PairColumns.of(cols)
    keep = [
        k for k, (b, c) in enumerate(zip(pairs.base, pairs.cand, strict=True))
        if not cols.warmup[b] and not cols.warmup[c]
    ]  # fmt: skip
    base = [pairs.base[k] for k in keep]
    cand = [pairs.cand[k] for k in keep]
    ids, sent, block = cols.experiment_ids, cols.sent, cols.block
    units = assign_units(
        [ids[cols.experiment[b]] for b in base],
        [v if (v := block[b]) >= 0 else -1 for b in base],
        [min(sent[b], sent[c]) for b, c in zip(base, cand, strict=True)],
    )
    columns = {"ttft": cols.ttft, "tpot": cols.tpot, "e2e": cols.e2e}
    values: dict[str, dict[str, list[list[float]]]] = {}
    for side, rows in (("baseline", base), ("candidate", cand)):
        values[side] = {}
        for metric, column in columns.items():
            groups: list[list[float]] = [[] for _ in range(units.count)]
            for row, unit in zip(rows, units.of, strict=True):
                if cols.error[row] >= 0:
                    groups[unit].append(math.inf)
                elif (value := column[row]) != NULL:
                    groups[unit].append(value / 1000.0)
            values[side][metric] = groups
    rates = {s: load if kind == "rate" else _served(report, s) for s in SIDES}
    return LevelSample(load, units.count, values, rates)


def _served(report: Report, side: str) -> float | None:
    """The side's completed requests/s over its active time (``SideSummary.requests_per_s``)."""
    summary = report.side(Role(side))
    return summary.requests_per_s if summary is not None else None


def _num(value: float | None) -> float | None:
    """JSON has no infinity: an open upper end is null (the status says which end)."""
    return None if value is None or math.isinf(value) else value


def _level_json(lv: LevelSample, bounds: Sequence[Bound]) -> dict[str, Any]:
    """One level: its units, each side's served requests/s and each bound's percentile (ms;
    null where failures put it at infinity)."""
    ones = [1] * lv.units

    def percentile(side: str, b: Bound) -> float | None:
        return _num(pooled_percentile(lv.values[side][b.metric], ones, b.percentile / 100))

    return {
        "load": lv.load,
        "units": lv.units,
        "requests_per_s": {side: lv.rates.get(side) for side in SIDES},
        "percentiles_ms": {side: {b.key: percentile(side, b) for b in bounds} for side in SIDES},
    }


def estimate_json(est: Estimate) -> dict[str, Any]:
    return {"estimate": _num(est.point), "ci": None if est.low is None or est.high is None
            else [_num(est.low), _num(est.high)], "status": est.status}  # fmt: skip


def capacity_json(
    result: CapacityResult | None,
    bounds: Sequence[Bound],
    kind: str,
    levels: Sequence[LevelSample],
) -> dict[str, Any]:
    """The ``capacity`` object of sweep.json (``docs/contract.md``)."""
    doc: dict[str, Any] = {
        "slo": [b.to_json() for b in bounds],
        "slo_text": ", ".join(b.text() for b in bounds),
        "kind": kind,
        "load_unit": "concurrent streams" if kind == "concurrency" else "requests/s",
        "levels": [_level_json(lv, bounds) for lv in levels],
        "confidence": None if result is None else result.confidence,
        "resamples": None if result is None else result.resamples,
        "method": METHOD,
        "repeated_looks": REPEATED_LOOKS,
    }
    for side in SIDES:
        if result is None:
            doc[side] = None
            continue
        doc[side] = {"load": estimate_json(result.load[side]),
                     "requests_per_s": estimate_json(result.served[side])}  # fmt: skip
    doc["ratio"] = None if result is None else estimate_json(result.served_ratio)
    doc["load_ratio"] = None if result is None else estimate_json(result.load_ratio)
    return doc


def sweep_capacity(
    samples: Sequence[LevelSample | None], bounds: Sequence[Bound], kind: str
) -> dict[str, Any] | None:
    """The capacity object for one ladder's levels; None without percentile bounds."""
    if not bounds:
        return None
    levels = [s for s in samples if s is not None and s.units > 0]
    result = estimate_capacity(levels, bounds) if levels else None
    return capacity_json(result, bounds, kind, sorted(levels, key=lambda lv: lv.load))
