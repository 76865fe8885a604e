"""The best setting at each load of a setting sweep, and the schedule files it writes.

Reads the sweep's own entries (``sweep.json``'s ``settings``) and applies
``core.load.setting_choice`` at every level: the best value by the median per-pair E2E ratio (a
second table by the median per-pair TPOT ratio), its interval against the baseline and
against the runner-up, ``off`` where no value is eligible, and the adaptive value against the
best fixed one. ``write_schedule`` writes two files into the sweep directory:

* ``schedule.json``: the plain schedule, ``{"schedule": {"<level>": {KEY: VALUE} | "off"}}``
  with the ladder's kind, the metric and the rule;
* ``speculative-adaptive-config.json``: the same schedule in the form SGLang 0.5.16's
  ``--speculative-adaptive-config`` reads, where it can hold it (``adaptive_config``).

**What SGLang 0.5.16's adaptive config can hold.** A JSON object whose integer keys are
lower bounds of running-batch-size ranges (``"1"``, ``"8"``: batch 1-7, batch 8 and up),
each with ``candidate_steps`` (the ``speculative_num_steps`` values that range may use; the
controller then moves between them by an EMA of the accepted drafts, so a single candidate
pins the range's steps). So it holds a schedule only when the ladder is in concurrency
(a batch size; a rate is not one), every chosen value is a ``speculative-num-steps`` count
(the draft tokens follow as steps + 1 at topk 1; topk and draft tokens are not per-range),
and the server is EAGLE/EAGLE3 at topk 1. A level's range starts at the geometric mean of it
and the level below, rounded up (the running batch at concurrency ``n`` is at most ``n``
and often a little less); the lowest level's range starts at 1. "Off" is not written: a
zero-step candidate (no drafting) is not documented for 0.5.16, so there the range below
keeps its steps; ``not_expressed`` says so for each such level.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specproxy.core.load.setting_choice import (
    MARGIN,
    Contrast,
    LevelChoice,
    Option,
    RatioEstimate,
    adaptive_text,
    apart_text,
    choose,
)
from specproxy.sweep.launchers import ADAPTIVE

SCHEDULE_FILE = "schedule.json"
ADAPTIVE_CONFIG_FILE = "speculative-adaptive-config.json"
STEPS_KEY = "speculative-num-steps"
RULE = {
    "e2e": (
        "a value is eligible at a level where its verdict there is faster (the 95% interval of"
        " its median per-pair E2E ratio lies wholly below 1 - 2%, on at least 6 block pairs,"
        " failures no more frequent than the baseline's); the best is the eligible value with"
        " the smallest median per-pair E2E ratio; none eligible: off"
    ),
    "tpot": (
        "a value is eligible at a level where the 95% interval of its median per-pair TPOT"
        " ratio lies wholly below 1 - 2% on at least 6 block pairs; the best is the eligible"
        " value with the smallest median per-pair TPOT ratio; none eligible: off"
    ),
}
COMPARE = (
    "best / runner-up and adaptive / best: the ratio of the two values' baseline-normalised"
    " figures, interval from their standard errors combined (Welch); the values ran on"
    " disjoint block pairs of the same kept baseline"
)
MIN_UNITS = 6


def _estimate(lv: dict[str, Any], metric: str) -> RatioEstimate | None:
    point, ci = lv.get(f"{metric}_ratio"), lv.get(f"{metric}_ci")
    if point is None:
        return None
    low, high = (ci[0], ci[1]) if ci else (0.0, math.inf)
    return RatioEstimate(point, low, math.inf if high is None else high, int(lv.get("units") or 0))


def _verdict(lv: dict[str, Any], metric: str, est: RatioEstimate | None) -> str:
    if metric == "e2e":
        return str(lv.get("verdict"))
    ok = est is not None and est.units >= MIN_UNITS and est.high < 1.0 - MARGIN
    return "faster" if ok else "not_faster"


def is_adaptive(entry: dict[str, Any]) -> bool:
    return ADAPTIVE in (entry.get("setting") or {}).values()


def options_at(entries: Sequence[dict[str, Any]], level: float, metric: str) -> list[Option]:
    """Every completed value's figure at ``level``."""
    out = []
    for entry in entries:
        lv = next((x for x in entry.get("levels") or () if x["level"] == level), None)
        if lv is None:
            continue
        est = _estimate(lv, metric)
        out.append(Option(str(entry["label"]), _verdict(lv, metric, est), est, is_adaptive(entry)))
    return out


def _est_json(o: Option | None) -> dict[str, Any] | None:
    if o is None or o.estimate is None:
        return None
    e = o.estimate
    high = None if math.isinf(e.high) else e.high
    return {"label": o.label, "ratio": e.point, "ci": [e.low, high], "units": e.units,
            "verdict": o.verdict}  # fmt: skip


def _contrast_json(c: Contrast | None, words: str) -> dict[str, Any] | None:
    if c is None:
        return None
    df = None if math.isinf(c.df) else round(c.df, 1)
    return {"ratio": c.point, "ci": [c.low, c.high], "df": df, "label": c.label(MARGIN),
            "says": words}  # fmt: skip


def choice_json(c: LevelChoice, settings: dict[str, dict[str, str]]) -> dict[str, Any]:
    """One ``best_settings.<metric>.levels[]`` entry of sweep.json."""
    return {
        "level": c.level,
        "chosen": c.chosen,
        "setting": settings.get(c.best.label) if c.best else None,
        "best": _est_json(c.best),
        "nearest": _est_json(c.nearest),
        "runner_up": _est_json(c.runner_up),
        "vs_runner_up": _contrast_json(c.vs_runner_up, apart_text(c.vs_runner_up)),
        "adaptive": _est_json(c.adaptive),
        "adaptive_vs_best": _contrast_json(c.adaptive_vs_best, adaptive_text(c.adaptive_vs_best)),
    }


def best_settings(entries: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """sweep.json's ``best_settings`` (None for a load sweep: one value, nothing to choose)."""
    done = [e for e in entries if e.get("setting") and e.get("levels")]
    if not done:
        return None
    levels = sorted({lv["level"] for e in done for lv in e["levels"]})
    settings = {str(e["label"]): dict(e["setting"]) for e in done}
    out: dict[str, Any] = {"decides": "e2e", "compare": COMPARE, "margin": MARGIN}
    for metric in ("e2e", "tpot"):
        chosen = [choose(level, options_at(done, level, metric)) for level in levels]
        out[metric] = {"rule": RULE[metric], "levels": [choice_json(c, settings) for c in chosen]}
    out["adaptive_run"] = next(
        ({"label": e["label"], "status": e.get("status"), "error": e.get("error")}
         for e in entries if is_adaptive(e)), None,
    )  # fmt: skip
    return out


def _range_starts(levels: Sequence[float]) -> list[int]:
    starts = [1]
    for below, level in itertools.pairwise(levels):
        starts.append(max(starts[-1] + 1, math.ceil(math.sqrt(below * level))))
    return starts


def adaptive_config(
    rows: Sequence[dict[str, Any]], kind: str
) -> tuple[dict[str, Any] | None, list[str]]:
    """The ``--speculative-adaptive-config`` object for the E2E schedule ``rows`` (module
    docstring), or None, and what it cannot express."""
    if kind != "concurrency":
        return None, ["a rate ladder: the adaptive config keys on running batch size"]
    missing: list[str] = []
    config: dict[str, Any] = {}
    starts = _range_starts([r["level"] for r in rows])
    for row, start in zip(rows, starts, strict=True):
        setting = row["setting"]
        if setting is None:
            missing.append(f"off at {row['level']:g} streams: no zero-step candidate in 0.5.16;"
                           " the range below keeps its steps there")  # fmt: skip
            continue
        steps = setting.get(STEPS_KEY)
        if len(setting) != 1 or steps is None or not str(steps).isdigit():
            missing.append(f"{row['chosen']} at {row['level']:g} streams: only"
                           f" {STEPS_KEY} can vary per batch-size range")  # fmt: skip
            return None, missing
        config[str(start)] = {"candidate_steps": [int(steps)]}
    return (config or None), missing


def write_schedule(root: Path, best: dict[str, Any], kind: str, simulated: bool) -> dict[str, Any]:
    """Write ``schedule.json`` (and the adaptive config where it holds); sweep.json's
    ``schedule`` entry."""
    rows = best["e2e"]["levels"]
    plan = {f"{r['level']:g}": (r["setting"] if r["setting"] else "off") for r in rows}
    doc = {"schema": "specproxy.schedule/1", "kind": kind, "metric": "e2e",
           "rule": RULE["e2e"], "simulated": simulated, "schedule": plan}  # fmt: skip
    (root / SCHEDULE_FILE).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    config, missing = adaptive_config(rows, kind)
    if config is not None:
        text = json.dumps(config, indent=2) + "\n"
        (root / ADAPTIVE_CONFIG_FILE).write_text(text, encoding="utf-8")
    return {
        "file": SCHEDULE_FILE,
        "schedule": plan,
        "adaptive_config_file": ADAPTIVE_CONFIG_FILE if config is not None else None,
        "adaptive_config": config,
        "adaptive_config_applies_to": "SGLang 0.5.16, EAGLE/EAGLE3 at --speculative-eagle-topk 1,"
        " with --speculative-adaptive",
        "not_expressed": missing,
    }
