"""The transport seam: what goes out to an upstream, its answer as it arrives, and how one fails.

``Outbound`` is an upstream as the requests sent to it see it: its ``spec``, the requests
in flight, and the head each request is written with (``backends.h1.H1Pool`` builds on it).

Every way of reaching an upstream hands its answer over the same way: a ``Carrier``
(``backends.h1._Connection`` for ``http://`` and ``https://``, a scripted one in the
tests) writes the request, then feeds the ``Exchange``: the head
once (``headers_in`` resolves), each read stamped on the request's own clock and kept
in ``chunks`` (and handed to ``on_body`` in the same call), then either a clean end
(``ended`` resolves) or one classified ``UpstreamFailure`` on both futures. The proxy's
relay, the replayer's sends and their measurement (``measure_exchange``, once, at the
end) read only this.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from multidict import CIMultiDict

from specproxy.backends.base import BackendSpec, UpstreamRequest
from specproxy.core.measurement.measure import measure_recorded
from specproxy.core.protocol.headers import SharedHeaders
from specproxy.core.records.model import ErrorKind, Measurement, Route

NO_HEAD = "no response headers before deadline"
NO_DATA = "no data from server before deadline"
TOTAL_DEADLINE = "request exceeded its total deadline"


class Carrier(Protocol):
    """What an Exchange's answer arrives on (see the module docstring)."""

    exchange: Exchange | None

    def pause_reading(self) -> None:
        """Stop reading the upstream for now (the client is slower than the server)."""

    def resume_reading(self) -> None: ...

    def cancel_timer(self) -> None:
        """Stop the exchange's deadlines (it is over)."""

    def close(self) -> None:
        """Drop the connection (the server aborts the request)."""


class UpstreamFailure(Exception):
    """A failed exchange, classified: ``kind`` and a short, secret-free ``message``."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message[:300]


class Exchange:
    """One request's response as it arrives; see the module docstring.

    ``chunks`` holds every body read as ``(t_us, bytes)``; ``on_body``, when set, is
    called with each read's bytes as it arrives (reads before it was set are only in
    ``chunks``). ``end_us`` is the time the body ended (when it ended cleanly).
    """

    __slots__ = (
        "_conn",
        "_t0_ns",
        "chunks",
        "end_us",
        "ended",
        "headers",
        "headers_in",
        "headers_us",
        "on_body",
        "status",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, t0_ns: int) -> None:
        self._t0_ns = t0_ns
        self._conn: Carrier | None = None
        self.status = 0
        self.headers: CIMultiDict[str] = CIMultiDict()
        self.headers_us = 0
        self.end_us = 0
        self.chunks: list[tuple[int, bytes]] = []
        self.on_body: Callable[[bytes], None] | None = None
        self.headers_in: asyncio.Future[None] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()

    def now_us(self) -> int:
        """Microseconds since the exchange began (the request's own clock)."""
        return (time.perf_counter_ns() - self._t0_ns) // 1000

    def pause_reading(self) -> None:
        """Stop reading the upstream (the client is slower than the server)."""
        if self._conn is not None:
            self._conn.pause_reading()

    def resume_reading(self) -> None:
        if self._conn is not None:
            self._conn.resume_reading()

    # what a Carrier calls
    def carried_by(self, conn: Carrier) -> None:
        """The answer arrives on ``conn`` from now on."""
        self._conn = conn

    def head(self, status: int, headers: CIMultiDict[str]) -> None:
        """The final answer's head is in."""
        self.status = status
        self.headers = headers
        self.headers_us = self.now_us()
        if not self.headers_in.done():
            self.headers_in.set_result(None)

    def read(self, body: bytes) -> None:
        """One read of the body, stamped now, kept, and handed to ``on_body``."""
        self.chunks.append((self.now_us(), body))
        if self.on_body is not None:
            self.on_body(body)

    def finish(self) -> None:
        """The body ended cleanly."""
        self._conn = None
        self.end_us = self.now_us()
        if not self.ended.done():
            self.ended.set_result(None)

    def fail(self, failure: UpstreamFailure) -> None:
        """The exchange failed (``abort`` also closes its connection)."""
        self._conn = None
        self._fail(failure)

    def abort(
        self, kind: ErrorKind = ErrorKind.CLIENT_CANCELLED, message: str = "abandoned"
    ) -> None:
        """Give up on the response: close its connection (the server aborts the request).

        A caller still awaiting ``headers_in`` or ``ended`` gets ``UpstreamFailure(kind, message)``.
        """
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.cancel_timer()
            conn.exchange = None
            conn.close()
        self._fail(UpstreamFailure(kind, message))

    def _fail(self, failure: UpstreamFailure) -> None:
        for fut in (self.headers_in, self.ended):
            if not fut.done():
                fut.set_exception(failure)
                fut.exception()  # marked as retrieved: a caller awaiting it still gets it


class Outbound:
    """An upstream as the requests sent to it see it (see the module docstring), in plain
    attributes: ``spec``, ``in_flight`` (counted while ``counted()`` is entered: the
    upstream is its own context manager, entering it makes no object)."""

    def __init__(self, spec: BackendSpec, prefix: str, host: str) -> None:
        self.spec = spec
        self.in_flight = 0
        self._prefix = prefix  # the URL's path, before each route's
        self._host_line = f"Host: {host}\r\n".encode("latin-1")

    def counted(self) -> Outbound:
        """Counts one request in ``in_flight`` for the block's duration."""
        return self

    def __enter__(self) -> None:
        self.in_flight += 1

    def __exit__(self, *exc: object) -> None:
        self.in_flight -= 1

    def _headers(self, extra: Mapping[str, str]) -> dict[str, str]:
        headers = dict(extra)  # end-to-end only (see UpstreamRequest)
        headers.setdefault("Content-Type", "application/json")
        if self.spec.api_key:
            headers["Authorization"] = f"Bearer {self.spec.api_key}"
        return headers

    def _head(self, request: UpstreamRequest) -> bytes:
        """The request's HTTP/1.1 head: its request line and headers, then its length; the
        part before the length is built once for ``SharedHeaders`` (kept in their ``derived``)."""
        headers = request.headers
        path = request.route.value
        known = headers.derived.get((self, path)) if type(headers) is SharedHeaders else None
        if known is None:
            lines = [f"POST {self._prefix}{path} HTTP/1.1\r\n".encode("latin-1"), self._host_line]
            # the client's bytes as they came (read as UTF-8 with surrogate escapes)
            lines.extend(
                f"{name}: {value}\r\n".encode("utf-8", "surrogateescape")
                for name, value in self._headers(headers).items()
            )
            known = b"".join(lines)
            if type(headers) is SharedHeaders:
                headers.derived[self, path] = known
        return known + b"Content-Length: %d\r\n\r\n" % len(request.body)


def exchange_ends(
    ex: Exchange | None, failure: tuple[ErrorKind, str] | None, t0_ns: int
) -> tuple[int | None, int, int]:
    """``(status, headers_us, end_us)`` of an exchange as it stands: the status only when
    the answer's head came in; the end when the body ended cleanly, else now."""
    if ex is None:
        return None, 0, (time.perf_counter_ns() - t0_ns) // 1000
    began = ex.headers_in.done() and ex.headers_in.exception() is None
    return (
        ex.status if began else None,
        ex.headers_us,
        ex.end_us if failure is None else ex.now_us(),
    )


def measure_exchange(
    route: Route,
    stream: bool,
    ex: Exchange | None,
    failure: tuple[ErrorKind, str] | None,
    t0_ns: int,
    *,
    keep_text: bool,
) -> Measurement:
    """The exchange folded into its Measurement (``failure``: how it failed, if it did),
    once, at its end (``core.measurement.measure.measure_recorded``): the one fold of an
    exchange, the proxy's and the replayer's."""
    status, headers_us, end_us = exchange_ends(ex, failure, t0_ns)
    return measure_recorded(
        route,
        stream,
        status=status,
        headers_us=headers_us,
        chunks=ex.chunks if ex is not None else [],
        end_us=end_us,
        failure=failure,
        keep_text=keep_text,
    )
