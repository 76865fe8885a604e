"""The client's answer to a relayed primary: the one writer of it, whichever server serves.

``ClientAnswer`` decides how the upstream's answer goes to the client (``Relay._exchange``
calls ``begin`` when the upstream's head is in, ``end`` when its body ended cleanly, and
``stop`` however it ended):

- headers as the upstream's (``client_headers``: framing and hop headers out,
  ``x-specproxy-request-id`` and ``x-specproxy-side`` in);
- an answer with a Content-Length (a unary answer, an error) or without a body (204,
  304) is written whole when it has ended, head and body together: one that fails
  before then is still the proxy's 502;
- any other (a stream) has its head written at once, then every upstream read as it
  arrives, through a ``ChunkForwarder`` (minus the events the proxy itself asked for,
  which also drops the Content-Length): called from the Exchange as each read arrives (on
  ``http://``, inside the connection's ``data_received``), it writes the read to the
  client's transport at once, as one HTTP chunk.

Where the bytes go is a ``ClientPort``: a ``ConnectionPort`` on the server's connection
(``proxy.lean``), which writes each head by hand in one ``transport.write``
(``response_head``: status line, the headers as ``client_headers`` passes them, ``Date``
and ``Server`` where they have none, the framing).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from email.utils import formatdate
from http import HTTPStatus
from typing import TYPE_CHECKING, Protocol

from multidict import CIMultiDict

from specproxy import __version__, runtime
from specproxy.backends.exchange import Exchange
from specproxy.core.protocol.headers import FRAMING_HEADERS, REQUEST_ID_HEADER, SIDE_HEADER
from specproxy.core.protocol.injected_events import MARKERS, EventFilter
from specproxy.core.protocol.sse import SseDecoder
from specproxy.core.records.model import ErrorKind, Role
from specproxy.core.speedups import SPEEDUPS
from specproxy.proxy.messages import BODILESS

if TYPE_CHECKING:
    from specproxy.proxy.relay import ProxiedRequest

DONE_TAIL = b"data: [DONE]\n\n"
_NOT_COPIED = FRAMING_HEADERS | {"date", "trailer", "proxy-authenticate"}
_REASONS = {s.value: s.phrase for s in HTTPStatus}
_SERVER_LINE = f"Server: specproxy/{__version__}\r\n"  # on answers that name none


class _DateCache:
    """The ``Date`` header's value, formatted once a second."""

    __slots__ = ("_second", "_value")

    def __init__(self) -> None:
        self._second = -1
        self._value = ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = formatdate(now, usegmt=True)
        return self._value


_DATE = _DateCache()


def response_head(status: int, headers: CIMultiDict[str], framing: str) -> bytes:
    """An HTTP/1.1 response head: status line, ``headers``, then ``Date`` and ``Server`` where
    ``headers`` have none, then the ``framing`` lines."""
    parts = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"]
    parts.extend(f"{name}: {value}\r\n" for name, value in headers.items())
    if "Date" not in headers:
        parts.append(f"Date: {_DATE()}\r\n")
    if "Server" not in headers:
        parts.append(_SERVER_LINE)
    parts.append(framing)
    parts.append("\r\n")
    return "".join(parts).encode("utf-8", "surrogateescape")  # the upstream's bytes as read


def client_headers(headers: Mapping[str, str], request_id: str, side: Role) -> CIMultiDict[str]:
    """The upstream's response headers for the client: framing and hop headers out, ours in."""
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        if name.lower() not in _NOT_COPIED:
            out.add(name, value)
    out[REQUEST_ID_HEADER] = request_id
    out[SIDE_HEADER] = side.value
    return out


class ClientWriter(Protocol):
    """What ``ChunkForwarder`` needs of the client's writer (``proxy.lean``'s connection)."""

    async def drain(self) -> None:
        """Wait until the transport's buffer is below its high-water mark."""


_M1, _M2 = MARKERS
_HIGH_WATER = 1 << 18  # bytes queued for the client before the upstream stops being read
_CHUNK_WRITER = SPEEDUPS.ChunkWriter if SPEEDUPS is not None else None


class ChunkForwarder:
    """The hot path's client side: each upstream read written at once as one HTTP chunk.

    Called synchronously from the upstream connection's ``data_received`` (as
    ``Exchange.on_body``), so a read reaches the client's socket in the same event-loop
    turn it arrived in. The response must be prepared, its headers sent, and no
    Content-Length set; ``chunked`` False (an HTTP/1.0 client) writes the bytes unframed.

    With a ``drop`` filter, a read is forwarded as it is unless it could hold an event
    to withhold (it contains one of ``core.protocol.injected_events.MARKERS``, or it ends inside
    an event, or an earlier one did): only then is it split into SSE events and the
    dropped ones left out; an unfinished event waits for the next read.

    An SSE read that ends with ``data: [DONE]`` ends the client's response there; later
    bytes are counted in ``bytes_after_done``, not relayed. A client whose transport is
    closing ends the exchange (``client_cancelled``). When the client reads slower than
    the server writes, the upstream stops being read until the client's buffer drains.

    ``attach_forwarder`` puts the commonest call in C where ``core.speedups`` has it (no
    filter, a chunked client: ``core._speedups.ChunkWriter`` frames and writes a read
    that is not the last event); it hands every other read to the forwarder.
    """

    __slots__ = (
        "_chunked",
        "_decoder",
        "_drop",
        "_exchange",
        "_resuming",
        "_sse",
        "_tail",
        "_transport",
        "_writer",
        "bytes_after_done",
        "ended",
    )

    def __init__(
        self,
        transport: asyncio.Transport,
        writer: ClientWriter,
        exchange: Exchange,
        *,
        sse: bool,
        drop: EventFilter | None,
        chunked: bool = True,
    ) -> None:
        self._chunked = chunked
        self._transport = transport
        self._writer = writer
        self._exchange = exchange
        self._sse = sse
        self._drop = drop
        self._decoder: SseDecoder | None = None
        self._tail = b""
        self._resuming: asyncio.Task[None] | None = None
        self.ended = False
        self.bytes_after_done = 0

    def __call__(self, data: bytes) -> None:
        if self.ended:
            self.bytes_after_done += len(data)
            return
        if self._drop is not None and (
            self._tail or _M1 in data or _M2 in data or not data.endswith(b"\n\n")
        ):
            data = self._filter(data, self._drop)
            if not data:
                return
        transport = self._transport
        if transport.is_closing():
            self._exchange.abort(ErrorKind.CLIENT_CANCELLED, "client disconnected")
            return
        if not self._chunked:  # an HTTP/1.0 client: the bytes as they are, the end is the close
            transport.write(data)
            if self._sse and data.endswith(DONE_TAIL):
                self._ended_here()
        elif self._sse and data.endswith(DONE_TAIL):  # the last event and the end: one write
            transport.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(data), data))
            self._ended_here()
            return
        else:
            transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        if transport.get_write_buffer_size() > _HIGH_WATER:
            self.over_high_water()

    def over_high_water(self) -> None:
        """More than ``_HIGH_WATER`` bytes wait for the client: stop reading the upstream
        until they have drained (once: a drain already awaited is not awaited again)."""
        if self._resuming is None:
            self._exchange.pause_reading()
            self._resuming = runtime.spawn(self._resume_when_drained(), name="client-drain")

    def _filter(self, data: bytes, drop: EventFilter) -> bytes:
        if self._decoder is None:
            self._decoder = SseDecoder()
        tail = self._tail + data
        kept: list[bytes] = []
        consumed = 0
        for event in self._decoder.feed(data):
            consumed += len(event.raw)
            if not drop(event):
                kept.append(event.raw)
        self._tail = tail[consumed:]
        return b"".join(kept)

    async def _resume_when_drained(self) -> None:
        try:
            await self._writer.drain()
        except ConnectionError:
            self._exchange.abort(ErrorKind.CLIENT_CANCELLED, "client disconnected")
        else:
            self._exchange.resume_reading()
        finally:
            self._resuming = None

    def finish(self) -> None:
        """The upstream body ended: pass on an unfinished last event, end the response."""
        if self.ended:
            return
        tail, self._tail = self._tail, b""
        transport = self._transport
        if not transport.is_closing():
            if not self._chunked:
                if tail:
                    transport.write(tail)
            else:
                framed = b"%x\r\n%b\r\n" % (len(tail), tail) if tail else b""
                transport.write(framed + b"0\r\n\r\n")
        self._ended_here()

    def _ended_here(self) -> None:
        """The terminating chunk has been written."""
        self.ended = True
        self._exchange.on_body = self  # what comes after the end is counted, not written

    def stop(self) -> None:
        """The exchange is over, however it ended: no drain waits on."""
        if self._resuming is not None:
            self._resuming.cancel()


def attach_forwarder(
    transport: asyncio.Transport,
    writer: ClientWriter,
    exchange: Exchange,
    *,
    drop: EventFilter | None,
    chunked: bool = True,
) -> ChunkForwarder:
    """A ``ChunkForwarder`` for ``exchange``'s body (SSE when its Content-Type says so),
    given at once what arrived with the headers, then set as the exchange's ``on_body``."""
    sse = exchange.headers.get("Content-Type", "").startswith("text/event-stream")
    forward = ChunkForwarder(transport, writer, exchange, sse=sse, drop=drop, chunked=chunked)
    for _, data in exchange.chunks:  # what arrived with the headers
        forward(data)
    if forward.ended:
        return forward
    if drop is None and chunked and _CHUNK_WRITER is not None:
        # the commonest call in C; the forwarder takes every other case (and the end)
        tail = DONE_TAIL if sse else None
        exchange.on_body = _CHUNK_WRITER(transport, forward, tail, _HIGH_WATER)
    else:
        exchange.on_body = forward
    return forward


StreamTarget = tuple[asyncio.Transport, ClientWriter, bool]  # transport, writer, chunked


class ClientPort(Protocol):
    """Where a ``ClientAnswer`` writes. Each method raises ConnectionError when the client
    has gone; none waits for the client's socket to drain."""

    def open_stream(self, status: int, headers: CIMultiDict[str]) -> StreamTarget:
        """Write the head of a streamed answer; what its reads are forwarded to."""

    def write_whole(self, status: int, headers: CIMultiDict[str], body: bytes) -> None:
        """Write a whole answer (head and body) at once."""


class ClientAnswer:
    """The client's answer to one primary; see the module docstring."""

    __slots__ = ("_forwarder", "_port", "_proxied", "_whole", "began", "bytes_after_done", "ended")

    def __init__(self, port: ClientPort, proxied: ProxiedRequest) -> None:
        self._port = port
        self._proxied = proxied
        self._forwarder: ChunkForwarder | None = None
        self._whole: tuple[int, CIMultiDict[str]] | None = None
        self.began = False  # the client has the answer's head
        self.ended = False  # ... and its clean end
        self.bytes_after_done = 0  # what the upstream sent after its [DONE] (not relayed)

    def begin(self, ex: Exchange) -> None:
        """The upstream's head is in: the client's head now (a stream) or at the end."""
        proxied = self._proxied
        filtering = proxied.drop_event is not None and proxied.upstream.stream and ex.status < 400
        out = client_headers(ex.headers, proxied.request_id, proxied.decision.primary)
        length = None if filtering else ex.headers.get("Content-Length")
        if ex.status in BODILESS or (length is not None and length.isdigit()):
            self._whole = (ex.status, out)
            return
        self.began = True
        transport, writer, chunked = self._port.open_stream(ex.status, out)
        drop = proxied.drop_event if filtering else None
        self._forwarder = attach_forwarder(transport, writer, ex, drop=drop, chunked=chunked)

    def end(self, ex: Exchange) -> None:
        """The upstream body ended cleanly: end the client's answer."""
        forward = self._forwarder
        if forward is not None:  # the bytes are out already, its end too
            forward.finish()
            self.bytes_after_done = forward.bytes_after_done
        elif self._whole is not None:
            self.began = True
            self._port.write_whole(*self._whole, b"".join(data for _, data in ex.chunks))
        self.ended = True

    def stop(self) -> None:
        """The exchange is over, however it ended."""
        if self._forwarder is not None:
            self._forwarder.stop()
            self.bytes_after_done = self._forwarder.bytes_after_done


class ClientConnection(ClientWriter, Protocol):
    """What ``ConnectionPort`` needs of the server's connection (``proxy.lean``)."""

    transport: asyncio.Transport | None
    head_sent: bool  # the current answer's head has been written


class ConnectionPort:
    """``ClientPort`` on the server's connection (``proxy.lean``): heads written by hand.

    ``chunked`` False (an HTTP/1.0 client): a stream goes out unframed and ends with the
    connection (``keep_alive`` becomes False)."""

    __slots__ = ("_chunked", "_conn", "keep_alive")

    def __init__(self, conn: ClientConnection, *, keep_alive: bool, chunked: bool) -> None:
        self._conn = conn
        self.keep_alive = keep_alive
        self._chunked = chunked

    def _tail(self) -> str:
        return "" if self.keep_alive else "Connection: close\r\n"

    def _transport(self) -> asyncio.Transport:
        transport = self._conn.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("client disconnected")
        self._conn.head_sent = True
        return transport

    def open_stream(self, status: int, headers: CIMultiDict[str]) -> StreamTarget:
        transport = self._transport()
        if self._chunked:
            framing = "Transfer-Encoding: chunked\r\n" + self._tail()
        else:
            self.keep_alive = False
            framing = self._tail()
        transport.write(response_head(status, headers, framing))
        return transport, self._conn, self._chunked

    def write_whole(self, status: int, headers: CIMultiDict[str], body: bytes) -> None:
        transport = self._transport()
        if status in BODILESS:  # no body and no framing: the client reads none
            transport.write(response_head(status, headers, self._tail()))
        else:
            framing = f"Content-Length: {len(body)}\r\n{self._tail()}"
            transport.write(response_head(status, headers, framing) + body)
