"""One upstream server over HTTP: a keep-alive pool, and the info reads.

``HttpBackend`` is a ``backends.h1.H1Pool``: what a sender touches per request
(``begin_exchange``, ``open_exchange``, ``counted``, ``in_flight``, ``spec``) is the pool's,
one implementation for both schemes, the proxy's hot path and the replayer's. It feeds the
``Exchange`` (``backends.exchange``); ``backends.send`` measures one, and ``proxy.relay``
relays one. ``start`` opens the pool and an aiohttp session, ``close`` closes both.

The info reads (``get``/``post_json``/``call``) use the aiohttp session and raise
``BackendUnreachable``/``BackendTimeout``, because nothing is recorded for them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

from specproxy.backends.base import BackendSpec
from specproxy.backends.h1 import H1Pool
from specproxy.errors import BackendTimeout, BackendUnreachable


class HttpBackend(H1Pool):
    """One upstream server reached over HTTP; implements ``backends.base.Backend``."""

    def __init__(self, spec: BackendSpec) -> None:
        super().__init__(spec)
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        if self._session is not None:
            return
        t = self.spec.timeouts
        connector = aiohttp.TCPConnector(
            limit=self.spec.max_connections, limit_per_host=0, enable_cleanup_closed=True
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            # the info reads only (``_one_shot``), each also under its own timeout
            timeout=aiohttp.ClientTimeout(total=t.total_s, connect=t.connect_s),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )
        self.open_pool()

    async def close(self) -> None:
        self.close_pool()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _require_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("HttpBackend.start() was not awaited")
        return self._session

    async def get(
        self, path: str, *, timeout_s: float = 10.0, api_key: str | None = None
    ) -> tuple[int, bytes]:
        """GET ``path``; returns (status, body). Raises BackendUnreachable / BackendTimeout.

        ``api_key`` is sent only when the spec has none (the proxy relays its client's key).
        """
        return await self._one_shot("GET", path, None, timeout_s, api_key)

    async def post_json(self, path: str, obj: Any, *, timeout_s: float = 60.0) -> tuple[int, bytes]:
        """POST ``obj`` as JSON to ``path`` (no body when ``obj`` is None); returns (status, body)."""
        body = None if obj is None else orjson.dumps(obj)
        return await self._one_shot("POST", path, body, timeout_s, None)

    async def call(
        self,
        method: str,
        path: str,
        obj: Any = None,
        *,
        timeout_s: float = 60.0,
        api_key: str | None = None,
    ) -> tuple[int, bytes]:
        """``method`` ``path`` with ``obj`` as a JSON body (none when None); returns (status, body)."""
        body = None if obj is None else orjson.dumps(obj)
        return await self._one_shot(method, path, body, timeout_s, api_key)

    async def _one_shot(
        self, method: str, path: str, body: bytes | None, timeout_s: float, api_key: str | None
    ) -> tuple[int, bytes]:
        """The one request-and-read of this package: nothing recorded, transport errors raised."""
        session = self._require_session()
        url = self.spec.url + path
        headers = self._headers({"Accept-Encoding": "identity"})  # the body is read, not relayed
        if api_key and not self.spec.api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        who = f"{self.spec.role} {url}" if self.spec.role is not None else url
        try:
            async with asyncio.timeout(timeout_s):
                async with session.request(method, url, data=body, headers=headers) as resp:
                    return resp.status, await resp.read()
        except TimeoutError as exc:
            raise BackendTimeout(f"{who}: no answer in {timeout_s:g} s") from exc
        except aiohttp.ClientError as exc:
            raise BackendUnreachable(f"{who}: {_describe(exc)}") from exc


@contextlib.asynccontextmanager
async def open_backend(spec: BackendSpec) -> AsyncIterator[HttpBackend]:
    """A started ``HttpBackend`` for ``spec``, closed on exit (for reads outside a run)."""
    backend = HttpBackend(spec)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


def _describe(exc: BaseException) -> str:
    """A short, secret-free description of a transport error."""
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]
