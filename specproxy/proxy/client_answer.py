"""The client's answer to a relayed primary: the one writer of it, whichever server serves.

``ClientAnswer`` decides how the upstream's answer goes to the client (``Relay._exchange``
calls ``begin`` when the upstream's head is in, ``end`` when its body ended cleanly, and
``stop`` however it ended):

- headers as the upstream's (``client_sink.client_headers``: framing and hop headers
  out, ``x-specproxy-request-id`` and ``x-specproxy-side`` in);
- an answer with a Content-Length (a unary answer, an error) or without a body (204,
  304) is written whole when it has ended, head and body together: one that fails
  before then is still the proxy's 502;
- any other (a stream) has its head written at once, then every upstream read as it
  arrives, through a ``client_sink.ChunkForwarder`` (one HTTP chunk per read, minus the
  events the proxy itself asked for, which also drops the Content-Length).

Where the bytes go is a ``ClientPort``: ``AiohttpPort`` for aiohttp's server, and
``proxy.lean``'s port for the lean server's connections.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from aiohttp import web
from aiohttp.http_writer import StreamWriter
from multidict import CIMultiDict

from specproxy.backends.exchange import Exchange
from specproxy.proxy.client_sink import (
    ChunkForwarder,
    ClientWriter,
    HeadersWithBody,
    attach_forwarder,
    client_headers,
)
from specproxy.proxy.policy import ProxiedRequest
from specproxy.proxy.response_head import BODILESS

StreamTarget = tuple[asyncio.Transport, ClientWriter, bool]  # transport, writer, chunked


class ClientPort(Protocol):
    """Where a ``ClientAnswer`` writes. Each method raises ConnectionError when the client
    has gone. ``waits_on_client``: a method may wait for the client's socket to drain (the
    relay then also keeps a task-level total deadline)."""

    waits_on_client: bool

    async def open_stream(self, status: int, headers: CIMultiDict[str]) -> StreamTarget | None:
        """Write the head of a streamed answer; what its reads are forwarded to, or None
        when its body can only be written at its end (``close_stream``)."""

    async def close_stream(self, body: bytes) -> None:
        """End a streamed answer (``body``: what was not forwarded, if nothing was)."""

    async def write_whole(self, status: int, headers: CIMultiDict[str], body: bytes) -> None:
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

    @property
    def waits_on_client(self) -> bool:
        return self._port.waits_on_client

    async def begin(self, ex: Exchange) -> None:
        """The upstream's head is in: the client's head now (a stream) or at the end."""
        proxied = self._proxied
        filtering = proxied.drop_event is not None and proxied.stream and ex.status < 400
        out = client_headers(ex.headers, proxied.request_id, proxied.decision.primary)
        length = None if filtering else ex.headers.get("Content-Length")
        if ex.status in BODILESS or (length is not None and length.isdigit()):
            self._whole = (ex.status, out)
            return
        self.began = True
        target = await self._port.open_stream(ex.status, out)
        if target is not None:
            transport, writer, chunked = target
            drop = proxied.drop_event if filtering else None
            self._forwarder = attach_forwarder(transport, writer, ex, drop=drop, chunked=chunked)

    async def end(self, ex: Exchange) -> None:
        """The upstream body ended cleanly: end the client's answer."""
        forward = self._forwarder
        if forward is not None:  # the bytes are out already
            forward.finish()
            self.bytes_after_done = forward.bytes_after_done
            await self._port.close_stream(b"")
        else:
            body = b"".join(data for _, data in ex.chunks)
            if self._whole is not None:
                self.began = True
                await self._port.write_whole(*self._whole, body)
            else:
                await self._port.close_stream(body)
        self.ended = True

    def stop(self) -> None:
        """The exchange is over, however it ended."""
        if self._forwarder is not None:
            self._forwarder.stop()
            self.bytes_after_done = self._forwarder.bytes_after_done


class AiohttpPort:
    """A ``ClientPort`` on aiohttp's server: ``response`` is what the handler returns."""

    __slots__ = ("_request", "response")
    waits_on_client = True  # aiohttp's prepare and write_eof may drain

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response: web.StreamResponse | None = None

    async def open_stream(self, status: int, headers: CIMultiDict[str]) -> StreamTarget | None:
        resp = self.response = web.StreamResponse(status=status, headers=headers)
        await resp.prepare(self._request)
        transport, writer = self._request.transport, self._request.writer
        if transport is None or not isinstance(writer, StreamWriter):
            return None  # its body written at the end
        return transport, writer, writer.chunked

    async def close_stream(self, body: bytes) -> None:
        assert self.response is not None
        await self.response.write_eof(body)

    async def write_whole(self, status: int, headers: CIMultiDict[str], body: bytes) -> None:
        resp = self.response = HeadersWithBody(status=status, headers=headers)
        resp.content_length = len(body)  # (a 204 or 304 has none)
        await resp.prepare(self._request)
        await resp.write_eof(body)
