"""The proxy's HTTP/1.1 server: its connections, each serving every request that comes on it.

``LeanConnection`` is the ``asyncio.Protocol`` of every connection that ``lean_site.LeanSite``
accepts. Its reading half (``intake.RequestReader``) parses requests with ``httptools``
and gives each whole request to this module, or refuses it there (``_refuse``: the
answer, then the connection closes). The three ways a request is served:

- a relayed request (``app.RELAYED``), ``_start``: ``app.plan`` parses the body and picks
  the sides; ``Relay.begin`` writes the primary's upstream request in this same call when
  a pooled connection is idle; only then are the request's ``ProxiedRequest``
  (``app.proxied_request``) and its Task made, whose first steps run at once
  (``runtime.start_eagerly``) and which owns the exchange from there (``_serve``:
  ``Relay.relay_to``). What only the answer or the record needs (the send's stamps and
  counts, the shadow copy) comes after the upstream write;
- a request for one of the proxy's own routes (``routes``), ``_start_own``: its handler
  runs in a Task and its ``Response`` is written whole;
- a refusal (``intake``): written at once, and the connection closes.

``client_answer.ClientAnswer`` writes a relayed answer through ``_LeanPort``: each response
head by hand in one ``transport.write`` (``response_head``: status line, the upstream's
headers as ``client_answer.client_headers`` passes them, ``Date`` and ``Server`` where they
have none, the framing); a stream then goes out read by read through
``client_answer.ChunkForwarder``, with this connection as its writer (``drain``); to an HTTP/1.0 client unchunked, and the connection closes at its end. The
proxy's own answers (``messages.Response``) are written by ``write_response``.

When an answer has ended, the connection closes (no keep-alive, shutdown, an answer
broken off) or reads on: the requests pipelined behind it (``framing.Backlog``) are parsed
then. A client that goes away cancels its request's task, which cancels the primary's
upstream request (``client_cancelled``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Coroutine
from email.utils import formatdate
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, cast

from multidict import CIMultiDict

from specproxy import __version__
from specproxy.core.records.model import Route
from specproxy.log import get_logger
from specproxy.proxy.app import HeaderFacts, ProxiedRequest, plan, proxied_request
from specproxy.proxy.client_answer import ClientAnswer, StreamTarget
from specproxy.proxy.intake import RequestReader
from specproxy.proxy.messages import BODILESS, Request, Response, error_response
from specproxy.proxy.relay import Begun
from specproxy.proxy.routes import Handler
from specproxy.proxy.state import ProxyState
from specproxy.runtime import start_eagerly

if TYPE_CHECKING:
    from specproxy.proxy.lean_site import LeanSite

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


class LeanConnection(RequestReader):
    """One client connection; see the module docstring."""

    __slots__ = ("_closing", "_head_sent", "_paused", "_task", "_writable")

    def __init__(self, site: LeanSite, state: ProxyState, expected_auth: bytes | None) -> None:
        super().__init__(site, state, expected_auth)
        self._task: asyncio.Task[None] | None = None  # the request being served
        self._closing = False
        self._paused = False
        self._writable: asyncio.Future[None] | None = None
        self._head_sent = False  # the current answer's head has been written

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._loop = asyncio.get_running_loop()
        self._idle_since = self._loop.time()
        self._site.connections.add(self)

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

    # the three ways a request is served

    def _start(
        self,
        route: Route,
        facts: HeaderFacts | Response,
        body: bytes,
        keep_alive: bool,
        chunked: bool,
    ) -> None:
        """Decide, write the primary's request in this call if a pooled connection is idle
        (``Relay.begin``), then serve the rest in a Task begun at once: the upstream request
        does not wait for any of what only the answer needs."""
        self._busy = True
        state = self._state
        relay = state.relay
        assert relay is not None
        decided: ProxiedRequest | Response | Exception
        begun = None
        try:
            planned = plan(state, route, facts, body, state.clock.now_us())
            if isinstance(planned, Response):
                decided = planned
            else:
                begun = relay.begin(planned.decision.primary, planned.upstream)
                decided = proxied_request(state, planned)
        except Exception as exc:  # a bug: ``_serve`` answers it
            decided = exc
        port = _LeanPort(self, keep_alive=keep_alive, chunked=chunked)
        self._run(self._serve(decided, begun, port))

    def _start_own(self, handler: Handler, request: Request, keep_alive: bool) -> None:
        """Run an own route's handler; its answer is written whole."""
        self._busy = True
        port = _LeanPort(self, keep_alive=keep_alive, chunked=True)
        self._run(self._serve(handler(self._state, request), None, port))

    def _refuse(self, response: Response) -> None:
        """Answer ``response`` and close the connection; nothing more of it is read. Bytes
        that are not HTTP are logged (one line: the status, nothing of the bytes)."""
        if response.status == 400:
            get_logger().warning("request_refused", status=400)
        self.write_response(response, keep_alive=False)
        if self.transport is not None:
            self.transport.close()
        self._forget()

    def _run(self, serving: Coroutine[Any, Any, None]) -> None:
        task = start_eagerly(serving)
        if self._busy and self._task is None:  # not answered already in its first steps
            self._task = task  # (nor followed by a pipelined request that is now served)

    async def _serve(
        self,
        decided: ProxiedRequest | Response | Awaitable[Response] | Exception,
        begun: Begun | None,
        port: _LeanPort,
    ) -> None:
        """Answer the request: relay it (a ``ProxiedRequest``), or write a ``Response``, an
        own route's when its handler has made it (``decided`` awaitable)."""
        self._head_sent = False
        keep_alive = port.keep_alive
        try:
            if isinstance(decided, Exception):
                if begun is not None:  # written, then the bug: the upstream request stops
                    begun.exchange.abort()
                raise decided
            if isinstance(decided, Awaitable):
                decided = await decided
            if isinstance(decided, Response):
                self.write_response(decided, keep_alive=keep_alive)
            else:
                relay = self._state.relay
                assert relay is not None
                answer = ClientAnswer(port, decided)
                m = await relay.relay_to(decided, answer, begun)
                keep_alive = port.keep_alive
                if not answer.began:
                    assert m is not None
                    self.write_response(relay.failure_response(decided, m), keep_alive=keep_alive)
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

    def write_response(self, resp: Response, *, keep_alive: bool) -> None:
        """One of the proxy's own whole answers."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        framing = f"Content-Length: {len(resp.body)}\r\n"
        if not keep_alive or resp.close:
            framing += "Connection: close\r\n"
            self._closing = True
        self._head_sent = True
        transport.write(response_head(resp.status, resp.headers, framing) + resp.body)

    # the site's

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

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The request being served, if any."""
        return self._task

    def cancel(self) -> None:
        """Shutdown, past the drain: cut the request under way, close the connection."""
        if self._task is not None:
            self._task.cancel()
        if self.transport is not None:
            self.transport.close()

    # client_answer.ClientWriter

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
    """``client_answer.ClientPort`` on a ``LeanConnection``: heads written by hand.

    ``chunked`` False (an HTTP/1.0 client): a stream goes out unframed and ends with the
    connection (``keep_alive`` becomes False)."""

    __slots__ = ("_chunked", "_conn", "keep_alive")

    def __init__(self, conn: LeanConnection, *, keep_alive: bool, chunked: bool) -> None:
        self._conn = conn
        self.keep_alive = keep_alive
        self._chunked = chunked

    def _tail(self) -> str:
        return "" if self.keep_alive else "Connection: close\r\n"

    def _transport(self) -> asyncio.Transport:
        transport = self._conn.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("client disconnected")
        self._conn._head_sent = True
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
