"""HTTP/1.1 to an upstream at the transport level: one connection and its C response parser.

The proxy's hot path. ``_Connection`` is the ``asyncio.Protocol`` of one keep-alive
connection of an ``h1_pool.H1Pool``: ``write`` puts a request on the wire, ``attach``
gives it the request's ``Exchange``; it feeds every socket read to ``httptools`` (C
parsing and de-chunking) inside ``data_received``, stamps the body it carried
(microseconds since the exchange began), keeps it in ``Exchange.chunks`` and hands it to
``Exchange.on_body`` in the same call. No task wakes up per read: the caller awaits
``headers_in`` once and ``ended`` once.

Failures are ``UpstreamFailure`` exceptions on those futures, already classified as the
record's ``ErrorKind`` (``connect``: closed before the response began; ``stream_truncated``:
after; ``protocol``: bytes that are not HTTP/1.1, a 101, an answer over ``core.protocol.limits``;
``timeout``: the deadlines); a pooled connection the server had closed, found closed
before any byte of the answer, fails as ``connect`` marked stale (``is_stale``), and is
retried once on a fresh one, as ``backends.http`` does. Up to ``MAX_INTERIM`` interim
answers (``100``, ``103``) are skipped. Parsing stops at the answer's end: what follows
(a second answer, garbage) is not part of it, and the connection is closed. A connection
goes back to the pool only when its response ended cleanly and both sides allow
keep-alive; one abandoned mid-body is closed.

The deadlines are kept by one timer per exchange, armed when the request is written
(``_Connection._check_deadlines``): no response head ``first_byte_s`` after the request
was written, no body byte for ``idle_s`` once the head is in, or no end ``total_s``
after the request was written fails the exchange with ``timeout``. (One timer, not
task-level ``asyncio.timeout``s around the waits: each of those costs a timer of its
own and, on Python 3.11, three system calls.)
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, cast

import httptools

from specproxy.backends.exchange import (
    NO_DATA,
    NO_HEAD,
    TOTAL_DEADLINE,
    Exchange,
    UpstreamFailure,
)
from specproxy.core.protocol.limits import (
    MAX_FIELD_BYTES,
    MAX_HEADERS,
    MAX_INTERIM,
    MAX_RESPONSE_HEAD_BYTES,
)
from specproxy.core.records.model import ErrorKind

if TYPE_CHECKING:
    from specproxy.backends.h1_pool import H1Pool

__all__ = ["TOTAL_DEADLINE", "Exchange", "UpstreamFailure", "is_stale"]
_STALE = "stale"  # the connection was closed by the server before this answer began


class _Refused(Exception):
    """Raised inside a parser callback: the answer breaks a limit or the protocol."""


class _Done(Exception):
    """Raised inside ``on_message_begin``: a second answer began after this one ended."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection to the upstream; parses each response with httptools."""

    def __init__(self, pool: H1Pool) -> None:
        self._pool = pool
        self._loop_time = pool.loop.time
        self._pieces: list[bytes] = []
        # httptools' body callback: the list's own append, called from C with no Python
        # frame per body piece (the parser looks it up when it is made).
        self.on_body = self._pieces.append
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.exchange: Exchange | None = None
        self.reused = False
        self._complete = False
        self._interim = False
        self._keep_alive = False
        self._until_eof = False
        self._received = False
        self._last_read = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._sent_at = 0.0
        self._head_bytes = 0  # bytes read while the final answer's head is not yet in
        self._interims = 0
        self._headers_done = False

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
            self._deliver(ex)
            self._parse_failed(ex, exc)
            return
        if not self._headers_done:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_RESPONSE_HEAD_BYTES:
                why = f"response head longer than {MAX_RESPONSE_HEAD_BYTES} bytes"
                self._end(ex, UpstreamFailure(ErrorKind.PROTOCOL, why))
                return
        pieces = self._pieces
        if pieces:  # ``_deliver`` (``Exchange.read``), inlined: this is the per-read path
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

    def _deliver(self, ex: Exchange) -> None:
        pieces = self._pieces
        if not pieces:
            return
        body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        ex.read(body)

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
        self._end(ex, UpstreamFailure(self._broken_kind(ex), why))

    # httptools callbacks
    def on_message_begin(self) -> None:
        if self._complete:
            raise _Done

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
    def _broken_kind(self, ex: Exchange) -> ErrorKind:
        return ErrorKind.STREAM_TRUNCATED if ex.headers_in.done() else ErrorKind.CONNECT

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
        self._head_bytes = 0
        self._interims = 0
        self._headers_done = False
        self._pieces.clear()
        self._parser = httptools.HttpResponseParser(self)
        pool = self._pool
        self._sent_at = now = self._loop_time()
        first = min(pool.first_byte_s, pool.idle_s, pool.total_s)
        self._timer = pool.loop.call_at(now + first, self._check_deadlines)

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
            self._end(ex, UpstreamFailure(ErrorKind.TIMEOUT, message))
            self.close()
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


def is_stale(failure: UpstreamFailure) -> bool:
    """True for the failure of a pooled connection the server had already closed."""
    return failure.message == _STALE
