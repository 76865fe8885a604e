"""The proxy's lifecycles, as async context managers (entered in order, left in reverse; ``proxy.server``).

1. ``upstreams``: one started ``HttpBackend`` per configured server, the one session
   for everything sent to it (requests, and the reads: launch configs, snapshots, health,
   GET passthrough), each server's launch
   configuration (when reachable; an unreachable server is logged and left unknown)
   and what may be injected into its streams (``core.protocol.shaping``).
2. ``recording``: the Recorder and ``experiment.json`` (``running`` with both launch
   configs at start; ``completed`` with per-side counts at the end), before/after
   server snapshots in ``snapshots/``, and histogram logs rewritten every 5 s and at
   the end. In a worker of ``serve --workers N`` only the Recorder: the run's own files
   are its parent's (``proxy.workers``, through ``open_backends``, ``learn_launch``,
   ``begin_run``, ``run_summary`` and ``end_run``).
3. ``relaying``: the shadow supervisor and the relay. At shutdown ``mark_shutdown``
   drains the client handlers for up to ``drain_s`` and cuts the rest (``aborted``);
   teardown then drains shadow copies for what is left of ``drain_s`` (counted from
   ``mark_shutdown``) and cancels the rest, each cancellation still producing its record.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from specproxy.backends.base import BackendKind, BackendSpec
from specproxy.backends.http import HttpBackend, open_backend
from specproxy.backends.sglang import fetch_launch_config, fetch_snapshot
from specproxy.core.compare.acceptance import acceptance_metrics
from specproxy.core.launch.config import LaunchConfig, parse_declarations
from specproxy.core.load.sides import SidePolicy
from specproxy.core.protocol.shaping import NO_INJECTION, Injection
from specproxy.core.protocol.versions import supports_spec_details
from specproxy.core.records.model import Measurement, Role
from specproxy.core.records.runfiles import trace_name
from specproxy.errors import BackendError, SpecproxyError
from specproxy.log import get_logger
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.records import ProxyRecords
from specproxy.proxy.relay import ProxiedRequest, Relay, ShadowSupervisor
from specproxy.proxy.state import ProxyState
from specproxy.proxy.trace_recording import TraceRecorder
from specproxy.recording.experiment import (
    ExperimentStatus,
    ExperimentWriter,
    write_json_atomic,
)
from specproxy.recording.local_process import supplied_launch
from specproxy.recording.recorder import Recorder, RunFigures
from specproxy.runtime import spawn

_US = 1_000_000
HISTOGRAM_FLUSH_S = (
    5.0  # a kill -9 loses at most this much of the histogram logs (records: nothing)
)


def injection_for(kind: BackendKind, launch: LaunchConfig | None) -> Injection:
    """What the proxy may add to streams sent to a server (see ``core.protocol.shaping``)."""
    if kind is not BackendKind.SGLANG or launch is None:
        return NO_INJECTION
    usage_by_default = bool(launch.server_args.get("stream_response_default_include_usage"))
    return Injection(spec_details=supports_spec_details(launch.version), usage=not usage_by_default)


async def _fetch_launch(state: ProxyState, role: Role) -> LaunchConfig | None:
    cfg = state.config
    if role not in state.backends or cfg.kind is not BackendKind.SGLANG:
        return None
    try:
        found = await fetch_launch_config(
            state.backends[role],
            timeout_s=cfg.health_timeout_s,
            declared=parse_declarations(cfg.declare) or None,
        )
        return supplied_launch(
            found, cfg.url(role), cfg.launch_command(role), cfg.launch_from_process
        )
    except SpecproxyError as exc:
        get_logger().warning("launch_config_unavailable", side=str(role), reason=str(exc))
        return None


@contextlib.asynccontextmanager
async def open_backends(state: ProxyState) -> AsyncIterator[None]:
    """One started ``HttpBackend`` per configured server in ``state.backends``; closed on exit."""
    cfg = state.config
    for role in cfg.sides:
        url = cfg.url(role)
        assert url is not None  # sides lists only configured roles
        spec = BackendSpec(
            url,
            role,
            cfg.kind,
            api_key=cfg.upstream_key(role),
            timeouts=cfg.timeouts(),
            max_connections=cfg.max_connections,
        )
        state.backends[role] = HttpBackend(spec)
    try:
        for backend in state.backends.values():
            await backend.start()
        yield
    finally:
        for backend in state.backends.values():
            await backend.close()


async def unreachable_upstreams(cfg: ProxyConfig) -> list[str]:
    """One sentence per configured server that could not be reached (any HTTP answer to
    ``GET /health`` counts as reached), for ``serve`` to refuse to start (exit status 3)."""
    found: list[str] = []
    for role in cfg.sides:
        url = cfg.url(role)
        assert url is not None  # sides lists only configured roles
        spec = BackendSpec(url, role, cfg.kind, cfg.upstream_key(role), cfg.timeouts())
        try:
            async with open_backend(spec) as backend:
                await backend.get("/health", timeout_s=cfg.health_timeout_s)
        except BackendError as exc:
            found.append(f"the {role} server could not be reached ({exc})")
    return found


async def learn_launch(state: ProxyState) -> None:
    """Each server's launch configuration and what may be injected into its streams."""
    cfg = state.config
    found = await asyncio.gather(*(_fetch_launch(state, r) for r in cfg.sides))
    for role, launch in zip(cfg.sides, found, strict=True):
        state.launch[role] = launch
        state.injection[role] = injection_for(cfg.kind, launch)


@contextlib.asynccontextmanager
async def upstreams(state: ProxyState) -> AsyncIterator[None]:
    """Backends and launch configurations (lifecycle 1)."""
    async with open_backends(state):
        await learn_launch(state)
        yield


async def _snapshot(state: ProxyState, when: str) -> None:
    cfg = state.config
    if cfg.kind is not BackendKind.SGLANG:
        return
    folder = state.run_dir / "snapshots"
    folder.mkdir(exist_ok=True)
    for role in cfg.sides:
        try:
            snap = await fetch_snapshot(state.backends[role], timeout_s=cfg.health_timeout_s)
        except SpecproxyError as exc:
            get_logger().warning("snapshot_failed", side=str(role), when=when, reason=str(exc))
            continue
        write_json_atomic(folder / f"{role}-{when}.json", snap)


async def _flush_histograms(recorder: Recorder) -> None:
    """Rewrite the histogram logs every ``HISTOGRAM_FLUSH_S``, so a killed proxy leaves recent ones."""
    while True:
        await asyncio.sleep(HISTOGRAM_FLUSH_S)
        try:
            recorder.flush_histograms()
        except OSError as exc:
            get_logger().warning("histogram_flush_failed", reason=str(exc))


def _workload(state: ProxyState) -> dict[str, Any]:
    cfg = state.config
    return {
        "source": "proxy",
        "mode": str(cfg.mode),
        "primary": str(cfg.primary),
        "split": cfg.split,
        "sticky": cfg.sticky_header or ("user" if cfg.sticky_user else None),
        "urls": {str(r): cfg.url(r) for r in cfg.sides},
    }


async def begin_run(state: ProxyState) -> None:
    """The run's own start: "before" snapshots and ``experiment.json`` (``running``)."""
    state.experiment = ExperimentWriter(state.run_dir, state.experiment_id)
    await _snapshot(state, "before")
    state.experiment.start(
        mode=state.config.mode,
        workload=_workload(state),
        sampling={"source": "clients"},
        baseline=state.launch.get(Role.BASELINE),
        candidate=state.launch.get(Role.CANDIDATE),
        simulated=False,
    )


async def end_run(
    state: ProxyState, summary: dict[str, Any] | None, error: str | None = None
) -> None:
    """The run's own end, once every record is written: "after" snapshots, then
    ``experiment.json`` ``completed`` (``aborted`` with ``error``) with ``summary``."""
    await _snapshot(state, "after")
    experiment = state.experiment
    if experiment is not None and experiment.status is ExperimentStatus.RUNNING:
        experiment.finish(
            "completed" if error is None else "aborted",
            summary=summary,
            sampling=state.sampling.to_dict(),
            error=error,
        )


def run_summary(figures: RunFigures) -> dict[str, Any]:
    """``experiment.json``'s summary: each side's figures and the candidate's acceptance."""
    summary: dict[str, Any] = {str(r): figures.figures(r) for r in Role}
    candidate = figures.acceptance(Role.CANDIDATE)
    summary["acceptance_metrics"] = acceptance_metrics(candidate, synthetic_prompts=None)
    return summary


@contextlib.asynccontextmanager
async def recording(state: ProxyState) -> AsyncIterator[None]:
    """Recorder, snapshots and experiment.json (lifecycle 2); a worker of ``--workers N``
    keeps only its Recorder (its shard's files), its parent writes the rest."""
    state.recorder = Recorder(
        state.run_dir,
        experiment_id=state.experiment_id,
        rotate_bytes=state.config.rotate_bytes,
        rotate_s=state.config.rotate_s,
        shard=None if state.worker is None else state.worker.shard,
    )
    flusher: asyncio.Task[None] | None = None
    try:
        if state.run_level:
            await begin_run(state)
        flusher = spawn(_flush_histograms(state.recorder), name="histogram-flush")
        yield
    finally:
        if flusher is not None:
            flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flusher
        experiment = state.experiment  # None in a worker: its parent sums every shard up
        if experiment is not None:
            await _snapshot(state, "after")
            summary = run_summary(state.recorder.figures_so_far)
        state.recorder.close()
        if experiment is not None and experiment.status is ExperimentStatus.RUNNING:
            experiment.finish("completed", summary=summary, sampling=state.sampling.to_dict())


def _trace_hook(state: ProxyState) -> Callable[[ProxiedRequest, Measurement], None] | None:
    """``--record``: the relay's primary-done callback feeding ``RUN_DIR/trace.jsonl`` (a
    worker's: its shard, ``core.records.runfiles.trace_name``)."""
    if not state.config.record:
        return None
    shard = state.worker.shard if state.worker is not None else None
    path = state.run_dir / trace_name(shard)
    trace = TraceRecorder(path, keep_text=state.config.record_text)
    state.trace = trace

    def observe(proxied: ProxiedRequest, m: Measurement) -> None:
        pair_id = proxied.request_id if proxied.decision.shadow is not None else None
        trace.observe(
            proxied.upstream.route,
            proxied.upstream.stream,
            proxied.arrived_us,
            proxied.client_body,
            m,
            pair_id=pair_id,
        )

    return observe


@contextlib.asynccontextmanager
async def relaying(state: ProxyState) -> AsyncIterator[None]:
    """Shadow supervisor and relay (lifecycle 3); drains shadows at teardown."""
    cfg = state.config
    assert state.recorder is not None
    state.policy = SidePolicy(cfg.mode, cfg.primary, cfg.split, seed=cfg.seed)
    state.shadows = ShadowSupervisor(cfg.max_shadow_in_flight)
    records = ProxyRecords(
        backends=state.backends,
        recorder=state.recorder,
        metrics=state.metrics,
        clock=state.clock,
        experiment_id=state.experiment_id,
        mode=cfg.mode,
        fingerprints={r: state.fingerprint(r) for r in Role},
        shadow_deadline_s=cfg.shadow_deadline_s,
        keep_text=cfg.record_text,
        on_primary_done=_trace_hook(state),
    )
    state.relay = Relay(
        backends=state.backends,
        records=records,
        shadows=state.shadows,
    )
    yield
    started = state.shutdown_started_us or state.clock.now_us()
    left_s = cfg.drain_s - (state.clock.now_us() - started) / _US
    cancelled = await state.shadows.drain(left_s)
    state.relay.records.flush()  # records still waiting to be written (``RecordSteps``)
    if cancelled:
        get_logger().warning("shadows_cancelled_at_shutdown", count=cancelled)
    if state.trace is not None:
        state.trace.close()
        get_logger().info(
            "trace_recorded",
            path=str(state.trace.path),
            written=state.trace.written,
            skipped=state.trace.skipped,
        )


async def mark_shutdown(state: ProxyState) -> None:
    """Drain the client requests in flight for up to ``drain_s``, then cut them.

    The listener is already closed. Shadow copies keep running meanwhile and get what is
    left of ``drain_s`` in ``relaying``'s teardown, so the whole drain fits in ``drain_s``.
    """
    state.shutdown_started_us = state.clock.now_us()
    if state.relay is None:
        return
    cut = await state.relay.drain(state.config.drain_s)
    if cut:
        get_logger().warning("requests_cut_at_shutdown", count=cut, drain_s=state.config.drain_s)
