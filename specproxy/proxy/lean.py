"""The proxy's HTTP/1.1 server: its connections, each serving every request that comes on it.

``LeanConnection`` is the ``asyncio.Protocol`` of every connection that ``lean_site.LeanSite``
accepts. Its reading half (``intake.RequestReader``) parses requests with ``httptools``
and gives each whole request to this module, or refuses it there (``_refuse``: the
answer, then the connection closes). The three ways a request is served:

- a relayed request (``routes.RELAYED``), ``_start``: ``plan`` parses the body, picks the
  sides and shapes the upstream body (``core.protocol.shaping``, ``core.load.sides``);
  ``Relay.begin`` writes the primary's upstream request in this same call when
  a pooled connection is idle; only then are the request's ``ProxiedRequest``
  (``proxied_request``) and its Task made, whose first steps run at once
  (``runtime.start_eagerly``) and which owns the exchange from there (``_serve``:
  ``Relay.relay_to``). What only the answer or the record needs (the send's stamps and
  counts, the shadow copy) comes after the upstream write;
- a request for one of the proxy's own routes (``routes``), ``_start_own``: its handler
  runs in a Task and its ``Response`` is written whole;
- a refusal (``intake``): written at once, and the connection closes.

``client_answer.ClientAnswer`` writes a relayed answer on this connection through a
``client_answer.ConnectionPort`` (the head by hand, then the stream read by read, with
this connection as its writer: ``drain``; to an HTTP/1.0 client unchunked, and the
connection closes at its end). The proxy's own answers (``messages.Response``) are
written by ``write_response``, with the same head writer (``client_answer.response_head``).

When an answer has ended, the connection closes (no keep-alive, shutdown, an answer
broken off) or reads on: the requests pipelined behind it (``Backlog``) are parsed
then. A client that goes away cancels its request's task, which cancels the primary's
upstream request (``client_cancelled``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import httptools
from multidict import CIMultiDict

from specproxy.backends.base import UpstreamRequest
from specproxy.core.load.sides import Decision, sticky_user
from specproxy.core.protocol.headers import HeaderFacts, HeaderProblem
from specproxy.core.protocol.injected_events import EventFilter
from specproxy.core.protocol.limits import MAX_PIPELINED_BYTES
from specproxy.core.protocol.shaping import (
    NO_INJECTION,
    BadRequest,
    is_streaming,
    parse_body,
    plan_upstream,
    requested_temperature,
)
from specproxy.core.records.model import Route
from specproxy.log import get_logger
from specproxy.proxy.client_answer import ClientAnswer, ConnectionPort, response_head
from specproxy.proxy.intake import RequestReader
from specproxy.proxy.messages import Request, Response, bad_request, error_response
from specproxy.proxy.relay import Begun, ProxiedRequest
from specproxy.proxy.routes import Handler
from specproxy.proxy.state import ProxyState
from specproxy.runtime import RequestIds, start_eagerly

if TYPE_CHECKING:
    from specproxy.proxy.lean_site import LeanSite

_DEAD_PARSER = httptools.HttpRequestParser(object())  # a closed connection's: holds nothing


class Backlog:
    """Bytes pipelined behind a request in flight, parsed when its answer has ended: ``data``
    from ``at`` (no copy of the rest per request), then ``more`` (later reads); past
    ``MAX_PIPELINED_BYTES`` the connection stops reading until they are served."""

    __slots__ = ("at", "data", "more", "more_size")

    def __init__(self) -> None:
        self.data = b""
        self.at = 0
        self.more: list[bytes] = []
        self.more_size = 0

    def __bool__(self) -> bool:
        return bool(self.data) or bool(self.more)

    def hold(self, data: bytes, transport: asyncio.Transport | None) -> None:
        """A read while a request is served: kept; reading pauses past the limit."""
        self.more.append(data)
        self.more_size += len(data)
        held = self.more_size + len(self.data) - self.at
        if held > MAX_PIPELINED_BYTES and transport is not None:
            transport.pause_reading()  # read on once what is held has been served

    def keep(self, data: bytes, at: int) -> None:
        """``data[at:]`` follows the request being served."""
        if at < len(data):
            self.data, self.at = data, at

    def take(self) -> tuple[bytes, int]:
        """What is held, as (bytes, offset), and nothing left; later reads joined once."""
        data, at = self.data, self.at
        if self.more:
            data = b"".join([data[at:], *self.more])
            at = 0
        self.clear()
        return data, at

    def clear(self) -> None:
        self.data, self.at, self.more, self.more_size = b"", 0, [], 0


_request_ids = RequestIds()


class Planned(NamedTuple):
    """A request ``plan`` has decided, for ``proxied_request`` to make its ``ProxiedRequest``."""

    obj: dict[str, Any]  # the client's body, parsed
    decision: Decision
    upstream: UpstreamRequest
    drop_event: EventFilter | None
    facts: HeaderFacts
    arrived_us: int


def plan(
    state: ProxyState,
    route: Route,
    facts: HeaderFacts | HeaderProblem,
    raw: bytes,
    arrived_us: int,
) -> Planned | Response:
    """Parse a whole request body, decide its sides and shape its upstream body (``core``'s
    ``shaping`` and ``sides``); an error response when it cannot be used. ``facts``:
    ``header_facts`` of its headers (their problem, if any, is answered after the body's: a
    body that cannot be used is named first)."""
    cfg = state.config
    try:
        obj = parse_body(raw)
        stream = is_streaming(obj)
    except BadRequest as exc:
        return bad_request(str(exc), code="invalid_body")
    if isinstance(facts, HeaderProblem):
        return bad_request(facts.message, code=facts.code, param=facts.param)
    sticky = sticky_user(obj) if cfg.sticky_user else facts.sticky
    assert state.policy is not None
    decision = state.policy.decide(forced=facts.forced, sticky=sticky)
    if decision.primary not in state.backends:
        return bad_request(
            f"no {decision.primary} server is configured", code="side_not_configured"
        )
    injection = state.injection  # both sides get one body: mirror takes the AND
    allowed = injection.get(decision.primary, NO_INJECTION)
    if decision.shadow is not None:
        allowed = allowed & injection.get(decision.shadow, NO_INJECTION)
    body = plan_upstream(route, raw, obj, stream=stream, allowed=allowed)
    upstream = UpstreamRequest(route, body.body, stream, facts.upstream)
    return Planned(obj, decision, upstream, body.drop_event, facts, arrived_us)


def proxied_request(state: ProxyState, planned: Planned) -> ProxiedRequest:
    """The ``ProxiedRequest`` of a planned request (counted in the sampling tally): what
    only its answer and records need, so it is made after the upstream write."""
    state.sampling[requested_temperature(planned.upstream.route, planned.obj)] += 1
    facts = planned.facts
    return ProxiedRequest(
        _request_ids(),
        planned.decision,
        planned.upstream,
        planned.drop_event,
        warmup=facts.warmup,
        arrived_us=planned.arrived_us,
        client_body=planned.obj if state.config.record else None,
        category=facts.category,
    )


class LeanConnection(RequestReader):
    """One client connection; see the module docstring."""

    __slots__ = ("_backlog", "_closing", "_paused", "_task", "_writable", "head_sent")

    def __init__(self, site: LeanSite, state: ProxyState, expected_auth: bytes | None) -> None:
        super().__init__(site, state, expected_auth)
        self._backlog = Backlog()  # bytes that arrived while a request was being served
        self._task: asyncio.Task[None] | None = None  # the request being served
        self._closing = False
        self._paused = False
        self._writable: asyncio.Future[None] | None = None
        self.head_sent = False  # the current answer's head has been written

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

    def data_received(self, data: bytes) -> None:
        if self._busy or self._backlog:  # pipelined: parsed when the current answer has ended
            self._backlog.hold(data, self.transport)
            return
        self._take(data, 0)

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
        facts: HeaderFacts | HeaderProblem,
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
        port = ConnectionPort(self, keep_alive=keep_alive, chunked=chunked)
        self._run(self._serve(decided, begun, port))

    def _start_own(self, handler: Handler, request: Request, keep_alive: bool) -> None:
        """Run an own route's handler; its answer is written whole."""
        self._busy = True
        port = ConnectionPort(self, keep_alive=keep_alive, chunked=True)
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

    def _forget(self) -> None:
        """Drop what the connection holds (the parser refers back to it: a cycle that only
        the cyclic collector would free, with every byte held in it)."""
        self._parser = _DEAD_PARSER
        self._received, self._body, self._headers = [], [], CIMultiDict()
        self._backlog.clear()

    def _run(self, serving: Coroutine[Any, Any, None]) -> None:
        task = start_eagerly(serving)
        if self._busy and self._task is None:  # not answered already in its first steps
            self._task = task  # (nor followed by a pipelined request that is now served)

    async def _serve(
        self,
        decided: ProxiedRequest | Response | Awaitable[Response] | Exception,
        begun: Begun | None,
        port: ConnectionPort,
    ) -> None:
        """Answer the request: relay it (a ``ProxiedRequest``), or write a ``Response``, an
        own route's when its handler has made it (``decided`` awaitable)."""
        self.head_sent = False
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
            if not self.head_sent:
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
        self.head_sent = True
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
