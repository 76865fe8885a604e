"""The lean HTTP/1.1 server's connections: relayed requests served here, the rest by aiohttp.

``LeanConnection`` is the ``asyncio.Protocol`` of every connection that ``lean_site.LeanSite``
accepts. Its reading half (``intake.RequestReader``) parses requests with ``httptools``
and gives each whole request on a relayed route (``app.RELAYED``) to ``_start``; this
module serves it. The body is read whole; ``app.plan`` parses it and picks the sides (the
code the aiohttp handlers run through ``app.decide_request``); ``Relay.begin`` writes the
primary's upstream request in this same call when a pooled connection is idle; only then
are the request's ``ProxiedRequest`` (``app.proxied_request``) and its Task made, whose
first steps run at once (``runtime.start_eagerly``) and which owns the exchange from
there (``_serve``: ``Relay.relay_to``). What only the answer or the record needs (the
send's stamps and counts, the shadow copy) comes after the upstream write.

``client_answer.ClientAnswer`` writes the answer through ``_LeanPort``: each response head
by hand in one ``transport.write`` (``response_head``: status line, the upstream's headers
as ``client_answer.client_headers`` passes them, ``Date`` and ``Server`` where they have
none, as aiohttp adds them, the framing); a stream then goes out read by read through
``client_answer.ChunkForwarder``, with this connection as its writer (``drain``,
``set_eof``). The proxy's own answers on these routes (a body it cannot use, an
unreachable primary) have the status and body the aiohttp handlers give them
(``app.plan``, ``Relay.failure_response``), written by ``write_response``.

Everything else is handed to the aiohttp application unchanged, on the same connection
(``_hand_off``): the connection gets one of aiohttp's own request handlers (from the
runner's ``web.Server``, as aiohttp's sites make them), which is given the transport and
the bytes of the request read so far; from then on aiohttp owns the connection. Handed
off are: every other route and method; a query string or an escaped path; HTTP/1.0; an
``Expect``, ``Upgrade``, ``Transfer-Encoding`` or ``Content-Encoding`` header; no
``Content-Length``; a body over the limit (aiohttp answers 413); a wrong or missing API
key (aiohttp answers 401); a head over ``core.protocol.limits`` or bytes ``httptools`` cannot
parse (aiohttp answers 400); and every request when a primary's backend cannot stream at
transport level.

When an answer has ended, the connection closes (no keep-alive, shutdown, an answer
broken off) or reads on: the requests pipelined behind it (``intake.Backlog``) are parsed
then. A client that goes away cancels its request's task, which cancels the primary's
upstream request (``client_cancelled``), as aiohttp's ``handler_cancellation`` does.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, cast

from aiohttp import web
from multidict import CIMultiDict

from specproxy.core.records.model import Route
from specproxy.log import get_logger
from specproxy.proxy.app import HeaderFacts, plan, proxied_request
from specproxy.proxy.client_answer import ClientAnswer, StreamTarget
from specproxy.proxy.intake import RequestReader
from specproxy.proxy.policy import ProxiedRequest
from specproxy.proxy.relay import Begun
from specproxy.proxy.response_head import BODILESS, response_head
from specproxy.proxy.responses import error_response
from specproxy.proxy.state import ProxyState
from specproxy.runtime import start_eagerly

if TYPE_CHECKING:
    from specproxy.proxy.lean_site import LeanSite


class LeanConnection(RequestReader):
    """One client connection: relayed requests served here, the rest handed to aiohttp."""

    __slots__ = (
        "_aiohttp",
        "_closing",
        "_head_sent",
        "_lean",
        "_paused",
        "_task",
        "_writable",
        "chunked",
    )

    def __init__(
        self,
        site: LeanSite,
        state: ProxyState,
        aiohttp_server: web.Server,
        *,
        lean: bool,
        expected_auth: bytes | None,
    ) -> None:
        super().__init__(site, state, expected_auth)
        self._aiohttp = aiohttp_server
        self._lean = lean
        self._task: asyncio.Task[None] | None = None  # the request being served
        self._closing = False
        self._paused = False
        self._writable: asyncio.Future[None] | None = None
        self._head_sent = False  # the current answer's head has been written
        self.chunked = True  # ``client_answer.ClientWriter``

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._loop = asyncio.get_running_loop()
        self._idle_since = self._loop.time()
        self._site.connections.add(self)
        if not self._lean:
            self._hand_off(b"")

    def connection_lost(self, exc: Exception | None) -> None:
        self._site.connections.discard(self)
        if self._busy and self._task is not None:
            self._task.cancel()  # the primary's upstream request stops at once
        self._forget()
        self.resume_writing()  # a drain waiting finds the transport gone

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        waiter, self._writable = self._writable, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _start(
        self, route: Route, facts: HeaderFacts | web.Response, body: bytes, keep_alive: bool
    ) -> None:
        """Decide, write the primary's request in this call if a pooled connection is idle
        (``Relay.begin``), then serve the rest in a Task begun at once: the upstream request
        does not wait for any of what only the answer needs."""
        self._busy = True
        state = self._state
        relay = state.relay
        assert relay is not None
        decided: ProxiedRequest | web.Response | Exception
        begun = None
        try:
            planned = plan(state, route, facts, body, state.clock.now_us())
            if isinstance(planned, web.Response):
                decided = planned
            else:
                begun = relay.begin(planned.decision.primary, planned.upstream)
                decided = proxied_request(state, planned)
        except Exception as exc:  # a bug: ``_serve`` answers it
            decided = exc
        task = start_eagerly(self._serve(decided, begun, keep_alive))
        if self._busy and self._task is None:  # not answered already in its first steps
            self._task = task  # (nor followed by a pipelined request that is now served)

    async def _serve(
        self,
        decided: ProxiedRequest | web.Response | Exception,
        begun: Begun | None,
        keep_alive: bool,
    ) -> None:
        relay = self._state.relay
        assert relay is not None
        self._head_sent = False
        try:
            if isinstance(decided, Exception):
                if begun is not None:  # written, then the bug: the upstream request stops
                    begun.exchange.abort()
                raise decided
            if isinstance(decided, web.Response):
                self.write_response(decided, keep_alive=keep_alive)
            else:
                proxied = decided
                answer = ClientAnswer(_LeanPort(self, keep_alive=keep_alive), proxied)
                m = await relay.relay_to(proxied, answer, begun)
                if not answer.began:
                    assert m is not None
                    self.write_response(relay.failure_response(proxied, m), keep_alive=keep_alive)
                elif not answer.ended:  # broken off mid-body: so is the client's connection
                    keep_alive = False
        except asyncio.CancelledError:  # the client went away, or the drain cut it
            keep_alive = False
        except Exception as exc:  # a bug: one line, a 500 if nothing was sent yet, the end
            get_logger().error("request_handler_failed", status=500, reason=type(exc).__name__)
            if not self._head_sent:
                text = "the proxy failed to handle the request"
                resp = error_response(500, text, type_="internal_error", code="internal_error")
                self.write_response(resp, keep_alive=False)
            keep_alive = False
        finally:
            self._task, self._busy = None, False
        self._answered(keep_alive)

    def _answered(self, keep_alive: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if not keep_alive or self._closing:
            transport.close()
            return
        data, at = self._backlog.take()
        if at < len(data):
            self._take(data, at)
        else:
            self._idle_since = self._loop.time()
        if not self._backlog:
            transport.resume_reading()  # all that was held is served (or being served)

    def write_response(self, resp: web.Response, *, keep_alive: bool) -> None:
        """One of the proxy's own whole responses (an error), as aiohttp would write it."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        body = cast(bytes, resp.body)
        headers = CIMultiDict(resp.headers)
        framing = f"Content-Length: {len(body)}\r\n"
        if not keep_alive or resp.keep_alive is False:
            framing += "Connection: close\r\n"
            self._closing = True
        self._head_sent = True
        transport.write(response_head(resp.status, headers, framing) + body)

    def _hand_off(self, received: bytes) -> None:
        """aiohttp takes the connection over, with the request's bytes read so far."""
        transport = self.transport
        assert transport is not None
        self._site.connections.discard(self)
        self.transport = None
        self._forget()
        handler = self._aiohttp()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if received:
            handler.data_received(received)

    def close_when_idle(self) -> None:
        """Shutdown: close now if no request is under way, else once its answer has ended."""
        self._closing = True
        transport = self.transport
        if transport is not None and not self._busy and not self._received:
            transport.close()

    def close_if_idle_since(self, limit: float) -> None:
        """Close the connection if nothing has happened on it since ``limit``: no request
        under way, or one whose head and body have been arriving since before it (a
        client that stopped half-way holds no connection for ever)."""
        transport = self.transport
        if transport is not None and not self._busy and self._idle_since < limit:
            transport.close()

    # client_answer.ClientWriter

    def set_eof(self) -> None:
        """The answer has ended (nothing to do: ``ChunkForwarder`` wrote its end)."""

    async def drain(self) -> None:
        """Wait until the transport's buffer has gone below its high-water mark."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("client disconnected")
        if not self._paused:
            return
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._writable)
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("client disconnected")


class _LeanPort:
    """``client_answer.ClientPort`` on a ``LeanConnection``: heads written by hand."""

    __slots__ = ("_conn", "_keep_alive")
    waits_on_client = False  # the head and the end are written at once, never drained

    def __init__(self, conn: LeanConnection, *, keep_alive: bool) -> None:
        self._conn = conn
        self._keep_alive = keep_alive

    def _tail(self) -> str:
        return "" if self._keep_alive else "Connection: close\r\n"

    def _transport(self) -> asyncio.Transport:
        transport = self._conn.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("client disconnected")
        self._conn._head_sent = True
        return transport

    async def open_stream(self, status: int, headers: CIMultiDict[str]) -> StreamTarget:
        transport = self._transport()
        framing = "Transfer-Encoding: chunked\r\n" + self._tail()
        transport.write(response_head(status, headers, framing))
        return transport, self._conn, True

    async def close_stream(self, body: bytes) -> None:
        """Nothing left: the forwarder wrote the last chunk."""

    async def write_whole(self, status: int, headers: CIMultiDict[str], body: bytes) -> None:
        transport = self._transport()
        if status in BODILESS:  # no body and no framing: the client reads none
            transport.write(response_head(status, headers, self._tail()))
        else:
            framing = f"Content-Length: {len(body)}\r\n{self._tail()}"
            transport.write(response_head(status, headers, framing) + body)
