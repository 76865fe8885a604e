"""The load ladder against one running baseline/candidate pair.

Each level lives in its own folder under the sweep's directory (``c16/`` for
concurrency 16, ``r2.5/`` for 2.5 requests/s) and is one alternate-mode experiment sent
in batches (``batch-01/``, ``batch-02/``...), each batch an ordinary replay run
directory with its own ``experiment.json`` and records (``replay.run.run_replay``, no
subprocess). The level's figures come from the ordinary report over all its finished
batches (``report.build.build_report``, the merge ``specproxy report DIR...`` does),
written into the level's folder as ``report.*``. Order and stopping rule: ``sweep.plan``.

A stop request (Ctrl-C) ends the running batch early; that batch is kept on disk
(status ``aborted``) but left out of the level's figures, and every finished batch and
level stays.

Prompts: by default every batch replays the trace from its first request, so every
level sends the same prompts. With ``fresh_prompts`` the sweep keeps one cursor into
the trace: each batch, at any level (and, in a setting sweep, at any value: the cursor
carries on when the candidate is relaunched), starts where the previous batch stopped, so no
trace request is sent twice (once to each side, as alternate mode does). That is what
a candidate that learns from its traffic needs (NGRAM's n-gram corpus drafts a repeated
prompt far better than a new one); once the trace is used up, the levels still open
close with ``TRACE_USED``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from specproxy.core.compare.acceptance import acceptance_metrics
from specproxy.core.load.capacity import LevelSample
from specproxy.core.records.column_concat import concat
from specproxy.core.records.model import Role
from specproxy.recording.experiment import read_experiment
from specproxy.replay.config import ReplayConfig
from specproxy.replay.readers import parse_format, read_traces
from specproxy.replay.run import run_replay
from specproxy.report.build import build_report
from specproxy.report.load import load_run_dir
from specproxy.report.sweep_figures import LevelFigures, level_figures
from specproxy.report.write import FILE_NAMES, FORMATS, render
from specproxy.sweep.capacity import level_sample
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.plan import LevelState, batch_size, block_for, cooldown_for, round_order


@dataclass(frozen=True, slots=True)
class Targets:
    """The two servers one ladder runs against."""

    baseline: str
    candidate: str


TRACE_USED = "no trace request left (--fresh-prompts)"


@dataclass(slots=True)
class TraceCursor:
    """``fresh_prompts``: the trace's record count and the first record no batch has had."""

    total: int
    next: int = 0

    def take(self, wanted: int) -> tuple[int, int] | None:
        """``(skip, limit)`` for a batch of up to ``wanted`` records; None once used up."""
        left = self.total - self.next
        if left < 1:
            return None
        skip, limit = self.next, min(wanted, left)
        self.next += limit
        return skip, limit


def trace_cursor(cfg: SweepConfig) -> TraceCursor | None:
    """A cursor over ``cfg``'s traces when ``fresh_prompts`` is on (reads them once), else None."""
    if not cfg.fresh_prompts:
        return None
    fmt = parse_format(cfg.format) if cfg.format else None
    return TraceCursor(len(read_traces(cfg.traces, fmt, skip_bad=cfg.skip_bad).records))


@dataclass(slots=True)
class LevelRun:
    """One level's progress: its folder, finished batch folders, state and latest figures."""

    level: float
    folder: Path
    state: LevelState
    batches: list[Path] = field(default_factory=list)
    aborted_batches: list[Path] = field(default_factory=list)
    experiment_ids: list[str] = field(default_factory=list)
    figures: LevelFigures | None = None
    acceptance: dict[str, Any] | None = None
    first_experiment: dict[str, Any] | None = None
    sample: LevelSample | None = None  # the capacity's view of the level (sweep.capacity)


def level_folder(root: Path, kind: str, level: float) -> Path:
    return root / f"{'c' if kind == 'concurrency' else 'r'}{level:g}"


def replay_config(
    cfg: SweepConfig, targets: Targets, level: float, *, limit: int, block: int, run_dir: Path,
    seed: int, skip: int = 0,
) -> ReplayConfig:  # fmt: skip
    """The alternate-mode replay of one batch (cool-down: ``sweep.plan``)."""
    closed = cfg.kind == "concurrency"
    return ReplayConfig(
        traces=cfg.traces,
        format=cfg.format,
        skip_bad=cfg.skip_bad,
        baseline=targets.baseline,
        candidate=targets.candidate,
        api_key=cfg.api_key,
        mode="alternate",
        block_size=block,
        concurrency=int(level) if closed else None,
        rate=None if closed else level,
        arrival=cfg.arrival,
        skip=skip,
        limit=limit,
        warmup=cfg.warmup,
        cooldown=cooldown_for(cfg.kind, level),
        seed=seed,
        route=cfg.route,
        model=cfg.model,
        output_len=cfg.output_len,
        temperature=cfg.temperature,
        ignore_eos=cfg.ignore_eos,
        max_context=cfg.max_context,
        drain_s=cfg.drain_s,
        run_dir=str(run_dir),
        label=run_dir.name,
        snapshots=cfg.snapshots,
        declare=cfg.declare,
        baseline_launch=cfg.baseline_launch,
        candidate_launch=cfg.candidate_launch,
        launch_from_process=cfg.launch_from_process,
    )


def _synthetic_prompts(experiment: Mapping[str, Any] | None) -> bool | None:
    """Whether the level's replays synthesised prompts (its workload's count); None if unknown."""
    workload = (experiment or {}).get("workload")
    count = workload.get("synthetic_prompts") if isinstance(workload, Mapping) else None
    return count > 0 if isinstance(count, int) and not isinstance(count, bool) else None


def evaluate_level(run: LevelRun, kind: str, slo: tuple[float | None, float | None] | None) -> None:
    """Rebuild the level's report from its finished batches; write ``report.*`` beside them."""
    runs = [load_run_dir(p) for p in run.batches]
    report = build_report(runs)
    cols = concat([r.columns for r in runs])
    run.figures = level_figures(
        report, cols, level=run.level, kind=kind, run_dir=str(run.folder), slo=slo
    )
    candidate = next(a for a in report.acceptance if a.side is Role.CANDIDATE)
    run.acceptance = acceptance_metrics(
        candidate, synthetic_prompts=_synthetic_prompts(run.first_experiment)
    )
    run.sample = level_sample(cols, report, run.level, kind)
    for fmt in FORMATS:
        (run.folder / FILE_NAMES[fmt]).write_text(render(report, fmt), encoding="utf-8")


async def _one_batch(
    cfg: SweepConfig, targets: Targets, run: LevelRun, stop: asyncio.Event,
    progress: TextIO | None, *, cursor: TraceCursor | None = None,
) -> None:  # fmt: skip
    block = block_for(cfg.kind, run.level, cfg.block_size)
    limit = batch_size(block)
    skip = 0
    if cursor is not None:
        taken = cursor.take(limit)
        if taken is None:
            run.state = run.state.stopped(TRACE_USED)
            return
        skip, limit = taken
    folder = run.folder / f"batch-{run.state.batches + len(run.aborted_batches) + 1:02d}"
    seed = cfg.seed + 1000 * (run.state.batches + len(run.aborted_batches))
    rc = replay_config(
        cfg, targets, run.level, limit=limit, block=block, run_dir=folder, seed=seed, skip=skip
    )
    outcome = await run_replay(rc, stop=stop, progress=progress)
    experiment = read_experiment(folder)
    if outcome.status != "completed":
        run.aborted_batches.append(folder)
        run.state = run.state.stopped("stopped before the batch finished")
        return
    run.batches.append(folder)
    run.experiment_ids.append(str(experiment.get("experiment_id", "")))
    run.first_experiment = run.first_experiment or experiment
    evaluate_level(run, cfg.kind, _slo(cfg))
    assert run.figures is not None
    fig = run.figures
    run.state = run.state.after_batch(fig.pairs, fig.verdict, cfg.pairs, fig.units, fig.clean_units)


def _batch_line(run: LevelRun) -> str:
    """One line for the operator after a batch: the level, its pairs, verdict and E2E ratio."""
    fig = run.figures
    if fig is None or not run.batches or run.aborted_batches:
        return f"{run.folder.name}: batch stopped early ({run.state.closed})"
    e2e = "-" if fig.e2e_ratio is None else f"{fig.e2e_ratio:.3f}"
    closed = f"; level closed: {run.state.closed}" if run.state.closed else ""
    return (
        f"{run.folder.name}: batch {run.state.batches} done, {fig.pairs} pairs,"
        f" verdict {fig.verdict}, E2E ratio {e2e}{closed}"
    )


def _slo(cfg: SweepConfig) -> tuple[float | None, float | None] | None:
    slo = cfg.slo_bounds
    if slo is None or (slo.ttft_ms is None and slo.tpot_ms is None):
        return None  # percentile bounds alone: the capacity, no goodput
    return (slo.ttft_ms, slo.tpot_ms)


async def run_ladder(
    cfg: SweepConfig,
    targets: Targets,
    root: Path,
    *,
    stop: asyncio.Event,
    on_batch: Callable[[list[LevelRun]], None] | None = None,
    progress: TextIO | None = None,
    notify: Callable[[str], None] | None = None,
    cursor: TraceCursor | None = None,
) -> list[LevelRun]:
    """Run every level of ``cfg``'s ladder against ``targets`` (see the module docstring).

    ``on_batch`` sees every level's progress after each batch (to keep sweep.json current);
    ``notify`` gets one line per batch (after sweep.json has been written).
    Returns the levels in ascending order; with ``stop`` set, open levels are closed as
    ``stopped``. With ``fresh_prompts`` one cursor runs through the trace over the whole
    ladder; a setting sweep passes its own ``cursor`` so that it carries on across values
    (the kept baseline never sees a prompt twice).
    """
    runs = {lv: LevelRun(lv, level_folder(root, cfg.kind, lv), LevelState(lv)) for lv in cfg.levels}
    cursor = cursor if cursor is not None else trace_cursor(cfg)
    ordered = [runs[lv] for lv in sorted(runs)]
    round_index = 0
    while not stop.is_set() and any(r.state.closed is None for r in ordered):
        for level in round_order(list(runs), round_index):
            run = runs[level]
            if run.state.closed is not None or stop.is_set():
                continue
            await _one_batch(cfg, targets, run, stop, progress, cursor=cursor)
            if on_batch is not None:
                on_batch(ordered)
            if notify is not None:
                notify(_batch_line(run))
        round_index += 1
    for run in ordered:
        run.state = run.state.stopped("sweep stopped")
    return ordered
