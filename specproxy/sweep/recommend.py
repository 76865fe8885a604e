"""The sweep's crossovers and its one recommendation (pure: figures in, text out).

**Crossover.** ``core.load.crossover.estimate_crossover`` over one setting value's levels, for
E2E (the verdict's metric, the one ``crossover`` in sweep.json names) and for TPOT.

**Recommendation**, gated like a single comparison's (``core.compare.verdict``):

* any simulated level → ``simulated`` and nothing more;
* a sweep that did not complete → none;
* a level whose report lists a missing condition (launch configs incomplete, raw
  measurements missing, failures not counted, outputs not compared, not a matched
  baseline, scope not stated) → none, naming the level and the conditions;
* a candidate that failed more often than the baseline at a level keeps its report's
  verdict (which the failure-aware rule already judged); the sweep adds nothing to it.

Otherwise each accepted setting value is ranked by how far it pays: at every tested
load, then by its E2E crossover estimate; values that pay nowhere or whose crossover is
undetermined are never recommended. The text names the value, the load it pays up to
with its interval, and the scope of the levels' reports (model, revision, server
version, GPU, precision, workload) plus the load range tested.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specproxy.core.load.crossover import Crossover, LevelRatio, estimate_crossover
from specproxy.report.sweep_figures import LevelFigures

UNITS = {"concurrency": "concurrent streams", "rate": "requests/s"}


def ratios(levels: Sequence[LevelFigures], metric: str) -> list[LevelRatio]:
    """The estimator's input: one ``LevelRatio`` per level that has the metric's ratio."""
    out = []
    for lv in levels:
        point, ci = (lv.e2e_ratio, lv.e2e_ci) if metric == "e2e" else (lv.tpot_ratio, lv.tpot_ci)
        if point is None:
            continue
        out.append(LevelRatio(lv.level, point, ci[0] if ci else None, ci[1] if ci else None))
    return out


def crossovers(levels: Sequence[LevelFigures]) -> dict[str, Crossover]:
    return {m: estimate_crossover(ratios(levels, m), m) for m in ("e2e", "tpot")}


def crossover_json(c: Crossover | None) -> dict[str, object] | None:
    """``{metric, estimate, ci: [lo, hi], status, detail}``; ``inf`` as None (open bound)."""
    if c is None:
        return None
    ci = None
    if c.ci is not None:
        ci = [None if math.isinf(b) else b for b in c.ci]
    return {"metric": c.metric, "estimate": c.estimate, "ci": ci, "status": c.status,
            "detail": c.detail}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Candidate:
    """One accepted setting value's ladder, for ranking."""

    label: str  # "KEY=V" (or "the candidate" for a plain load sweep)
    levels: tuple[LevelFigures, ...]
    crossover: Crossover


@dataclass(frozen=True, slots=True)
class SweepRecommendation:
    text: str | None
    reason: str
    chosen: str | None


def _reach(c: Candidate) -> float:
    if c.crossover.status == "pays_everywhere":
        return math.inf
    if c.crossover.status == "crossed" and c.crossover.estimate is not None:
        return c.crossover.estimate
    return -math.inf


def _scope(levels: Sequence[LevelFigures], kind: str) -> str:
    seen: dict[str, str] = {}
    for lv in levels:
        for key, value in lv.scope:
            if value and key != "load range":
                seen.setdefault(key, value)
    loads = sorted(lv.level for lv in levels)
    seen["load range"] = f"{loads[0]:g}-{loads[-1]:g} {UNITS[kind]}"
    return "; ".join(f"{k}: {v}" for k, v in seen.items())


def load_text(level: float, kind: str) -> str:
    """A load with its unit: ``1 concurrent stream``, ``4 concurrent streams``, ``2 requests/s``."""
    if kind == "concurrency":
        return f"{level:g} concurrent stream{'' if level == 1 else 's'}"
    return f"{level:g} {UNITS[kind]}"


def _gate(candidates: Sequence[Candidate], status: str, kind: str) -> str | None:
    levels = [lv for c in candidates for lv in c.levels]
    if not levels:
        return "no level finished"
    if status != "completed":
        return f"the sweep is {status}"
    for c in candidates:
        for lv in c.levels:
            if lv.missing_conditions:
                names = ", ".join(lv.missing_conditions)
                return f"{c.label} at {load_text(lv.level, kind)}: conditions not met: {names}"
    return None


def _text(best: Candidate, kind: str) -> str:
    unit = UNITS[kind]
    c = best.crossover
    top = max(lv.level for lv in best.levels)
    if c.status == "pays_everywhere":
        head = f"{best.label} pays at every tested load (up to {top:g} {unit})"
    else:
        assert c.estimate is not None
        span = ""
        if c.ci is not None:
            hi = "beyond the ladder" if math.isinf(c.ci[1]) else f"{c.ci[1]:.3g}"
            span = f" (95% interval {c.ci[0]:.3g} to {hi})"
        head = f"{best.label} pays up to ~{c.estimate:.3g} {unit}{span}"
    return f"{head} on this trace. Holds only within this scope: {_scope(best.levels, kind)}."


def recommend_sweep(
    candidates: Sequence[Candidate], *, kind: str, status: str
) -> SweepRecommendation:
    """The sweep's recommendation (see the module docstring)."""
    if any(lv.simulated for c in candidates for lv in c.levels):
        return SweepRecommendation("simulated", "the servers were simulated", None)
    blocked = _gate(candidates, status, kind)
    if blocked is not None:
        return SweepRecommendation(None, blocked, None)
    ranked = sorted(candidates, key=_reach, reverse=True)
    if not ranked or _reach(ranked[0]) == -math.inf:
        why = "; ".join(f"{c.label}: {c.crossover.detail}" for c in candidates)
        return SweepRecommendation(None, f"no setting pays at a tested load ({why})", None)
    best = ranked[0]
    return SweepRecommendation(_text(best, kind), "every condition holds", best.label)
