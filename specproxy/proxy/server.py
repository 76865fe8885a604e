"""Starting and stopping the proxy: ``run_proxy`` (until SIGTERM/SIGINT) and ``serve_proxy_in_background``.

Shutdown order (uvicorn's shape): stop listening; let in-flight client requests finish
for up to ``drain_s`` (``lifecycle.mark_shutdown``), then cut them (each records
``aborted``); drain shadow copies for the rest of ``drain_s``; take "after" snapshots
(at most ``health_timeout_s`` per server); flush histograms and close records; write
``experiment.json`` with status ``completed``. So SIGTERM to exit takes at most
``drain_s`` + ``CUT_GRACE_S`` + the flush (the snapshots, a few file writes): a
supervisor's grace period must exceed ``drain_s`` + 2 x ``health_timeout_s`` + a few
seconds (see ``deploy/k8s/specproxy-proxy.yaml``). Records are appended and flushed as requests complete, so a
proxy killed without any of this still leaves every completed record readable.

The server is ``proxy.lean_site``'s listener and ``proxy.lean``'s connections, which
serve every request; the proxy's parts are made and ended by ``proxy.lifecycle``'s
contexts, entered in order before it listens and left in reverse after the drain.
Requests it cannot parse are answered with an OpenAI-shaped 400 that names only the
class of problem and echoes nothing of the request.

A client that disconnects cancels its request's task, which is what makes the primary's
upstream request stop at once even while no bytes are flowing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from specproxy.errors import ConfigError
from specproxy.log import get_logger
from specproxy.proxy import lifecycle
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.lean_site import LeanSite
from specproxy.proxy.metrics import ProxyMetrics
from specproxy.proxy.state import ProxyState, WorkerSpec
from specproxy.recording.rundir import new_experiment_id, new_run_dir
from specproxy.runtime import MonotonicClock, install_stop_signals, steady_state


def _new_state(config: ProxyConfig, worker: WorkerSpec | None) -> ProxyState:
    """A fresh run's state, or a ``serve --workers N`` worker's in its parent's run."""
    if worker is None:
        experiment_id = new_experiment_id()
        run_dir = new_run_dir(config.run_dir, config.label, experiment_id=experiment_id)
        return ProxyState(config=config, experiment_id=experiment_id, run_dir=run_dir)
    return ProxyState(
        config=config,
        experiment_id=worker.experiment_id,
        run_dir=worker.run_dir,
        metrics=ProxyMetrics(multiprocess_dir=worker.metrics_dir),
        worker=worker,
        clock=MonotonicClock(worker.origin_ns),
    )


@contextlib.asynccontextmanager
async def _running(
    config: ProxyConfig, worker: WorkerSpec | None = None
) -> AsyncIterator[tuple[str, ProxyState]]:
    """The proxy listening; yields (base URL, its state); shuts down on exit. A worker of
    ``serve --workers N`` binds with ``SO_REUSEPORT`` beside its siblings, in the run
    directory its parent made."""
    state = _new_state(config, worker)
    experiment_id, run_dir = state.experiment_id, state.run_dir
    log = get_logger(experiment_id=experiment_id)
    if worker is not None:
        log = log.bind(worker=worker.index)
    stack = contextlib.AsyncExitStack()
    site = LeanSite(state, host=config.host, port=config.port, reuse_port=worker is not None)
    try:
        for context in (lifecycle.upstreams, lifecycle.recording, lifecycle.relaying):
            await stack.enter_async_context(context(state))
        try:
            await site.start()
        except OSError as exc:  # busy port, address not ours: the run never served
            why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            reason = f"cannot listen on {config.host}:{config.port}: {why}"
            if state.experiment is not None:
                state.experiment.finish("aborted", error=reason)
                raise ConfigError(f"{reason} (run directory {run_dir} marked aborted)") from exc
            raise ConfigError(reason) from exc
        host, port = site.address
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}"
        log.info("proxy_started", url=url, mode=str(config.mode), run_dir=str(run_dir))
        yield url, state
    finally:
        await site.stop()
        await lifecycle.mark_shutdown(state)
        await site.close()
        await stack.aclose()  # the contexts in reverse, each to its end
        log.info("proxy_stopped", run_dir=str(run_dir))


async def run_proxy(
    config: ProxyConfig,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str, Path], None] | None = None,
    worker: WorkerSpec | None = None,
    on_stopped: Callable[[ProxyState], None] | None = None,
) -> Path:
    """Serve until ``stop`` is set or SIGTERM/SIGINT arrives; returns the run directory.

    ``worker``: serve as that worker of ``serve --workers N`` (``proxy.workers``);
    ``on_stopped`` is called with the final state once everything is drained and closed."""
    stop = stop or asyncio.Event()
    remove_signals = install_stop_signals(stop)
    try:
        async with _running(config, worker) as (url, state):
            if on_ready is not None:
                on_ready(url, state.run_dir)
            with steady_state():
                await stop.wait()
    finally:
        remove_signals()
    if on_stopped is not None:
        on_stopped(state)
    return state.run_dir


@contextlib.asynccontextmanager
async def serve_proxy_in_background(config: ProxyConfig) -> AsyncIterator[str]:
    """The proxy on ``config.host``/``config.port`` (0 for any free port); yields its base URL."""
    async with _running(config) as (url, _state):
        yield url
