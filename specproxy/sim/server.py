"""Lifecycle of a simulated server: bind, start the engine task, serve, stop.

``serve_in_background(config)`` is what every other test uses: it binds
127.0.0.1 on an ephemeral port (whatever ``config.host``/``config.port`` say),
reports that real port in ``/server_info``, and on exit aborts the requests still
running, stops the HTTP site (in-flight handlers get ``SHUTDOWN_TIMEOUT_S``) and
cancels the engine task. ``serve_until_stopped`` runs one server on the configured
address until SIGTERM or SIGINT (the ``specproxy sim`` command).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from specproxy.errors import ConfigError
from specproxy.runtime import install_stop_signals, spawn
from specproxy.sim.app import build_sim_app
from specproxy.sim.config import SimConfig
from specproxy.sim.state import SimServer

SHUTDOWN_TIMEOUT_S = 2.0


class RunningSim:
    """A started simulated server; ``url`` is its base URL without a trailing slash."""

    def __init__(
        self, server: SimServer, runner: web.AppRunner, engine_task: asyncio.Task[None]
    ) -> None:
        self.server = server
        self._runner = runner
        self._engine_task = engine_task

    @property
    def url(self) -> str:
        host = self.server.config.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.server.config.port}"

    async def stop(self) -> None:
        """Abort running requests, stop serving, then stop the engine."""
        self.server.engine.abort(None, "server shutting down")
        try:
            await self._runner.cleanup()
        finally:
            self._engine_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._engine_task


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"port: cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.setblocking(False)
    return sock


async def start(config: SimConfig) -> RunningSim:
    """Bind ``config.host:config.port`` (port 0 = ephemeral) and start serving."""
    sock = _bind(config.host, config.port)
    actual = dataclasses.replace(config, port=sock.getsockname()[1])
    server = SimServer(actual)
    runner = web.AppRunner(
        build_sim_app(server),
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S,
    )
    try:
        await runner.setup()
        await web.SockSite(runner, sock).start()
    except BaseException:
        await runner.cleanup()
        sock.close()
        raise
    engine_task = spawn(server.engine.run(), name=f"sim-engine:{actual.port}")
    return RunningSim(server, runner, engine_task)


@contextlib.asynccontextmanager
async def serve_in_background(config: SimConfig) -> AsyncIterator[str]:
    """Serve ``config`` on 127.0.0.1 with an ephemeral port; yields the base URL."""
    running = await start(dataclasses.replace(config, host="127.0.0.1", port=0))
    try:
        yield running.url
    finally:
        await running.stop()


async def serve_until_stopped(config: SimConfig, on_ready: Callable[[RunningSim], None]) -> None:
    """Serve ``config`` until SIGTERM/SIGINT; ``on_ready`` gets the server once listening."""
    stop = asyncio.Event()
    remove = install_stop_signals(stop)
    try:
        running = await start(config)
        try:
            on_ready(running)
            await stop.wait()
        finally:
            await running.stop()
    finally:
        remove()
