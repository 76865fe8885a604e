"""One upstream exchange's answer as ``backends.h1`` reads it, and how one fails.

(Kept apart from the connection that feeds it, ``backends.h1._Connection``, which is a
``Carrier`` here.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from multidict import CIMultiDict

from specproxy.core.measure import measure_recorded
from specproxy.core.model import ErrorKind, Measurement, Route


class Carrier(Protocol):
    """The connection an Exchange's answer arrives on (``backends.h1._Connection``)."""

    transport: asyncio.Transport | None
    exchange: Exchange | None

    def cancel_timer(self) -> None: ...

    def close(self) -> None: ...


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
        if self._conn is not None and self._conn.transport is not None:
            self._conn.transport.pause_reading()

    def resume_reading(self) -> None:
        if self._conn is not None and self._conn.transport is not None:
            self._conn.transport.resume_reading()

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
    once, at its end (``core.measure.measure_recorded``): the proxy's and the replayer's
    one fold of a pooled send."""
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
