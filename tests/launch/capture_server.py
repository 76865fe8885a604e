"""A small aiohttp server that answers like one captured SGLang 0.5.16 server.

It replays the captured ``/server_info``, ``/model_info``, ``/generate``, chat and
``/metrics`` bodies of one server (optionally changed), over real loopback HTTP, so
preflight and the SGLang reads are tested against real bytes. Runs either on the
test's own event loop (``running``) or on a thread of its own (``in_thread``) for the
command-line tests, whose ``main()`` starts its own loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.launch.captures import RUN_A, exchange_body


@dataclass
class CaptureServer:
    """What the server answers; every field may be changed before it starts."""

    server: str
    run: str = RUN_A
    overrides: dict[str, Any] = field(default_factory=dict)
    internal_overrides: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = None
    legacy_routes_only: bool = False
    metrics: bool = True
    flush_status: int = 200
    stall: asyncio.Event | None = None
    seen_auth: list[str | None] = field(default_factory=list)
    seen_models: list[str] = field(default_factory=list)

    def _body(self, name: str) -> Any:
        return exchange_body(self.run, self.server, name)

    def server_info(self) -> dict[str, Any]:
        info: dict[str, Any] = self._body("server_info")
        info.update(self.overrides)
        if self.api_key is not None:
            info["api_key"] = self.api_key  # SGLang returns its key verbatim
        for state in info["internal_states"]:
            state.update({k: v for k, v in self.overrides.items() if k in state})
            state.update(self.internal_overrides)
            state["api_key"] = info.get("api_key")
        return info

    def _authorised(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization")
        self.seen_auth.append(header)
        return self.api_key is None or header == f"Bearer {self.api_key}"

    def app(self) -> web.Application:
        app = web.Application()
        info_routes = (
            ["/get_server_info"]
            if self.legacy_routes_only
            else ["/server_info", "/get_server_info"]
        )
        model_routes = (
            ["/get_model_info"] if self.legacy_routes_only else ["/model_info", "/get_model_info"]
        )
        for path in info_routes:
            app.router.add_get(path, self._json(self.server_info))
        for path in model_routes:
            app.router.add_get(path, self._json(lambda: self._body("model_info")))
        app.router.add_get("/health", self._health)
        app.router.add_post("/generate", self._json(lambda: self._body("generate")))
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._json(lambda: self._body("v1_models")))
        app.router.add_post("/flush_cache", self._flush)
        if self.metrics:
            app.router.add_get("/metrics", self._metrics)
        return app

    def _json(self, produce: Any) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            if self.stall is not None:
                await self.stall.wait()
            if not self._authorised(request):
                return web.json_response({"error": "Unauthorized"}, status=401)
            return web.json_response(produce())

        return handler

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if not self._authorised(request):
            return web.json_response({"error": "Unauthorized"}, status=401)
        self.seen_models.append((await request.json())["model"])
        return web.json_response(self._body("chat"))

    async def _health(self, _request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)  # SGLang exempts /health from the API key

    async def _metrics(self, _request: web.Request) -> web.StreamResponse:
        return web.Response(text=self._body("metrics_before"), content_type="text/plain")

    async def _flush(self, request: web.Request) -> web.StreamResponse:
        if not self._authorised(request):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return web.Response(status=self.flush_status, text="flushed")


@contextlib.asynccontextmanager
async def running(server: CaptureServer) -> AsyncIterator[str]:
    """Serve on 127.0.0.1 (ephemeral port) on the current loop; yields the base URL."""
    runner = web.AppRunner(server.app())
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@contextlib.contextmanager
def serving_in_thread(
    *servers: Callable[[], AbstractAsyncContextManager[str]],
) -> Iterator[list[str]]:
    """Enter each server (an async context yielding its URL) on a thread with its own loop.

    For tests that call the synchronous CLI, whose ``main()`` starts a loop of its own.
    Yields the URLs in order once every server listens; all are stopped on exit.
    """
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    urls: list[str] = []
    stop = asyncio.Event()

    async def main() -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                urls.extend([await stack.enter_async_context(serve()) for serve in servers])
                ready.set()
                await stop.wait()
        finally:
            ready.set()  # a server that failed to start must not leave the test waiting

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    try:
        if not ready.wait(timeout=30) or len(urls) != len(servers):
            raise RuntimeError(f"{len(urls)} of {len(servers)} servers started")
        yield urls
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)
        loop.close()


@contextlib.contextmanager
def in_thread(server: CaptureServer) -> Iterator[str]:
    """Serve ``server`` from a thread with its own loop; yields its base URL."""
    with serving_in_thread(lambda: running(server)) as (url,):
        yield url


def free_port() -> int:
    """A loopback port that was free a moment ago (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def closed_port_url() -> str:
    """A loopback URL on which nothing listens."""
    return f"http://127.0.0.1:{free_port()}"
