"""``run_replay``: one replay run, from options to a finished run directory.

Phases: prepare the workload (``replay.prepare``); create the run directory; write
experiment.json (``running``) with both launch configurations; save each side's server
snapshot before the window (``snapshots/<side>-before.json``); send every window through
the ``Driver`` into the ``Recorder``; save the snapshots after; write the summary and
finish experiment.json — ``completed``, or ``aborted`` when stopped early (Ctrl-C) or
when an error escaped, with every record written so far kept.

Owns the backends' lifecycle (started and closed here) and ``snapshots/``. The run directory's ``specproxy.log`` gets the replay's phase events.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson

from specproxy.backends.base import Backend, BackendSpec
from specproxy.backends.http import HttpBackend
from specproxy.core.compare.acceptance import acceptance_metrics
from specproxy.core.launch.config import LaunchConfig, parse_declarations
from specproxy.core.records.model import ErrorKind, RequestRecord, Role
from specproxy.core.records.tally import excluded_name
from specproxy.log import file_logger
from specproxy.recording.experiment import ExperimentWriter
from specproxy.recording.local_process import supplied_launch
from specproxy.recording.recorder import Recorder
from specproxy.recording.rundir import new_experiment_id, new_run_dir
from specproxy.replay import servers
from specproxy.replay.config import ReplayConfig
from specproxy.replay.driver import PREBUILD, Driver, RunContext
from specproxy.replay.prepare import (
    Prepared,
    make_backends,
    prepare,
    request_options,
    workload_info,
)
from specproxy.replay.progress import Progress, planned_sends, schedule_notice, schedule_times
from specproxy.replay.requests import RequestOptions, RequestSource
from specproxy.replay.saturation import QUEUE_SAMPLE_S, SaturationTally
from specproxy.replay.scoring import SCORING_FILE, ScoringCollector, score_pairs, strip_text
from specproxy.replay.summary import Tally, lag_verdict, render_summary, side_figures
from specproxy.replay.synth import PromptSynthesizer
from specproxy.runtime import MonotonicClock, spawn, steady_state


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    """What a finished run left: its directory, status, summary (as stored) and summary text."""

    run_dir: Path
    status: str
    summary: dict[str, Any]
    text: str

    @property
    def unreachable(self) -> int:
        """Requests that failed because a server (or, with ``--via``, the proxy) could not be reached."""
        return sum(self.summary.get("unreachable", {}).values())

    @property
    def failed_sides(self) -> dict[str, dict[str, int]]:
        """Sides to which requests were sent and every one failed (warm-up included):
        side -> failures by error class. Such a run has nothing to compare."""
        found: dict[str, dict[str, int]] = {}
        for side, s in self.summary.get("sides", {}).items():
            warm_ok = s.get("warmup_excluded", 0) - s.get("warmup_failed", 0)
            if s.get("sent", 0) > 0 and s.get("completed", 0) == 0 and warm_ok == 0:
                found[side] = dict(s.get("failed_by_kind", {}))
        return found

    @property
    def footer(self) -> str:
        """The replay's own lines (notes, send lag) to print under the full report."""
        return render_summary(self.summary, brief=True)


async def run_replay(
    cfg: ReplayConfig,
    *,
    stop: asyncio.Event | None = None,
    progress: TextIO | None = None,
    observer: Callable[[RequestRecord], None] | None = None,
) -> ReplayOutcome:
    """Run one replay (see the module docstring). Setting ``stop`` ends it early (aborted).

    ``observer`` sees every record right after it is written (e.g. to embed the replay).
    """
    backends = make_backends(cfg)
    try:
        for backend in backends.values():
            await backend.start()
        prep = await prepare(cfg, backends)
        notice = schedule_notice(prep.windows)
        # the schedule's length on a terminal (beside the progress line); a warning always
        if progress is not None and notice is not None and (notice[1] or progress.isatty()):
            progress.write(notice[0] + "\n")
            progress.flush()
        run = _Run(
            cfg, prep, backends, stop or asyncio.Event(), progress=progress, observer=observer
        )
        return await run.execute()
    finally:
        for backend in backends.values():
            await backend.close()


class _Run:
    """One run's state between preparation and the finished run directory."""

    tally: Tally  # set in execute(), next to the Recorder it reads

    def __init__(
        self,
        cfg: ReplayConfig,
        prep: Prepared,
        backends: Mapping[Role, Backend],
        stop: asyncio.Event,
        *,
        progress: TextIO | None,
        observer: Callable[[RequestRecord], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.prep = prep
        self.backends = backends
        self.stop = stop
        self.progress = progress
        self.observer = observer
        self.clock = MonotonicClock()
        self.experiment_id = new_experiment_id()
        base = Path(cfg.run_dir) if cfg.run_dir else None
        self.run_dir = new_run_dir(base, cfg.label or "replay", experiment_id=self.experiment_id)
        self.info = self._info_backends()
        self.unreachable: dict[str, int] = {}  # per side: requests that found no server
        self.saturation = SaturationTally()
        self._active: tuple[Role, ...] = ()  # the sides of the window being sent
        wanted = cfg.score_requests > 0 and cfg.send_mode.value in ("mirror", "alternate")
        self.scoring = ScoringCollector(cfg.score_requests) if wanted else None

    def _info_backends(self) -> dict[Role, Backend]:
        """Servers to read launch configs and snapshots from: the run's own backends, or
        with ``via`` the servers given directly (their own backends, opened by ``execute``)."""
        if self.cfg.via is None:
            return dict(self.backends)
        return {
            role: HttpBackend(BackendSpec(url, role, api_key=self.cfg.api_key))
            for role in Role
            if (url := self.cfg.url_of(role)) is not None
        }

    async def execute(self) -> ReplayOutcome:
        """Read the servers, drive the schedule, write the run directory."""
        own = [b for role, b in self.info.items() if self.backends.get(role) is not b]
        try:
            for backend in own:
                await backend.start()
            return await self._execute()
        finally:
            for backend in own:
                await backend.close()

    async def _execute(self) -> ReplayOutcome:
        declared = parse_declarations(self.cfg.declare)
        configs = {
            role: supplied_launch(
                await servers.launch_config(backend, declared),
                self.cfg.url_of(role),
                self.cfg.launch_command(role),
                self.cfg.launch_from_process,
            )
            for role, backend in self.info.items()
        }
        options = request_options(self.cfg, self.prep.model, configs)
        writer = ExperimentWriter(self.run_dir, self.experiment_id)
        writer.start(
            mode=self.cfg.send_mode,
            workload=workload_info(self.cfg, self.prep),
            sampling=options.sampling(),
            baseline=configs.get(Role.BASELINE),
            candidate=configs.get(Role.CANDIDATE),
            simulated=any(c is not None and c.simulated for c in configs.values()),
        )
        recorder = Recorder(self.run_dir, experiment_id=self.experiment_id)
        self.tally = Tally(recorder)
        with (self.run_dir / "specproxy.log").open("a", encoding="utf-8") as log_file:
            log = file_logger(log_file, experiment_id=self.experiment_id, component="replay")
            status, error = "aborted", None
            try:
                await self._snapshots("before", log)
                await self._drive(recorder, configs, options)
                status = "aborted" if self.stop.is_set() else "completed"
                await self._snapshots("after", log)
                await self._score(log)
            except BaseException as exc:
                error = f"{type(exc).__name__}: {exc}"
                raise
            finally:
                recorder.close()
                summary = self._summary(status)
                writer.finish(status, summary=summary, error=error)
                log.info("replay_finished", status=status, load_met=summary["load_met"])
        return ReplayOutcome(self.run_dir, status, summary, render_summary(summary))

    async def _score(self, log: Any) -> None:
        """The scoring requests (``replay.scoring``), after the timed blocks and the closing
        snapshots, straight to the baseline server; not request records."""
        reader = self.info.get(Role.BASELINE)
        if self.scoring is None or reader is None or self.stop.is_set():
            return
        counts = await score_pairs(reader, self.scoring.complete, self.scoring.limit, self.run_dir)
        counts["outputs_beyond_limit"] = self.scoring.beyond_limit
        path = self.run_dir / SCORING_FILE
        path.write_bytes(orjson.dumps(counts, option=orjson.OPT_INDENT_2))
        log.info("scoring_finished", **{k: v for k, v in counts.items() if k != "skipped"})

    async def _snapshots(self, when: str, log: Any) -> None:
        if not self.cfg.snapshots:
            return
        folder = self.run_dir / "snapshots"
        folder.mkdir(exist_ok=True)
        for role, backend in self.info.items():
            snap = await servers.snapshot(backend)
            if snap is None:
                log.warning("snapshot_failed", side=role.value, when=when)
                continue
            data = orjson.dumps(snap, option=orjson.OPT_INDENT_2)
            (folder / f"{role.value}-{when}.json").write_bytes(data)

    def _driver(
        self,
        recorder: Recorder,
        configs: dict[Role, LaunchConfig | None],
        options: RequestOptions,
    ) -> Driver:
        cfg = self.cfg
        vocab = self.prep.vocabulary
        source = RequestSource(
            self.prep.records,
            options,
            synthesizer=PromptSynthesizer(vocab) if vocab else None,
            output_tokens=self.prep.output_tokens,
            capacity=max(2 * PREBUILD, 2 * cfg.block_size),
        )

        def on_record(record: RequestRecord) -> None:
            if could_not_reach(record):
                side = record.side.value
                self.unreachable[side] = self.unreachable.get(side, 0) + 1
            record = strip_text(record)
            recorder.write(record)
            self.saturation.observe(record)
            if self.observer is not None:
                self.observer(record)

        context = RunContext(
            self.experiment_id,
            cfg.send_mode,
            {role: (c.fingerprint if c else None) for role, c in configs.items()},
            {"via": cfg.via} if cfg.via else {},
            via=cfg.via is not None,
        )
        return Driver(
            clock=self.clock,
            backends=dict(self.backends),
            source=source,
            context=context,
            on_record=on_record,
            on_sent=self.tally.on_sent,
            concurrency=cfg.concurrency,
            drain_s=cfg.drain_s,
            on_output=self.scoring.observe if self.scoring is not None else None,
        )

    async def _drive(
        self,
        recorder: Recorder,
        configs: dict[Role, LaunchConfig | None],
        options: RequestOptions,
    ) -> None:
        driver = self._driver(recorder, configs, options)
        watcher = spawn(_watch(self.stop, driver), name="replay-stop-watcher")
        queues = self._watch_queues()
        # Everything prepared so far lives for the whole run: out of the collector's
        # reach, so full collections during sending stay short (``runtime.steady_state``).
        try:
            with steady_state():
                windows = self.prep.windows
                planned = planned_sends(windows)
                schedule = schedule_times(windows)
                async with Progress(self.tally, self.clock, self.progress, planned, schedule):
                    await self._send_windows(driver)
        finally:
            for task in (watcher, queues):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task

    def _watch_queues(self) -> asyncio.Task[None] | None:
        """The queue-gauge poller (``replay.saturation``), unless --no-snapshots."""
        if not self.cfg.snapshots or not self.info:
            return None
        watch = servers.watch_queues(
            self.info,
            lambda: self._active,
            self.saturation.queue_sample,
            QUEUE_SAMPLE_S,
        )
        return spawn(watch, name="replay-queue-watcher")

    async def _send_windows(self, driver: Driver) -> None:
        """Every window in order. ``--duration`` in closed loop: one window is cut at the
        deadline; alternate blocks are not started once it has passed (pairs stay whole)."""
        duration = self.cfg.duration_s
        deadline_us = round(duration * 1e6) if duration else None
        closed = self.prep.offsets_us is None
        single = len(self.prep.windows) == 1
        per_window = deadline_us if closed and single else None
        start = self.clock.now_us()
        for i, window in enumerate(self.prep.windows):
            if driver.stopped:
                break
            over = deadline_us is not None and self.clock.now_us() - start >= deadline_us
            if over and closed and i % 2 == 0:
                break
            self._active = window.sides
            self.saturation.begin_window(window.sides)
            result = await driver.run_window(window, duration_us=per_window)
            self._active = ()
            for side in window.sides:
                self.saturation.held(side, result.held_in_flight)

    def _summary(self, status: str) -> dict[str, Any]:
        sides = {
            role.value: side_figures(self.tally, role, self.cfg.max_lag_ms)
            for role in Role
            if self.tally.sides[role].sent
        }
        summary: dict[str, Any] = {
            "run_dir": str(self.run_dir),
            "excluded_as": excluded_name(self.cfg.warmup, self.cfg.cooldown),
            "status": status,
            "mode": self.cfg.send_mode.value,
            "via": self.cfg.via,
            "sides": sides,
            "send_lag": lag_verdict(self.tally, self.cfg.max_lag_ms),
            "synthetic_prompts": self.prep.synthetic,
            "skipped_bad": self.prep.traces.skipped_bad,
            "over_context_skipped": self.prep.skipped_context,
            "over_context_clamped": self.prep.clamped_context,
            "over_context_first": self.prep.over_context_first,
            "unreachable": dict(self.unreachable),
            "output_len_from_reference": workload_info(self.cfg, self.prep)[
                "output_len_from_reference"
            ],
        }
        summary["load_met"] = summary["send_lag"]["load_met"]
        closed = self.prep.offsets_us is None
        summary["saturation"] = {
            side: self.saturation.summary(
                Role(side), closed_loop=closed, concurrency=self.cfg.concurrency
            )
            for side in sides
        }
        summary["servers_saturated"] = any(s["saturated"] for s in summary["saturation"].values())
        if closed:  # no intended send times: judged by the concurrency held (replay.saturation)
            held = [s["held"] for s in summary["saturation"].values()]
            summary["load_met"] = summary["load_met"] and all(h is not False for h in held)
        candidate = self.tally.acceptance(Role.CANDIDATE)
        synthetic = self.prep.synthetic > 0
        summary["acceptance_metrics"] = acceptance_metrics(candidate, synthetic_prompts=synthetic)
        return summary


def could_not_reach(record: RequestRecord) -> bool:
    """True when ``record`` failed for want of a server: refused or dropped before any answer
    (``connect``), or, through a proxy, the proxy's own 502 saying its upstream was unreachable."""
    m = record.measurement
    if m.error_kind is ErrorKind.CONNECT:
        return True
    return m.status == 502 and "upstream_unreachable" in (m.error_message or "")


async def _watch(stop: asyncio.Event, driver: Driver) -> None:
    await stop.wait()
    driver.stop()
