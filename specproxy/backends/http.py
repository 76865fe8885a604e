"""One upstream server over HTTP: the transport seam's exchanges, and the info reads.

``open_exchange`` (``backends.exchange``) goes through one implementation for both
schemes: a keep-alive pool (``backends.h1_pool``; connections, TLS on ``https://``, in
``backends.h1``), the proxy's hot path and the replayer's. It feeds the ``Exchange``;
``backends.send`` measures one, and ``proxy.relay`` relays one.

The info reads (``get``/``post_json``/``call``) use the aiohttp session and raise
``BackendUnreachable``/``BackendTimeout``, because nothing is recorded for them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import aiohttp
import orjson

from specproxy.backends.base import BackendSpec, SharedHeaders, UpstreamRequest
from specproxy.backends.h1 import Exchange, UpstreamFailure, is_stale
from specproxy.backends.h1_pool import H1Pool
from specproxy.errors import BackendTimeout, BackendUnreachable


class _Counted:
    """``HttpBackend.counted``: a class, not a generator, so that entering costs little."""

    __slots__ = ("_backend",)

    def __init__(self, backend: HttpBackend) -> None:
        self._backend = backend

    def __enter__(self) -> None:
        self._backend._in_flight += 1

    def __exit__(self, *exc: object) -> None:
        self._backend._in_flight -= 1


class HttpBackend:
    """One upstream server reached over HTTP; implements ``backends.base.Backend``."""

    def __init__(self, spec: BackendSpec) -> None:
        self._spec = spec
        self._session: aiohttp.ClientSession | None = None
        self._pool: H1Pool | None = None  # set by ``start``
        self._in_flight = 0

    @property
    def spec(self) -> BackendSpec:
        return self._spec

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def start(self) -> None:
        if self._session is not None:
            return
        t = self._spec.timeouts
        connector = aiohttp.TCPConnector(
            limit=self._spec.max_connections, limit_per_host=0, enable_cleanup_closed=True
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            # the info reads only (``_one_shot``), each also under its own timeout
            timeout=aiohttp.ClientTimeout(total=t.total_s, connect=t.connect_s),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )
        self._pool = H1Pool(
            self._spec.url,
            limit=self._spec.max_connections,
            connect_s=t.connect_s,
            idle_s=t.idle_s,
            first_byte_s=t.first_byte_s,
            total_s=t.total_s,
        )

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _require_pool(self) -> H1Pool:
        if self._pool is None:
            raise RuntimeError("HttpBackend.start() was not awaited")
        return self._pool

    def _require_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("HttpBackend.start() was not awaited")
        return self._session

    def _headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        headers = dict(extra)  # end-to-end only (see UpstreamRequest)
        headers.setdefault("Content-Type", "application/json")
        if self._spec.api_key:
            headers["Authorization"] = f"Bearer {self._spec.api_key}"
        return headers

    def counted(self) -> _Counted:
        """Counts one request in ``in_flight`` for the block's duration (``open_exchange``'s callers)."""
        return _Counted(self)

    def _head(self, pool: H1Pool, request: UpstreamRequest) -> bytes:
        """The request's head on ``pool`` (the part before its length built once for
        ``SharedHeaders``, kept in their ``derived``)."""
        headers = request.headers
        path = request.route.value
        known = headers.derived.get((self, path)) if type(headers) is SharedHeaders else None
        if known is None:
            known = pool.head_start(path, self._headers(headers))
            if type(headers) is SharedHeaders:
                headers.derived[self, path] = known
        return known + b"Content-Length: %d\r\n\r\n" % len(request.body)

    def begin_exchange(self, request: UpstreamRequest, t0_ns: int) -> Exchange | None:
        """Write ``request`` in this call, on an idle pooled connection; None when none is
        idle (``open_exchange`` then opens one). Hand the Exchange to ``open_exchange``."""
        pool = self._require_pool()
        return pool.send_now(self._head(pool, request), request.body, t0_ns)

    async def open_exchange(
        self,
        request: UpstreamRequest,
        t0_ns: int,
        on_sent: Callable[[], object] | None = None,
        begun: Exchange | None = None,
    ) -> Exchange:
        """POST ``request``; returns its Exchange once the response's head is in.

        The body then arrives through the Exchange (``backends.exchange``). Raises
        ``UpstreamFailure`` (classified: ``connect``, ``timeout`` for no head within
        ``first_byte_s``, ...); a stale pooled connection is retried once on a fresh one.
        Cancelled, it closes the connection. ``t0_ns`` (``perf_counter_ns``) is time zero
        of the exchange's stamps. ``on_sent`` is called once the request has been written
        (on a pooled connection, in the same call): what the caller does there does not
        delay the request. ``begun``: the request already written by ``begin_exchange``
        (with the same ``t0_ns``).
        """
        pool = self._require_pool()
        body = request.body
        head = b""
        ex: Exchange | None = begun
        try:  # the first-byte deadline is the connection's (``backends.h1``)
            if ex is None:
                head = self._head(pool, request)
                ex = await pool.send(head, body, t0_ns)
            if on_sent is not None:
                on_sent()
            try:
                await ex.headers_in
            except UpstreamFailure as failure:
                if not is_stale(failure):
                    raise
                ex = await pool.retry(head or self._head(pool, request), body, t0_ns)
                await ex.headers_in
        except BaseException:
            if ex is not None:
                ex.abort()
            raise
        return ex

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
        url = self._spec.url + path
        headers = self._headers({"Accept-Encoding": "identity"})  # the body is read, not relayed
        if api_key and not self._spec.api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        who = f"{self._spec.role} {url}" if self._spec.role is not None else url
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
