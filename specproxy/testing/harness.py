"""The proxy tests' harness: simulators, a gated upstream, the proxy itself, run-dir readers.

Everything runs over real loopback HTTP. ``GateServer`` is a small real aiohttp server
used where a test must control *when* an upstream answers (a stalled or slow shadow,
a primary that never sends headers) or must see exactly what the proxy sent upstream.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.server import serve_proxy_in_background
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background

CHAT_EVENTS = (
    b'data: {"id":"g1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}\n\n',
    b'data: {"id":"g1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{"content":"hello"},"logprobs":null,"finish_reason":null}]}\n\n',
    b'data: {"id":"g1","object":"chat.completion.chunk","created":1,"model":"m","choices":'
    b'[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
)
CHAT_BODY = orjson.dumps(
    {
        "id": "g1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
)


@dataclass
class Seen:
    """One request as the gated upstream received it."""

    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class GateServer:
    """An upstream that records every request and answers only once ``release`` is set.

    ``hold`` False answers at once. Streams get ``CHAT_EVENTS``; other requests get
    ``CHAT_BODY``. ``arrivals`` counts requests; ``arrived(n)`` waits for the n-th.
    """

    hold: bool = True
    release: asyncio.Event = field(default_factory=asyncio.Event)
    seen: list[Seen] = field(default_factory=list)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.path, dict(request.headers), body))
        async with self._changed:
            self._changed.notify_all()
        if self.hold:
            await self.release.wait()
        if orjson.loads(body).get("stream") is not True:
            return web.Response(body=CHAT_BODY, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        with contextlib.suppress(ConnectionError):  # the proxy may have given up on us
            await resp.prepare(request)
            for event in CHAT_EVENTS:
                await resp.write(event)
            await resp.write_eof()
        return resp

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def arrived(self, n: int) -> None:
        """Wait until at least ``n`` generation requests have arrived."""
        async with self._changed:
            await self._changed.wait_for(lambda: len(self.seen) >= n)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        app = web.Application()
        for path in ("/v1/chat/completions", "/v1/completions", "/generate"):
            app.router.add_post(path, self._generate)
        app.router.add_get("/health", self._health)
        async with serve_app(app, on_stop=self.release) as url:
            yield url


@contextlib.asynccontextmanager
async def serve_app(
    app: web.Application, *, on_stop: asyncio.Event | None = None
) -> AsyncIterator[str]:
    """``app`` on an ephemeral loopback port; yields its base URL.

    ``on_stop`` is set before shutting down, so that handlers waiting on it can finish.
    """
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        if on_stop is not None:
            on_stop.set()
        await runner.cleanup()


def closed_port_url() -> str:
    """A loopback URL on which nothing listens (the port was bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@contextlib.asynccontextmanager
async def proxy(run_dir: Path, **options: Any) -> AsyncIterator[str]:
    """The proxy on an ephemeral loopback port, recording into ``run_dir``."""
    config = ProxyConfig(host="127.0.0.1", port=0, run_dir=run_dir, **options)
    async with serve_proxy_in_background(config) as url:
        yield url


def records(run_dir: Path) -> list[dict[str, Any]]:
    """Every record of ``run_dir/requests.jsonl``, in write order."""
    path = run_dir / "requests.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


async def records_when(run_dir: Path, want: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """The records of ``run_dir`` once at least ``want`` are written (a shadow may finish
    after the client's answer); polls the file, failing after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while len(found := records(run_dir)) < want:  # noqa: ASYNC110 - a file has no event to wait on
            await asyncio.sleep(0.01)  # polling the file for a write, not timing anything
    return found


def chat(content: str = "Say something about the sea.", **extra: Any) -> dict[str, Any]:
    """A greedy chat request body."""
    body: dict[str, Any] = {
        "model": "m",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 12,
        "temperature": 0,
    }
    body.update(extra)
    return body


Upstream = SimConfig | GateServer | str | None


@dataclass
class Rig:
    """A running proxy, its upstreams' URLs and a client session."""

    url: str
    baseline: str | None
    candidate: str | None
    session: aiohttp.ClientSession

    async def post(
        self, body: dict[str, Any], *, route: str = "/v1/chat/completions", **headers: str
    ) -> tuple[int, bytes]:
        """POST ``body`` through the proxy; (status, body bytes)."""
        async with self.session.post(self.url + route, json=body, headers=headers) as resp:
            return resp.status, await resp.read()

    async def get(self, path: str, *, base: str | None = None) -> tuple[int, str, bytes]:
        """GET ``path`` from the proxy (or ``base``); (status, content type, body bytes)."""
        async with self.session.get((base or self.url) + path) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), await resp.read()

    async def put(self, body: dict[str, Any], *, route: str) -> tuple[int, bytes]:
        """PUT ``body`` through the proxy; (status, body bytes)."""
        async with self.session.put(self.url + route, json=body) as resp:
            return resp.status, await resp.read()


async def _start(stack: contextlib.AsyncExitStack, upstream: Upstream) -> str | None:
    if isinstance(upstream, SimConfig):
        return await stack.enter_async_context(serve_in_background(upstream))
    if isinstance(upstream, GateServer):
        return await stack.enter_async_context(upstream.running())
    return upstream


@contextlib.asynccontextmanager
async def rig(
    run_dir: Path, *, baseline: Upstream = None, candidate: Upstream = None, **options: Any
) -> AsyncIterator[Rig]:
    """Upstreams (simulators, gates or plain URLs), then the proxy in front of them."""
    async with contextlib.AsyncExitStack() as stack:
        b = await _start(stack, baseline)
        c = await _start(stack, candidate)
        url = await stack.enter_async_context(proxy(run_dir, baseline=b, candidate=c, **options))
        session = await stack.enter_async_context(aiohttp.ClientSession())
        yield Rig(url, b, c, session)
