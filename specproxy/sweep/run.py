"""``run_sweep``: a load sweep, or a setting sweep with a load sweep at each value.

Composes the replay library (each batch of each level is a ``run_replay`` run), the
report builder (each level's figures are its ordinary report's) and the launcher (a
setting sweep starts the servers), which is why ``sweep`` sits above ``replay``,
``report`` and ``launch`` in the layering. Writes the experiment log (``sweep.log.SweepLog``)
after every batch, so a killed sweep leaves a current ``sweep.json``; a stop request
(Ctrl-C) ends the sweep ``aborted`` with every finished level kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from specproxy.errors import ConfigError
from specproxy.launch.description import load_description
from specproxy.recording.rundir import new_run_dir
from specproxy.sweep import recommend as rec
from specproxy.sweep import schedule
from specproxy.sweep.capacity import sweep_capacity
from specproxy.sweep.config import LEVEL_BLOCKS, SweepConfig
from specproxy.sweep.ladder import LevelRun, Targets, run_ladder, trace_cursor
from specproxy.sweep.launchers import SettingLauncher, SglangLauncher
from specproxy.sweep.log import SweepLog, level_line, now_iso
from specproxy.sweep.plan import ORDER
from specproxy.sweep.settings import (
    Setting,
    SettingResult,
    launch_diff,
    run_value,
    start_baseline,
    walk,
)

STOPPING_RULE = (
    "after every batch (two block pairs) the level's report is rebuilt; once the level has at"
    " least 6 block pairs (the unit its intervals rest on) outside any drift episode it stops"
    " adding pairs when its verdict is faster, slower or no_difference, or at --pairs pairs;"
    " at 18 block pairs it stops regardless"
)
PLAIN = "the candidate"


@dataclass(frozen=True, slots=True)
class SweepOutcome:
    """A finished sweep: its directory, status and the final sweep.json document."""

    root: Path
    status: str
    doc: dict[str, Any]


def _header(cfg: SweepConfig) -> dict[str, Any]:
    slo = cfg.slo_bounds
    return {
        "kind": cfg.kind,
        "ladder": list(cfg.levels),
        "order": ORDER,
        "prompts": "fresh: one cursor through the trace across levels and setting values,"
        " no request sent twice"
        if cfg.fresh_prompts
        else "same: every batch starts at the trace's first request",
        "stopping_rule": STOPPING_RULE,
        "pairs_max": cfg.pairs,
        "block_size": cfg.block_size,
        "level_blocks": LEVEL_BLOCKS if cfg.kind == "concurrency" else None,
        "cooldown": "n per block at concurrency n" if cfg.kind == "concurrency" else None,
        "warmup": cfg.warmup,
        "slo": None
        if slo is None or (slo.ttft_ms is None and slo.tpot_ms is None)
        else {"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms},
        "capacity_slo": [b.to_json() for b in slo.bounds] if slo is not None else [],
        "traces": list(cfg.traces),
        "vary": [{"key": k, "values": list(v)} for k, v in cfg.settings],
        "launch": cfg.launch,
        "simulated": False,
    }


class _Sweep:
    """The sweep's results so far and the log that records them."""

    def __init__(self, cfg: SweepConfig, root: Path, notify: Callable[[str], None] | None) -> None:
        self.cfg = cfg
        self.notify = notify
        self.log = SweepLog(root, _header(cfg))
        self.results: list[SettingResult] = []

    def entry(self, r: SettingResult, *, final: bool = False) -> dict[str, Any]:
        figures = [run.figures for run in r.levels if run.figures is not None]
        cross = rec.crossovers(figures) if figures else None
        bounds = self.cfg.slo_bounds.bounds if self.cfg.slo_bounds else ()
        samples = [run.sample for run in r.levels]
        capacity = sweep_capacity(samples, bounds, self.cfg.kind) if final and figures else None
        return {
            "setting": dict(r.setting.values),
            "label": r.setting.label or PLAIN,
            "run_dir": str(r.folder),
            "status": r.refusal.status if r.refusal else ("completed" if figures else "not_run"),
            "error": r.refusal.error if r.refusal else None,
            "candidate_args": r.candidate_args,
            "launch_diff": r.launch_diff,
            "levels": [f.to_json() for f in figures],
            "crossover": rec.crossover_json(cross["e2e"]) if cross else None,
            "crossovers": {m: rec.crossover_json(c) for m, c in cross.items()} if cross else None,
            "capacity": capacity,
        }

    def candidates(self) -> list[rec.Candidate]:
        out = []
        for r in self.results:
            figures = tuple(run.figures for run in r.levels if run.figures is not None)
            if r.refusal is None and figures:
                label = r.setting.label or PLAIN
                out.append(rec.Candidate(label, figures, rec.crossovers(figures)["e2e"]))
        return out

    def update(self, status: str = "running") -> None:
        entries = [self.entry(r, final=status != "running") for r in self.results]
        levels = [{**lv, "setting": e["setting"]} for e in entries for lv in e["levels"]]
        changes: dict[str, Any] = {"settings": entries, "levels": levels, "status": status}
        changes["simulated"] = any(lv.get("simulated") for lv in levels)
        if status != "running":
            found = rec.recommend_sweep(self.candidates(), kind=self.cfg.kind, status=status)
            chosen = next((e for e in entries if e["label"] == found.chosen), None)
            first = next((e for e in entries if e["crossover"] is not None), None)
            changes["crossover"] = (chosen or first or {}).get("crossover")
            with_capacity = next((e for e in entries if e["capacity"] is not None), None)
            changes["capacity"] = (chosen or with_capacity or {}).get("capacity")
            changes["recommendation"] = found.text
            changes["recommendation_reason"] = found.reason
            changes["finished_at"] = now_iso()
            changes.update(self.schedule(entries, changes["simulated"]))
        else:
            first = next((e for e in entries if e["crossover"] is not None), None)
            changes["crossover"] = first["crossover"] if first else None
        self.log.save(**changes)

    def schedule(self, entries: list[dict[str, Any]], simulated: bool) -> dict[str, Any]:
        """A setting sweep's ``best_settings`` and ``schedule`` (``sweep.schedule``)."""
        best = schedule.best_settings(entries) if self.cfg.settings else None
        if best is None:
            return {}
        written = schedule.write_schedule(self.log.root, best, self.cfg.kind, simulated)
        return {"best_settings": best, "schedule": written}

    def log_refusal(self, r: SettingResult) -> None:
        assert r.refusal is not None
        self.log.append({
            "schema": "specproxy.sweep-experiment/1", "status": r.refusal.status,
            "experiment_ids": [r.experiment_id], "setting": dict(r.setting.values),
            "run_dir": str(r.folder), "error": r.refusal.error,
            "baseline": {"speculation": False}, "candidate": {"algorithm": None},
            "candidate_args": r.candidate_args, "launch_diff": r.launch_diff,
            "acceptance_metrics": None, "level": None, "verdict": None,
        })  # fmt: skip


def _level_status(run: LevelRun) -> str:
    return "completed" if not run.aborted_batches and run.figures is not None else "aborted"


async def _load_sweep(s: _Sweep, stop: asyncio.Event, progress: TextIO | None) -> None:
    cfg = s.cfg
    assert cfg.baseline is not None
    assert cfg.candidate is not None
    result = SettingResult(Setting({}), s.log.root, {}, [], [])
    s.results.append(result)

    def on_batch(runs: list[LevelRun]) -> None:
        result.levels = runs
        s.update()

    result.levels = await run_ladder(
        cfg, Targets(cfg.baseline, cfg.candidate), s.log.root, stop=stop, on_batch=on_batch,
        progress=progress, notify=s.notify,
    )  # fmt: skip
    for run in result.levels:
        if run.batches or run.aborted_batches:  # a level never started is no experiment
            s.log.append(level_line(run, {}, None, _level_status(run)))


async def _setting_sweep(
    s: _Sweep, launcher: SettingLauncher, stop: asyncio.Event, progress: TextIO | None
) -> None:
    for key, _ in s.cfg.settings:
        launcher.check_key(key)
    server, base = await start_baseline(launcher, s.log.root)
    previous: dict[str, str] | None = None
    cursor = trace_cursor(s.cfg)  # one cursor for every value: the baseline sees no repeat
    try:
        for setting in walk(s.cfg.settings):
            if stop.is_set():
                break
            args = launcher.candidate_args(setting.values)
            result = SettingResult(setting, s.log.root / setting.slug, args,
                                   launch_diff(previous, args), [])  # fmt: skip
            s.results.append(result)
            previous = args

            def on_batch(runs: list[LevelRun], result: SettingResult = result) -> None:
                result.levels = runs
                s.update()

            await run_value(s.cfg, launcher, base, result, stop=stop, on_batch=on_batch,
                            progress=progress, notify=s.notify, cursor=cursor)  # fmt: skip
            if result.refusal is not None and s.notify is not None:
                s.notify(f"{setting.label}: {result.refusal.status}: {result.refusal.error}")
            if result.refusal is not None:
                s.log_refusal(result)
            else:
                for run in result.levels:
                    if run.batches or run.aborted_batches:
                        s.log.append(level_line(run, setting.values, result.launch_diff,
                                                _level_status(run), args))  # fmt: skip
            s.update()
    finally:
        await server.stop(timeout_s=launcher.stop_timeout_s)


async def run_sweep(
    cfg: SweepConfig,
    *,
    stop: asyncio.Event | None = None,
    progress: TextIO | None = None,
    launcher: SettingLauncher | None = None,
    notify: Callable[[str], None] | None = None,
) -> SweepOutcome:
    """Run the sweep ``cfg`` describes (module docstring); ``launcher`` overrides ``--launch``.

    ``notify`` gets one line per finished batch and per refused setting value.
    """
    stop = stop or asyncio.Event()
    root = new_run_dir(Path(cfg.run_dir) if cfg.run_dir else None, "sweep")
    try:
        s = _Sweep(cfg, root, notify)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    status = "aborted"
    try:
        if cfg.settings:
            chosen = launcher or SglangLauncher(load_description(str(cfg.launch)))
            await _setting_sweep(s, chosen, stop, progress)
        else:
            await _load_sweep(s, stop, progress)
        status = "aborted" if stop.is_set() else "completed"
    finally:
        s.update(status)
    return SweepOutcome(root, status, s.log.doc)
