"""HTTP/1.1 to one upstream: a keep-alive pool of connections, each parsing its answers in C.

``H1Pool`` (``backends.http.HttpBackend`` builds on it) writes a request in the same call
on an idle pooled connection (``begin_exchange``), or on one it opens (``open_exchange``;
at most ``max_connections`` open; TLS on ``https://``, verified against the system's
certificates or those ``SSL_CERT_FILE`` names). ``_Connection`` feeds every read to
``httptools`` inside ``data_received``, stamps the body it carried, keeps it in
``Exchange.chunks`` and hands it to ``Exchange.on_body`` in the same call: the caller
awaits ``headers_in`` once and ``ended`` once. It goes back to the pool when its answer
ended cleanly and both sides allow keep-alive; what follows an answer's end closes it.

Failures are ``UpstreamFailure`` on those futures, as the record's ``ErrorKind``
(``connect``: no connection, or closed before the answer began; ``stream_truncated``:
after; ``protocol``: not HTTP/1.1, a 101, over ``core.protocol.limits``; ``timeout``). A
pooled connection found closed before any byte of the answer is retried once on a fresh
one; up to ``MAX_INTERIM`` interim answers are skipped. One timer per exchange, armed when
the request is written, fails it with ``timeout`` when no head came ``first_byte_s`` after
it, no body byte for ``idle_s`` after the head, or no end ``total_s`` after it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import time
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

import httptools

from specproxy.backends.base import BackendSpec, UpstreamRequest
from specproxy.backends.exchange import (
    NO_DATA,
    NO_HEAD,
    TOTAL_DEADLINE,
    Exchange,
    Outbound,
    UpstreamFailure,
)
from specproxy.core.protocol.limits import (
    MAX_FIELD_BYTES,
    MAX_HEADERS,
    MAX_INTERIM,
    MAX_RESPONSE_HEAD_BYTES,
)
from specproxy.core.records.model import ErrorKind

_STALE = "stale"  # the connection was closed by the server before this answer began


class _Refused(Exception):
    """Raised inside a parser callback: the answer breaks a limit or the protocol, or a
    second answer began after this one ended."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection to the upstream; parses each response with httptools."""

    def __init__(self, pool: H1Pool) -> None:
        self._pool = pool
        self._loop_time = pool.loop.time
        self._pieces: list[bytes] = []
        # httptools' body callback: the list's own append, called from C with no Python
        # frame per body piece (the parser looks it up when it is made).
        self.on_body = self._pieces.append
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.reused = False
        self._timer: asyncio.TimerHandle | None = None
        # the state of one exchange is set by ``attach``, before any byte is read

    def write(self, head: bytes, body: bytes) -> None:
        """Write a request; ``attach`` its exchange next (``H1Pool._send_on``)."""
        assert self.transport is not None
        self.transport.write(head + body if len(body) < 16384 else head)
        if len(body) >= 16384:
            self.transport.write(body)

    def attach(self, ex: Exchange) -> None:
        """``ex`` gets the answer to the request just written; its deadlines start now."""
        self.exchange = ex
        ex.carried_by(self)
        self._complete = False
        self._interim = False
        self._keep_alive = False
        self._until_eof = False
        self._received = False
        self._head_bytes = 0  # bytes read while the final answer's head is not yet in
        self._interims = 0
        self._headers_done = False
        self._pieces.clear()
        self._parser = httptools.HttpResponseParser(self)
        pool = self._pool
        self._sent_at = now = self._loop_time()
        first = min(pool.first_byte_s, pool.idle_s, pool.total_s)
        self._timer = pool.loop.call_at(now + first, self._check_deadlines)

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        ex = self.exchange
        if ex is None:  # bytes nobody asked for: the connection cannot be trusted
            self.close()
            return
        self._received = True
        self._last_read = self._loop_time()
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            if self._pieces:  # what the answer carried before the parser stopped
                ex.read(b"".join(self._pieces))
                self._pieces.clear()
            self._parse_failed(ex, exc)
            return
        if not self._headers_done:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_RESPONSE_HEAD_BYTES:
                why = f"response head longer than {MAX_RESPONSE_HEAD_BYTES} bytes"
                self._end(ex, UpstreamFailure(ErrorKind.PROTOCOL, why))
                return
        pieces = self._pieces
        if pieces:  # ``Exchange.read``, inlined: this is the per-read path
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            ex.chunks.append(((time.perf_counter_ns() - ex._t0_ns) // 1000, body))
            on_body = ex.on_body
            if on_body is not None:
                on_body(body)
        if self._complete:
            self._end(ex, None)

    def _parse_failed(self, ex: Exchange, exc: Exception) -> None:
        """The parser stopped: at a second answer after a whole one (the connection is not
        trusted again, the answer stands), at a limit, or at bytes that are not HTTP/1.1."""
        cause = exc.__context__
        if self._complete:  # whatever follows a whole answer is not part of it
            self._keep_alive = False
            self._end(ex, None)
            return
        if isinstance(cause, _Refused):
            why = str(cause)
        elif isinstance(exc, httptools.HttpParserUpgrade):
            why = "the server switched protocols (101)"
        else:
            why = f"not an HTTP/1.1 answer: {exc}"
        self._end(ex, UpstreamFailure(ErrorKind.PROTOCOL, why))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._pool.forget(self)
        ex = self.exchange
        if ex is None:
            return
        if self._until_eof and exc is None and ex.headers_in.done():
            self._end(ex, None)  # a body delimited by the end of the connection
            return
        if not self._received and self.reused:
            self._end(ex, UpstreamFailure(ErrorKind.CONNECT, _STALE))
            return
        why = f"{type(exc).__name__}: {exc}" if exc is not None else "server closed the connection"
        kind = ErrorKind.STREAM_TRUNCATED if ex.headers_in.done() else ErrorKind.CONNECT
        self._end(ex, UpstreamFailure(kind, why))

    # httptools callbacks
    def on_message_begin(self) -> None:
        if self._complete:
            raise _Refused("a second answer")

    def on_header(self, name: bytes, value: bytes) -> None:
        ex = self.exchange
        if ex is None or self._headers_done:  # trailers are not the answer's headers
            return
        if len(name) > MAX_FIELD_BYTES or len(value) > MAX_FIELD_BYTES:
            raise _Refused(f"a response header longer than {MAX_FIELD_BYTES} bytes")
        if len(ex.headers) >= MAX_HEADERS:
            raise _Refused(f"more than {MAX_HEADERS} response headers")
        ex.headers.add(
            name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape")
        )

    def on_headers_complete(self) -> None:
        ex = self.exchange
        if ex is None:
            return
        status = self._parser.get_status_code()
        if status == 101:
            raise _Refused("the server switched protocols (101)")
        if 100 <= status < 200:  # an interim answer (100 Continue, 103 ...)
            self._interim = True
            self._interims += 1
            if self._interims > MAX_INTERIM:
                raise _Refused(f"more than {MAX_INTERIM} interim (1xx) answers")
            ex.headers.clear()  # the final answer's head follows; only it is the response's
            return
        if not 200 <= status <= 599:  # no status HTTP defines (RFC 9110 section 15)
            raise _Refused(f"a status that is no HTTP status ({status})")
        self._headers_done = True
        headers = ex.headers
        chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
        bodiless = status in (204, 304)  # no body, whatever the headers say (RFC 9112 6.3)
        self._until_eof = not chunked and "Content-Length" not in headers and not bodiless
        ex.head(status, headers)

    def on_message_complete(self) -> None:
        if self._interim:  # the end of an interim answer: the parser reads the next one
            self._interim = False
            return
        self._complete = True
        self._keep_alive = self._parser.should_keep_alive()  # False once the parser moved on

    # own
    def _check_deadlines(self) -> None:
        """The exchange's one timer (see the module docstring): fail it, or look again later."""
        self._timer = None
        ex = self.exchange
        if ex is None or ex.ended.done():
            return
        pool = self._pool
        now = self._loop_time()
        if not ex.headers_in.done():
            due = self._sent_at + pool.first_byte_s
            message = NO_HEAD
        else:
            due = self._last_read + pool.idle_s
            message = NO_DATA
        total = self._sent_at + pool.total_s
        if total <= due:
            due, message = total, TOTAL_DEADLINE
        if now >= due:
            self._end(ex, UpstreamFailure(ErrorKind.TIMEOUT, message))  # closes it
        else:
            self._timer = pool.loop.call_at(due, self._check_deadlines)

    def cancel_timer(self) -> None:
        """Stop the exchange's deadline timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _end(self, ex: Exchange, failure: UpstreamFailure | None) -> None:
        self.cancel_timer()
        self.exchange = None
        if failure is not None:
            self.close()
            ex.fail(failure)
            return
        ex.finish()
        if self._until_eof or not self._keep_alive:
            self.close()
        else:
            self._pool.put_back(self)

    def pause_reading(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None:
            self.transport.resume_reading()

    def close(self) -> None:
        transport, self.transport = self.transport, None
        if transport is not None:
            transport.close()
        self._pool.forget(self)


class H1Pool(Outbound):
    """Keep-alive connections to one HTTP/1.1 server; see the module docstring.
    ``open_pool`` (on the running loop) before the first request."""

    loop: asyncio.AbstractEventLoop  # set by ``open_pool``
    _slots: asyncio.Semaphore

    def __init__(self, spec: BackendSpec) -> None:
        parts = urlsplit(spec.url)
        if parts.scheme not in ("http", "https") or parts.hostname is None:
            raise ValueError(f"H1Pool serves http:// and https:// URLs, got {spec.url!r}")
        super().__init__(spec, parts.path.rstrip("/"), parts.netloc.rsplit("@", 1)[-1])
        self.host = parts.hostname
        tls = parts.scheme == "https"
        self.port = parts.port or (443 if tls else 80)
        self._ssl = ssl.create_default_context() if tls else None
        self._server_hostname = self.host if tls else None  # what the certificate must name
        t = spec.timeouts
        self.idle_s = t.idle_s
        self.first_byte_s = t.first_byte_s
        self.total_s = t.total_s
        self._connect_s = t.connect_s
        self._idle: collections.deque[_Connection] = collections.deque()
        self._all: set[_Connection] = set()
        self._open = False

    def open_pool(self) -> None:
        """Take requests from now on, on the running event loop."""
        self.loop = asyncio.get_running_loop()
        self._slots = asyncio.Semaphore(self.spec.max_connections)
        self._open = True

    def close_pool(self) -> None:
        """Close every connection; no new one opens until ``open_pool``."""
        self._open = False
        for conn in list(self._all):
            conn.close()

    def begin_exchange(self, request: UpstreamRequest, t0_ns: int) -> Exchange | None:
        """See ``backends.base.Backend``: on an idle pooled connection, or None."""
        conn = self._idle_connection()
        if conn is None:
            return None
        return self._send_on(conn, self._head(request), request.body, t0_ns)

    async def open_exchange(
        self,
        request: UpstreamRequest,
        t0_ns: int,
        on_sent: Callable[[], object] | None = None,
        begun: Exchange | None = None,
    ) -> Exchange:
        """See ``backends.base.Backend``; a stale pooled connection is retried once on a
        fresh one. ``t0_ns`` (``perf_counter_ns``) is time zero of the exchange's stamps."""
        body = request.body
        head = b""
        ex: Exchange | None = begun
        try:  # the first-byte deadline is the connection's
            if ex is None:
                head = self._head(request)
                ex = self._send_on(await self._connection(fresh=False), head, body, t0_ns)
            if on_sent is not None:
                on_sent()
            try:
                await ex.headers_in
            except UpstreamFailure as failure:
                if failure.message != _STALE:
                    raise
                conn = await self._connection(fresh=True)
                ex = self._send_on(conn, head or self._head(request), body, t0_ns)
                await ex.headers_in
        except BaseException:
            if ex is not None:
                ex.abort()
            raise
        return ex

    def _send_on(self, conn: _Connection, head: bytes, body: bytes, t0_ns: int) -> Exchange:
        """Write, then make and attach the Exchange (nothing is read before that)."""
        conn.write(head, body)
        ex = Exchange(self.loop, t0_ns)
        conn.attach(ex)
        return ex

    def _idle_connection(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.transport is not None and not conn.transport.is_closing():
                conn.reused = True
                return conn
        return None

    async def _connection(self, *, fresh: bool) -> _Connection:
        """An idle pooled connection (unless ``fresh``), else a new one, or ``connect``."""
        if not fresh and (conn := self._idle_connection()) is not None:
            return conn
        if not self._open:
            raise RuntimeError("HttpBackend.start() was not awaited")
        await self._slots.acquire()
        conn = _Connection(self)
        try:
            async with asyncio.timeout(self._connect_s):
                await self.loop.create_connection(
                    lambda: conn,
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname,
                )
        except OSError as exc:  # TimeoutError among them
            self._slots.release()
            timed_out = isinstance(exc, TimeoutError)
            why = "connect timed out" if timed_out else f"{type(exc).__name__}: {exc}"
            raise UpstreamFailure(ErrorKind.CONNECT, why) from exc
        self._all.add(conn)
        return conn

    def put_back(self, conn: _Connection) -> None:
        if conn in self._all:
            self._idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        if conn in self._all:
            self._all.discard(conn)
            self._slots.release()
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
