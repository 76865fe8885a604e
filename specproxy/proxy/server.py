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

Requests aiohttp cannot parse (a control character or more than 8,190 bytes in a header
line, often the ``Authorization`` one) never reach a handler: aiohttp would log the
offending line with a traceback and echo it in a ``text/plain`` 400. ``_QuietRequestHandler``
answers them instead with an OpenAI-shaped error that names only the class of problem,
and logs one ``request_refused`` line through the redacting log (status and exception
type only).

The listener is ``proxy.lean_site``'s: the relayed routes are served by the lean HTTP/1.1
server (``proxy.lean``), every other request by the aiohttp application, on the same
connection.

Client disconnects cancel the handler (``handler_cancellation``), which is what makes
the primary's upstream request stop at once even while no bytes are flowing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler, RequestPayloadError, _ErrInfo
from aiohttp.web_request import BaseRequest

from specproxy.core.protocol.limits import MAX_FIELD_BYTES, MAX_HEADERS, MAX_LINE_BYTES
from specproxy.errors import ConfigError
from specproxy.log import get_logger
from specproxy.proxy.app import build_app
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.lean_site import LeanSite
from specproxy.proxy.metrics import ProxyMetrics
from specproxy.proxy.responses import error_response
from specproxy.proxy.state import ProxyState, WorkerSpec
from specproxy.recording.rundir import new_experiment_id, new_run_dir
from specproxy.runtime import MonotonicClock, install_stop_signals, steady_state

_AIOHTTP_GRACE_S = 1.0  # aiohttp's own wait, for handlers the drain has already ended

_REFUSED = {
    400: (
        "the request could not be parsed as HTTP (a malformed or oversized header line)",
        "malformed_request",
    ),
    413: ("a request line or header is too large", "header_too_large"),
    431: ("the request's headers are too large", "header_too_large"),
}


class _QuietRequestHandler(RequestHandler):
    """aiohttp's per-connection handler, with error answers that echo nothing of the request,
    and that reads nothing more once a request could not be parsed (aiohttp would feed each
    later read to its parser again, holding them, until its 400 had been written)."""

    def data_received(self, data: bytes) -> None:
        queued = len(self._messages)
        super().data_received(data)
        if len(self._messages) > queued and isinstance(self._messages[-1][0], _ErrInfo):
            self.data_received = _ignore  # type: ignore[method-assign,assignment]
            if self.transport is not None:
                self.transport.pause_reading()  # the 400 is written, then the connection closes

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        """aiohttp reads on after an answer to drop a body no handler read; one that its
        Content-Encoding does not decode fails there: a refused request, not a bug."""
        if isinstance(kwargs.get("exc_info"), RequestPayloadError):
            get_logger().warning("request_refused", status=400, reason="RequestPayloadError")
            return
        super().log_exception(*args, **kwargs)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """Answer a request aiohttp could not parse or a handler that raised, echoing nothing."""
        del message  # aiohttp's message quotes the offending bytes (an Authorization value...)
        log = get_logger()
        reason = type(exc).__name__ if exc is not None else None
        if status >= 500:
            log.error("request_handler_failed", status=status, reason=reason)
        else:
            log.warning("request_refused", status=status, reason=reason)
        if request.writer.output_size > 0:
            raise ConnectionError("the response had begun; it cannot become an error response")
        text, code = _REFUSED.get(
            status, ("the proxy failed to handle the request", "internal_error")
        )
        kind = "invalid_request_error" if status < 500 else "internal_error"
        resp = error_response(status, text, type_=kind, code=code)
        resp.force_close()
        return resp


def _ignore(_data: bytes) -> None:
    """A refused connection's later reads."""


class _QuietServer(web.Server):
    """``web.Server`` whose connections use ``_QuietRequestHandler``."""

    def __call__(self) -> RequestHandler:
        return _QuietRequestHandler(self, loop=self._loop, **self._kwargs)


class _QuietAppRunner(web.AppRunner):
    """``web.AppRunner`` serving through ``_QuietServer`` (aiohttp offers no public hook for
    it), with the lean server's head limits (``core.protocol.limits``)."""

    def __init__(self, app: web.Application, **kwargs: Any) -> None:
        kwargs.update(max_line_size=MAX_LINE_BYTES, max_field_size=MAX_FIELD_BYTES)
        super().__init__(app, max_headers=MAX_HEADERS, **kwargs)

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _QuietServer
        return server


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
    runner = _QuietAppRunner(
        build_app(state),
        handler_cancellation=True,
        shutdown_timeout=_AIOHTTP_GRACE_S,  # the drain itself is ``lifecycle.mark_shutdown``
        access_log=None,
    )
    await runner.setup()
    try:
        site = LeanSite(
            runner, state, host=config.host, port=config.port, reuse_port=worker is not None
        )
        try:
            await site.start()
        except OSError as exc:  # busy port, address not ours: the run never served
            why = os.strerror(exc.errno).lower() if exc.errno else str(exc)
            reason = f"cannot listen on {config.host}:{config.port}: {why}"
            if state.experiment is not None:
                state.experiment.finish("aborted", error=reason)
                raise ConfigError(f"{reason} (run directory {run_dir} marked aborted)") from exc
            raise ConfigError(reason) from exc
        host, port = runner.addresses[0][:2]
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{port}"
        log.info("proxy_started", url=url, mode=str(config.mode), run_dir=str(run_dir))
        yield url, state
    finally:
        await runner.cleanup()
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
