"""A lean HTTP/1.1 server for the relayed routes; every other request goes to aiohttp.

Why: of the proxy's own CPU per relayed request, most was aiohttp's work between a
request's arrival and its handler (parsing into a ``web.Request``, the handler task,
middlewares) and the preparation of the response head. ``LeanConnection`` is an
``asyncio.Protocol`` that parses requests with ``httptools`` and serves the relayed
routes (``app.RELAYED``) itself: the body is read whole, ``app.plan`` parses it and picks
the sides (the code the aiohttp handlers run through ``app.decide_request``), ``Relay.relay_to``
relays the primary, and ``client_answer.ClientAnswer`` writes the answer through this
module's port: each response head by hand in one ``transport.write`` (status line, the
upstream's headers as ``client_sink.client_headers`` passes them, ``Date`` and ``Server``
where they have none, as aiohttp adds them, the framing); a stream then goes out read by
read through ``client_sink.ChunkForwarder``. The proxy's own answers on these
routes (a body it cannot use, an unreachable primary) have the status and body the
aiohttp handlers give them (``app.plan``, ``Relay.failure_response``).

Everything else is handed to the aiohttp application unchanged, on the same connection:
the connection gets one of aiohttp's own request handlers (from the runner's
``web.Server``, as aiohttp's sites make them), which is given the transport and the
bytes of the request read so far; from then on aiohttp owns the connection. Handed off
are: every other route and method; a query string or an escaped path; HTTP/1.0; an
``Expect``, ``Upgrade``, ``Transfer-Encoding`` or ``Content-Encoding`` header; no
``Content-Length``; a body over the limit (aiohttp answers 413); a wrong or missing API
key (aiohttp answers 401); bytes ``httptools`` cannot parse (aiohttp answers 400);
and every request when a primary's backend cannot stream at transport level.

A relayed request's upstream request is written in the call that read the client's:
``app.plan``, then ``Relay.begin`` on an idle pooled connection, and only then the request's
``ProxiedRequest`` (``app.proxied_request``) and its Task, whose first steps run at once
(``start_eagerly``) and which owns the exchange from there. What only the answer or the
record needs (the send's stamps and counts, the shadow copy) comes after the upstream write.

A request head seen before is not parsed again: ``head_key`` (the head less its
``Content-Length`` value) finds what was read from it the first time (route, keep-alive,
``app.HeaderFacts``), when the whole request is in one read. Only heads served here,
whose headers ``plan`` could use, are kept; clients send the same head on every
request but for its length. Measured on the development machine, arrival to upstream
write (p50, ``bench/request_path.py``): 901 to 453 us at 1 stream, 377 to 133 us at 16
streams.

A request that arrives while another is being served (pipelining) waits and is parsed
when the answer has ended (``proxy.intake.Backlog``: served from an offset; reading
pauses past ``MAX_PIPELINED_BYTES``). A head over ``core.limits`` is handed to aiohttp,
whose parser has the same limits and answers 400 (``proxy.intake.HeadGauge``); a closed
connection drops its parser and buffers at once (no cycle is left for the collector). A client that goes away cancels its request's task, which
cancels the primary's upstream request (``client_cancelled``), as aiohttp's
``handler_cancellation`` does. At shutdown ``LeanSite.stop`` stops listening and closes
the idle connections; the busy ones close when their answer ends or the drain cuts it.
A keep-alive connection idle for ``IDLE_S`` is closed, as aiohttp closes its own, and so
is one whose request began arriving ``IDLE_S`` ago and is still not whole.
"""

from __future__ import annotations

import asyncio
import contextvars
import hmac
import sys
from collections.abc import Coroutine, Generator
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import httptools
from aiohttp import web
from multidict import CIMultiDict

from specproxy.core.model import Route
from specproxy.log import get_logger
from specproxy.proxy.app import RELAYED, HeaderFacts, header_facts, plan, proxied_request
from specproxy.proxy.client_answer import ClientAnswer, StreamTarget
from specproxy.proxy.intake import Backlog, HeadGauge, TooLarge, head_key
from specproxy.proxy.policy import ProxiedRequest
from specproxy.proxy.relay import Begun
from specproxy.proxy.response_head import BODILESS, response_head
from specproxy.proxy.responses import error_response
from specproxy.proxy.state import ProxyState
from specproxy.runtime import spawn

IDLE_S = 3630.0  # an idle keep-alive connection is closed after this long (aiohttp's default)
_SWEEP_S = 60.0  # how often idle connections are looked for
T = TypeVar("T")
_HANDED_OFF_HEADERS = frozenset({b"expect", b"upgrade", b"transfer-encoding", b"content-encoding"})
_RELAYED = {(m.encode(), p.encode()): r for (m, p), r in RELAYED.items()}


KNOWN_HEADS = 1024  # request heads kept (``LeanSite.heads``); all dropped when full


@dataclass(frozen=True, slots=True)
class _KnownHead:
    """A request head served here before: its route, keep-alive and headers as read."""

    route: Route
    keep_alive: bool
    facts: HeaderFacts


class _HandOff(Exception):
    """Raised inside a parser callback: this request is for aiohttp."""


class _Complete(Exception):
    """Raised inside ``on_message_complete``: stop parsing at the end of this request."""


_DEAD_PARSER = httptools.HttpRequestParser(object())  # a closed connection's: holds nothing


_NOTHING: Any = object()


class _Begun(Coroutine[Any, Any, T]):
    """A coroutine whose first steps have already run, handed on to a Task (``start_eagerly``).

    The Task's first ``send`` gets what the coroutine yielded then (the future it waits
    on), or its result; from then on every call goes to the coroutine itself, a
    cancellation included, even one that comes before the Task's first step."""

    __slots__ = ("_coro", "_exc", "_pending", "_result")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self._pending: Any = _NOTHING
        self._result: Any = _NOTHING
        self._exc: BaseException | None = None

    def begin(self) -> None:
        try:
            self._pending = self._coro.send(None)
        except StopIteration as stop:
            self._result = stop.value
        except BaseException as exc:  # raised again in the Task
            self._exc = exc

    def send(self, value: Any) -> Any:
        pending, self._pending = self._pending, _NOTHING
        if pending is not _NOTHING:
            return pending
        if self._exc is not None:
            exc, self._exc = self._exc, None
            raise exc
        if self._result is not _NOTHING:
            result, self._result = self._result, _NOTHING
            raise StopIteration(result)
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._pending = _NOTHING  # the Task will not wait on it: the coroutine is told instead
        if val is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, T]:
        raise NotImplementedError("only a Task drives it")


def start_eagerly(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A Task for ``coro`` whose first steps run now, up to its first wait, as its Task.

    So a relayed request's upstream request is written in the same call that read the
    client's request, not after the rest of the event loop's turn. Python 3.12 and later
    have this built in (``eager_start``); on 3.11 the Task is entered by hand with
    asyncio's own ``_enter_task`` / ``_leave_task``, and where those are missing it is a
    plain ``create_task`` (correct, only not eager). Inside a running Task it is a plain
    ``create_task``.
    """
    loop = asyncio.get_running_loop()
    if asyncio.current_task(loop) is not None:
        return loop.create_task(coro)
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
    enter = getattr(asyncio.tasks, "_enter_task", None)
    leave = getattr(asyncio.tasks, "_leave_task", None)
    if enter is None or leave is None:
        return loop.create_task(coro)
    begun = _Begun(coro)
    context = contextvars.copy_context()
    task = loop.create_task(begun, context=context)
    enter(loop, task)
    try:
        context.run(begun.begin)
    finally:
        leave(loop, task)
    return task


class LeanSite(web.TCPSite):
    """``web.TCPSite`` whose connections are ``LeanConnection``s (registered with the runner,
    so ``runner.cleanup`` stops it first, as it stops any site)."""

    __slots__ = ("_state", "_sweeper", "connections", "heads")
    relays = True  # False: every request goes to aiohttp (a differential test's reference)

    def __init__(self, runner: web.AppRunner, state: ProxyState, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        self._state = state
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[LeanConnection] = set()
        self.heads: dict[bytes, _KnownHead] = {}  # by ``head_key``

    async def start(self) -> None:
        """Listen, like ``TCPSite.start``, with ``LeanConnection`` as the protocol."""
        self._runner._reg_site(self)
        loop = asyncio.get_running_loop()
        aiohttp_server = self._runner.server
        assert aiohttp_server is not None
        state = self._state
        lean = self.relays and state.relay is not None
        expected = f"Bearer {state.config.api_key}".encode() if state.config.api_key else None

        def factory() -> LeanConnection:
            return LeanConnection(self, state, aiohttp_server, lean=lean, expected_auth=expected)

        self._server = await loop.create_server(
            factory,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        self._bound_port = self._server.sockets[0].getsockname()[1]
        self._sweeper = spawn(self._sweep(), name="lean-idle-sweep")

    async def _sweep(self) -> None:
        """Close keep-alive connections idle for more than ``IDLE_S``, as aiohttp does."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(_SWEEP_S)
            limit = loop.time() - IDLE_S
            for conn in list(self.connections):
                conn.close_if_idle_since(limit)

    async def stop(self) -> None:
        """Stop listening; close the idle connections, the busy ones once their answer ends."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        await super().stop()
        for conn in list(self.connections):
            conn.close_when_idle()


class LeanConnection(asyncio.Protocol):
    """One client connection: relayed requests served here, the rest handed to aiohttp."""

    __slots__ = (
        "_aiohttp",
        "_backlog",
        "_body",
        "_busy",
        "_closing",
        "_expected_auth",
        "_gauge",
        "_head_sent",
        "_headers",
        "_idle_since",
        "_lean",
        "_length",
        "_loop",
        "_parser",
        "_paused",
        "_received",
        "_route",
        "_site",
        "_state",
        "_task",
        "_url",
        "_writable",
        "chunked",
        "transport",
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
        self._site = site
        self._state = state
        self._aiohttp = aiohttp_server
        self._lean = lean
        self._expected_auth = expected_auth
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._received: list[bytes] = []  # the current request's bytes so far
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._body: list[bytes] = []
        self._url = b""
        self._route: Route | None = None
        self._length = -1  # the Content-Length, -1 until one is read
        self._task: asyncio.Task[None] | None = None  # the request being served
        self._busy = False  # a request is being served (its first steps may have ended it)
        self._backlog = Backlog()  # bytes that arrived while a request was being served
        self._gauge = HeadGauge()  # the current request head against the limits
        self._closing = False
        self._paused = False
        self._writable: asyncio.Future[None] | None = None
        self._idle_since = 0.0
        self._head_sent = False  # the current answer's head has been written
        self.chunked = True  # ``client_sink.ClientWriter``

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._loop = asyncio.get_running_loop()
        self._idle_since = self._loop.time()
        self._site.connections.add(self)
        if not self._lean:
            self._hand_off(b"")

    def data_received(self, data: bytes) -> None:
        if self._busy or self._backlog:  # pipelined: parsed when the current answer has ended
            self._backlog.hold(data, self.transport)
            return
        self._take(data, 0)

    def _take(self, data: bytes, at: int) -> None:
        """Read a request from ``data[at:]`` (the next bytes of the connection)."""
        if not self._received:  # a request begins: its wait for the rest counts from here
            self._idle_since = self._loop.time()
            if self._serve_known(data, at):
                return
        if at:
            data = data[at:]
        self._received.append(data)
        try:
            self._parser.feed_data(data)
        except _HandOff:
            self._hand_off(b"".join(self._received))
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Complete):
                self._complete()
            elif isinstance(exc.__context__, TooLarge):
                self._refuse()
            else:
                self._hand_off(b"".join(self._received))
        except httptools.HttpParserError:  # aiohttp answers it (400) and closes
            self._hand_off(b"".join(self._received))
        else:
            if not self._gauge.done and self._gauge.over(data):
                self._refuse()

    def _refuse(self) -> None:
        """A head over the limits: aiohttp, whose parser has the same ones (``core.limits``),
        answers its 400 and closes; only the bytes up to the limit were kept."""
        self._hand_off(b"".join(self._received))

    def _forget(self) -> None:
        """Drop what the connection holds (the parser refers back to it: a cycle that only
        the cyclic collector would free, with every byte held in it)."""
        self._parser = _DEAD_PARSER
        self._received, self._body, self._headers = [], [], CIMultiDict()
        self._backlog.clear()

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

    # httptools callbacks

    def on_url(self, url: bytes) -> None:
        self._url += url  # it may come in pieces
        self._gauge.on_url(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        self._gauge.on_header(lower, value)
        if self._gauge.doubled:  # aiohttp answers 400 at once, finished head or not
            raise _HandOff
        if lower in _HANDED_OFF_HEADERS:
            raise _HandOff
        if lower == b"content-length":
            if not value.isdigit() or self._length >= 0:  # a second one: aiohttp refuses it
                raise _HandOff
            self._length = int(value)
        elif (
            lower == b"authorization"
            and self._expected_auth is not None
            and not hmac.compare_digest(value, self._expected_auth)
        ):
            raise _HandOff  # aiohttp's middleware answers 401
        self._headers.add(
            name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape")
        )

    def on_headers_complete(self) -> None:
        self._gauge.done = True
        if not self._gauge.usable:
            raise _HandOff  # no Host (RFC 9112 section 3.2), or a header twice: aiohttp's 400
        parser = self._parser
        route = _RELAYED.get((parser.get_method(), self._url))
        if route is None or parser.get_http_version() != "1.1":
            raise _HandOff
        if not 0 <= self._length <= self._state.config.max_body_bytes:
            raise _HandOff  # no Content-Length, or more than the limit: aiohttp answers
        if self._expected_auth is not None and "Authorization" not in self._headers:
            raise _HandOff
        self._route = route

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        raise _Complete

    # serving

    def _serve_known(self, data: bytes, at: int) -> bool:
        """Serve the request in ``data[at:]`` without parsing it, if its head is one served
        here before (``LeanSite.heads``) and its body is all in; False when it is not."""
        head_end = data.find(b"\r\n\r\n", at)
        if head_end < 0:
            return False
        found = head_key(data, head_end, at)
        if found is None:
            return False
        known = self._site.heads.get(found[0])
        length = found[1]
        size = head_end + 4 + length
        if known is None or size > len(data) or length > self._state.config.max_body_bytes:
            return False
        self._backlog.keep(data, size)  # served from there on, without a copy
        self._start(known.route, known.facts, data[head_end + 4 : size], known.keep_alive)
        return True

    def _complete(self) -> None:
        """A whole relayed request is in: serve it; bytes after it wait for the answer's end."""
        received = b"".join(self._received)
        body = b"".join(self._body)
        head_end = received.find(b"\r\n\r\n")
        size = head_end + 4 + self._length
        if head_end < 0 or size > len(received) or received[head_end + 4 : size] != body:
            self._hand_off(received)  # not framed as this parser read it: aiohttp decides
            return
        self._backlog.keep(received, size)
        keep_alive = self._parser.should_keep_alive()
        route, headers = self._route, self._headers
        assert route is not None
        self._received, self._body, self._headers = [], [], CIMultiDict()
        self._url, self._route, self._length = b"", None, -1
        self._gauge = HeadGauge()
        self._parser = httptools.HttpRequestParser(self)
        facts = header_facts(self._state.config, headers, shared=True)
        found = head_key(received, head_end)
        if found is not None and isinstance(facts, HeaderFacts):  # not one ``plan`` refuses
            heads = self._site.heads
            if len(heads) >= KNOWN_HEADS:
                heads.clear()
            heads[found[0]] = _KnownHead(route, keep_alive, facts)
        self._start(route, facts, body, keep_alive)

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

    # client_sink.ClientWriter

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
