"""The aiohttp adapter: one ClientSession per backend, raw bytes into ``core.measure``.

On ``http://`` a started backend also holds a ``backends.h1`` keep-alive pool: the proxy's
hot path (``open_exchange``, ``proxy.relay``) and a ``send`` with no sink (the replayer's,
``backends.pooled``) use it; a ``send`` relaying to a sink and the info reads use aiohttp.

The only module that catches aiohttp's exceptions on the request path. A request's failure
becomes a Measurement with an ErrorKind (never an exception), and ``on_done`` is called
exactly once per ``send`` — including when the calling task is cancelled — so every request
sent yields exactly one record. Info reads (``get``/``post_json``) raise
``BackendUnreachable``/``BackendTimeout`` instead, because nothing is recorded for them.

Time inside a request is microseconds since the POST was issued (``perf_counter_ns``); the
caller stamps the run clock just before calling ``send``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import orjson

from specproxy.backends.base import (
    BackendSpec,
    EventFilter,
    ResponseSink,
    SharedHeaders,
    UpstreamRequest,
)
from specproxy.backends.h1 import Exchange, H1Pool, UpstreamFailure, is_stale
from specproxy.backends.pooled import send_pooled
from specproxy.core.measure import ResponseMeter
from specproxy.core.model import ErrorKind, Measurement
from specproxy.core.sse import SseEvent
from specproxy.errors import BackendTimeout, BackendUnreachable


class _ClientGone(Exception):
    """The sink (the proxy's client) disconnected while we were relaying."""


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
        self._pool: H1Pool | None = None
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
            # No sock_read here: aiohttp would start it while waiting for the headers, so a
            # non-streaming answer slower than idle_s would time out. ``_start_idle_timer``
            # arms it once the headers are in; the wait for them is bounded by first_byte_s.
            timeout=aiohttp.ClientTimeout(total=t.total_s, connect=t.connect_s),
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )
        if self._spec.url.startswith("http://"):
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

    async def send(
        self,
        request: UpstreamRequest,
        *,
        on_done: Callable[[Measurement], None],
        sink: ResponseSink | None = None,
        drop_event: EventFilter | None = None,
        keep_text: bool = False,
    ) -> Measurement:
        """Send ``request`` and measure the response; see the module docstring for guarantees."""
        if sink is None and drop_event is None and self._pool is not None:
            return await send_pooled(self, request, on_done, keep_text)
        meter = ResponseMeter(request.route, request.stream, keep_text=keep_text)
        t0_ns = time.perf_counter_ns()

        def now_us() -> int:
            return (time.perf_counter_ns() - t0_ns) // 1000

        self._in_flight += 1
        measurement: Measurement | None = None
        try:
            measurement = await self._round_trip(
                request, meter, now_us, sink=sink, drop_event=drop_event
            )
        except asyncio.CancelledError:
            measurement = meter.fail(now_us(), ErrorKind.CLIENT_CANCELLED, "request cancelled")
            raise
        finally:
            self._in_flight -= 1
            if measurement is None:  # an unexpected error escaped: still one record
                measurement = meter.fail(now_us(), ErrorKind.PROTOCOL, "internal error")
            on_done(measurement)
        return measurement

    @property
    def streams_at_transport_level(self) -> bool:
        """True when ``open_exchange`` can be used (a started backend on ``http://``)."""
        return self._pool is not None

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
        pool = self._pool
        if pool is None:
            return None
        return pool.send_now(self._head(pool, request), request.body, t0_ns)

    async def open_exchange(
        self,
        request: UpstreamRequest,
        t0_ns: int,
        on_sent: Callable[[], object] | None = None,
        begun: Exchange | None = None,
    ) -> Exchange:
        """POST ``request`` on the keep-alive pool; returns once its response headers are in.

        The hot path's round trip (``backends.h1``): the body then arrives through the
        Exchange, without a task wake-up per read. Raises ``UpstreamFailure`` (classified:
        ``connect``, ``timeout`` for no headers within ``first_byte_s``, ...); a stale
        pooled connection is retried once on a fresh one. Cancelled, it closes the
        connection. ``t0_ns`` (``perf_counter_ns``) is time zero of the exchange's stamps.
        ``on_sent`` is called once the request has been written (on a pooled connection, in
        the same call): what the caller does there does not delay the request. ``begun``:
        the request already written by ``begin_exchange`` (with the same ``t0_ns``).
        """
        pool = self._pool
        if pool is None:
            raise RuntimeError("open_exchange needs a started backend on an http:// URL")
        body = request.body
        head = b""
        ex: Exchange | None = begun
        try:  # the first-byte deadline is the pool's (``backends.h1``)
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

    async def _round_trip(
        self,
        request: UpstreamRequest,
        meter: ResponseMeter,
        now_us: Callable[[], int],
        *,
        sink: ResponseSink | None,
        drop_event: EventFilter | None,
    ) -> Measurement:
        """One round trip: the POST, then its response relayed and measured."""
        session = self._require_session()
        url = self._spec.url + request.route.value
        headers = self._headers(request.headers)
        try:
            async with asyncio.timeout(self._spec.timeouts.first_byte_s):
                try:
                    resp = await session.post(url, data=request.body, headers=headers)
                except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                    # A pooled keep-alive connection that the server had already closed
                    # (llama-server closes after each stream without saying so) fails
                    # before any response; one retry on a fresh connection. A second
                    # failure is recorded as `connect`.
                    resp = await session.post(url, data=request.body, headers=headers)
        except TimeoutError:
            return meter.fail(now_us(), ErrorKind.TIMEOUT, "no response headers before deadline")
        except aiohttp.ClientError as exc:
            return meter.fail(now_us(), ErrorKind.CONNECT, _describe(exc))
        try:
            return await self._relay(request, resp, meter, now_us, sink=sink, drop_event=drop_event)
        finally:
            if resp.content.is_eof():
                resp.release()  # body read to the end: the connection can be reused
            else:
                resp.close()  # abandoned mid-body: closing it makes SGLang abort the request

    async def _relay(
        self,
        request: UpstreamRequest,
        resp: aiohttp.ClientResponse,
        meter: ResponseMeter,
        now_us: Callable[[], int],
        *,
        sink: ResponseSink | None,
        drop_event: EventFilter | None,
    ) -> Measurement:
        meter.on_headers(now_us(), resp.status)
        _start_idle_timer(resp, self._spec.timeouts.idle_s)
        try:
            if sink is None:
                async for data in resp.content.iter_any():
                    meter.feed(now_us(), data)
                end_us = now_us()
            else:
                filtering = drop_event is not None and request.stream and resp.status < 400
                end_us = await _relay_to(
                    sink, resp, meter, now_us, drop_event if filtering else None
                )
        except _ClientGone:
            return meter.fail(now_us(), ErrorKind.CLIENT_CANCELLED, "client disconnected")
        except TimeoutError:
            return meter.fail(now_us(), ErrorKind.TIMEOUT, "no data from server before deadline")
        except aiohttp.ClientError as exc:
            return meter.fail(now_us(), ErrorKind.STREAM_TRUNCATED, _describe(exc))
        return meter.finish(end_us)

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


def _start_idle_timer(resp: aiohttp.ClientResponse, idle_s: float) -> None:
    """From now on, ``idle_s`` without a body byte fails the read with a timeout.

    aiohttp's per-connection read timer, set after the headers: it restarts on every
    byte received, costs nothing per read and raises ``ServerTimeoutError`` (a
    ``TimeoutError``) from the body iterator.
    """
    if resp.content.is_eof():  # the whole body is in: nothing to wait for (and aiohttp
        return  # drops the timer at the body's end, which has passed)
    conn = resp.connection
    protocol = conn.protocol if conn is not None else None
    if protocol is not None:
        protocol.read_timeout = idle_s
        protocol.start_timeout()


async def _relay_to(
    sink: ResponseSink,
    resp: aiohttp.ClientResponse,
    meter: ResponseMeter,
    now_us: Callable[[], int],
    drop_event: EventFilter | None,
) -> int:
    """Headers, then each upstream read as it arrives, then the end; returns the body's end.

    Which loop runs is decided once per response. Without a filter every read goes to
    the sink before the meter parses it, so the client's latency never includes the
    parsing. With one, a read is parsed first and the bytes of its completed events,
    less the dropped ones, go on; an event not yet complete waits in ``tail``.
    """
    chunks = resp.content.iter_any()
    tail = b""
    if drop_event is None:
        await _to_sink(sink.on_headers(resp.status, resp.headers))
        async for data in chunks:
            arrived_us = now_us()
            try:  # inline rather than through _to_sink: one coroutine fewer per read
                await sink.on_bytes(data)
            except ConnectionError as exc:
                raise _ClientGone from exc
            meter.feed(arrived_us, data)
    else:
        headers = resp.headers.copy()
        headers.popall("Content-Length", None)  # withheld events make the body shorter
        await _to_sink(sink.on_headers(resp.status, headers))
        async for data in chunks:
            events = meter.feed(now_us(), data)
            tail += data
            kept, consumed = _kept_bytes(events, drop_event)
            tail = tail[consumed:]
            if kept:
                try:
                    await sink.on_bytes(kept)
                except ConnectionError as exc:
                    raise _ClientGone from exc
    end_us = now_us()
    if tail:
        await _to_sink(sink.on_bytes(tail))
    await _to_sink(sink.on_end())
    return end_us


async def _to_sink(awaitable: Awaitable[None]) -> None:
    """Await a once-per-response sink call, turning the client's disconnect into ``_ClientGone``."""
    try:
        await awaitable
    except ConnectionError as exc:  # ConnectionResetError, aiohttp's ClientConnectionResetError
        raise _ClientGone from exc


def _kept_bytes(events: list[SseEvent], drop_event: EventFilter) -> tuple[bytes, int]:
    """Bytes of the events to forward, and how many bytes the events covered in total."""
    consumed = 0
    kept: list[bytes] = []
    for event in events:
        consumed += len(event.raw)
        if not drop_event(event):
            kept.append(event.raw)
    return b"".join(kept), consumed


def _describe(exc: BaseException) -> str:
    """A short, secret-free description of a transport error."""
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]
