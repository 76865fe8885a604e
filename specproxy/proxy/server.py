"""Starting and stopping the proxy: ``run_proxy`` (until SIGTERM/SIGINT) and ``serve_proxy_in_background``.

Shutdown order (uvicorn's shape): stop listening; let in-flight client requests finish
for up to ``drain_s`` (aiohttp's ``shutdown_timeout``), then cancel them (each still
records ``client_cancelled``); drain shadow copies for the rest of ``drain_s``; take
"after" snapshots; flush histograms and close records; write ``experiment.json`` with
status ``completed``. Records are appended and flushed as requests complete, so a
proxy killed without any of this still leaves every completed record readable.

Client disconnects cancel the handler (``handler_cancellation``), which is what makes
the primary's upstream request stop at once even while no bytes are flowing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from aiohttp import web

from specproxy.errors import ConfigError
from specproxy.log import get_logger
from specproxy.proxy.app import build_app
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.state import ProxyState
from specproxy.recording.rundir import new_experiment_id, new_run_dir
from specproxy.runtime import install_stop_signals


@contextlib.asynccontextmanager
async def _running(config: ProxyConfig) -> AsyncIterator[tuple[str, Path]]:
    """The proxy listening; yields (base URL, run directory); shuts down on exit."""
    experiment_id = new_experiment_id()
    run_dir = new_run_dir(config.run_dir, config.label, experiment_id=experiment_id)
    state = ProxyState(config=config, experiment_id=experiment_id, run_dir=run_dir)
    runner = web.AppRunner(
        build_app(state),
        handler_cancellation=True,
        shutdown_timeout=config.drain_s,
        access_log=None,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, config.host, config.port)
        try:
            await site.start()
        except OSError as exc:  # busy port, address not ours: the run never served
            why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            reason = f"cannot listen on {config.host}:{config.port}: {why}"
            if state.experiment is not None:
                state.experiment.finish("aborted", error=reason)
            raise ConfigError(f"{reason} (run directory {run_dir} marked aborted)") from exc
        host, port = runner.addresses[0][:2]
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}"
        get_logger(experiment_id=experiment_id).info(
            "proxy_started", url=url, mode=str(config.mode), run_dir=str(run_dir)
        )
        yield url, run_dir
    finally:
        await runner.cleanup()
        get_logger(experiment_id=experiment_id).info("proxy_stopped", run_dir=str(run_dir))


async def run_proxy(
    config: ProxyConfig,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str, Path], None] | None = None,
) -> Path:
    """Serve until ``stop`` is set or SIGTERM/SIGINT arrives; returns the run directory."""
    stop = stop or asyncio.Event()
    remove_signals = install_stop_signals(stop)
    try:
        async with _running(config) as (url, run_dir):
            if on_ready is not None:
                on_ready(url, run_dir)
            await stop.wait()
    finally:
        remove_signals()
    return run_dir


@contextlib.asynccontextmanager
async def serve_proxy_in_background(config: ProxyConfig) -> AsyncIterator[str]:
    """The proxy on ``config.host``/``config.port`` (0 for any free port); yields its base URL."""
    async with _running(config) as (url, _run_dir):
        yield url
