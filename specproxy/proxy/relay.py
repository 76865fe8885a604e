"""Primary to the client as it arrives; the shadow copy in the background; one record per side.

Owns the per-request flow after the handler has parsed and decided:

1. the shadow copy (mirror mode) is spawned once the primary's request is written (or
   has failed to be), before the primary is awaited, under a
   ``ShadowSupervisor`` that bounds how many run at once (excess copies become one
   ``shadow_dropped`` record each) and cuts each off at the shadow deadline (recorded
   as ``timeout``);
2. the primary's response goes to the client as it arrives: headers as soon as they
   arrive, then every upstream read, minus the events the proxy itself asked for; the
   proxy adds two response headers, ``x-specproxy-request-id`` (the records'
   ``request_id``) and ``x-specproxy-side`` (the side whose answer the client got);
3. each side's Measurement becomes one RequestRecord when it completes
   (``Recorder.write`` appends and flushes; a cleanly ended exchange's record is begun
   at most ``RECORD_DELAY_S`` later, ``recorder.RecordSteps``), so a crash later loses nothing
   but the records of the last ``RECORD_DELAY_S`` and of those still queued behind them.

Every send, primary or shadow, on any backend, is ``Relay._exchange``, the
forward-then-measure loop over the transport seam (``backends.exchange``): the exchange
stamps and keeps each upstream read (``(t_us, bytes)``) as it arrives (on ``http://``
inside the connection's ``data_received``), and, for the primary,
``proxy.client_answer.ClientAnswer``'s forwarder writes it to the client's transport in the same call
(one HTTP chunk; nothing buffered, no task wake-up). The whole response is folded into
its Measurement once, at the end (``backends.exchange.measure_exchange``), and a cleanly
ended one from ``RECORD_DELAY_S`` later, one step per event-loop turn
(``recorder.RecordSteps``), so that the requests that have just arrived are served first.

The shadow never touches the client's response: it owns no part of it, its failures
are measurements, and the client's handler never awaits it. A client that goes away
cancels the primary's upstream request (the backend closes the connection, which makes
SGLang abort) and is recorded as ``client_cancelled``.

The shadow rule: a mirror-mode shadow copy runs on after its client has gone (to the
end or to the shadow deadline), because it measures the candidate under the load the
client created, and cancelling it would bias the candidate towards short requests.
Its record then carries the label ``primary=client_cancelled``; the pair is not
compared (one side failed), but the shadow counts in its side's own figures.

At shutdown, ``drain`` waits for the client requests in flight, then cuts the rest;
those records (and those of shadow copies cut by the shutdown) say ``aborted``, not
``client_cancelled``: nobody went away, the proxy stopped.

Per-chunk cost is a stamp, a list append and one transport write; everything else is
per request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from specproxy import runtime
from specproxy.backends.base import Backend, UpstreamRequest
from specproxy.backends.exchange import (
    TOTAL_DEADLINE,
    Exchange,
    UpstreamFailure,
)
from specproxy.core.load.sides import Decision
from specproxy.core.protocol.headers import REQUEST_ID_HEADER, SIDE_HEADER
from specproxy.core.protocol.injected_events import EventFilter
from specproxy.core.records.model import ErrorKind, Measurement, Role
from specproxy.proxy.client_answer import ClientAnswer
from specproxy.proxy.messages import Response, upstream_failure
from specproxy.proxy.records import ProxyRecords, SendIdentity

CUT_GRACE_S = 1.0  # how long handlers cut at shutdown get to record their cut and end


class ShadowSupervisor:
    """Runs shadow copies as named background tasks, at most ``limit`` at once."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self._limit = limit
        self._tasks: set[asyncio.Task[None]] = set()
        self.stopping = False

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def try_start(self, make: Callable[[], Coroutine[Any, Any, None]], *, name: str) -> bool:
        """Start ``make()`` unless ``limit`` copies are running; False means dropped."""
        if self.stopping or len(self._tasks) >= self._limit:
            return False
        task = runtime.spawn(make(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def drain(self, deadline_s: float) -> int:
        """Stop taking copies, wait up to ``deadline_s``, cancel the rest; returns how many."""
        self.stopping = True
        return await runtime.drain(set(self._tasks), max(deadline_s, 0.0))


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    """One client request the proxy relays: parsed, its sides decided, ready to send (a value:
    the modules below read its fields, and its route is ``upstream.route``)."""

    request_id: str
    decision: Decision
    upstream: UpstreamRequest
    drop_event: EventFilter | None = None
    warmup: bool = False  # the client marked it (header x-specproxy-warmup): kept out of stats
    arrived_us: int = 0  # arrival at the proxy, on the proxy's clock (for `--record`)
    client_body: dict[str, Any] | None = None  # as the client sent it (kept for `--record`)
    category: str | None = None  # the prompt's category (header x-specproxy-category)


class _Serving:
    """``Relay._relaying``: ``task`` is in ``serving`` for the block's duration (a class, not
    a generator, so that entering costs little)."""

    __slots__ = ("_serving", "_task")

    def __init__(self, serving: set[asyncio.Task[Any]], task: asyncio.Task[Any] | None) -> None:
        self._serving = serving
        self._task = task

    def __enter__(self) -> None:
        if self._task is not None:
            self._serving.add(self._task)

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._serving.discard(self._task)


@dataclass(frozen=True, slots=True)
class Begun:
    """A primary's request written in the call that read the client's (``Relay.begin``)."""

    exchange: Exchange
    t0_ns: int  # when it was written (``perf_counter_ns``)
    in_flight: int  # requests in flight to its side then


def _failure_of(exc: UpstreamFailure | TimeoutError | ConnectionError) -> tuple[ErrorKind, str]:
    """The record's error of an exchange that raised ``exc``."""
    if isinstance(exc, UpstreamFailure):
        return exc.kind, exc.message
    if isinstance(exc, TimeoutError):
        return ErrorKind.TIMEOUT, TOTAL_DEADLINE
    # the client went away while its headers or end were written
    return ErrorKind.CLIENT_CANCELLED, "client disconnected"


class _Sent:
    """``Relay._exchange``'s ``on_sent``: the request is written (or failed before it was).

    What the request need not wait for comes here: its ``_Send`` (sent at ``t0_ns``, with
    ``in_flight`` to its side then), the in-flight count, and a primary's shadow copy."""

    __slots__ = ("_in_flight", "_proxied", "_relay", "_shadow", "_side", "_t0_ns", "send")

    def __init__(
        self,
        relay: Relay,
        proxied: ProxiedRequest,
        side: Role,
        *,
        shadow: bool,
        t0_ns: int,
        in_flight: int,
    ) -> None:
        self._relay = relay
        self._proxied = proxied
        self._side = side
        self._shadow = shadow
        self._t0_ns = t0_ns
        self._in_flight = in_flight
        self.send: SendIdentity | None = None

    @property
    def t0(self) -> int:
        """When the request was sent (``perf_counter_ns``)."""
        return self._t0_ns

    def __call__(self) -> SendIdentity:
        relay, proxied, side, shadow = self._relay, self._proxied, self._side, self._shadow
        send = self.send = relay.records.stamp(
            proxied, side, shadow=shadow, t0_ns=self._t0_ns, in_flight=self._in_flight
        )
        relay.records.updates.started(side, shadow=shadow)
        if not shadow and proxied.decision.shadow is not None:
            relay._start_shadow(proxied, proxied.decision.shadow)
        return send


class Relay:
    """Sends each ProxiedRequest and records both sides; see the module docstring."""

    def __init__(
        self,
        *,
        backends: Mapping[Role, Backend],
        records: ProxyRecords,
        shadows: ShadowSupervisor,
    ) -> None:
        self._backends = backends
        self.records = records
        self._shadows = shadows
        self._log = records.log
        self._serving: set[asyncio.Task[Any]] = set()  # handlers relaying a primary now
        self._loop: asyncio.AbstractEventLoop | None = None  # the serving loop, once known

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The event loop serving the requests (looked up once: each lookup is a system call)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        return loop

    async def drain(self, deadline_s: float) -> int:
        """Wait up to ``deadline_s`` for the client requests in flight; cut the rest (``aborted``)."""
        pending = [t for t in self._serving if not t.done()]
        if not pending:
            self.records.flush()
            return 0
        _, still = await asyncio.wait(pending, timeout=max(deadline_s, 0.0))
        if not still:
            self.records.flush()
            return 0
        self.records.cutting = True
        for task in still:
            task.cancel()
        await asyncio.wait(still, timeout=CUT_GRACE_S)  # each records its cut and ends at once
        self.records.flush()
        return len(still)

    def _relaying(self) -> _Serving:
        """The current handler counts among those relaying a primary (``drain`` waits for them)."""
        return _Serving(self._serving, asyncio.current_task(self._running_loop()))

    def _after_done(self, proxied: ProxiedRequest, side: Role, size: int) -> None:
        """Log the bytes an upstream sent after its ``[DONE]`` (not relayed), if any."""
        if size:
            self._log.warning(
                "bytes_after_done_dropped",
                side=str(side),
                request_id=proxied.request_id,
                size=size,
            )

    def begin(self, side: Role, upstream: UpstreamRequest) -> Begun | None:
        """Write a primary's request to ``side`` now, if it has an idle pooled connection.

        Hand the result to ``relay_to`` at once (an eagerly started task), with the
        ``ProxiedRequest`` of that ``upstream``; it then owns the exchange. None when the
        request cannot go out in this call (``relay_to`` sends it)."""
        backend = self._backends[side]
        in_flight = backend.in_flight
        t0_ns = time.perf_counter_ns()
        ex = backend.begin_exchange(upstream, t0_ns)
        return None if ex is None else Begun(ex, t0_ns, in_flight)

    async def relay_to(
        self, proxied: ProxiedRequest, answer: ClientAnswer, begun: Begun | None = None
    ) -> Measurement | None:
        """Relay ``proxied``'s primary to ``answer``, and start its shadow.

        The shadow starts as soon as the primary's request has been written (or has failed
        to be), so that it does not delay it. ``begun``: its request, written already
        (``begin``).
        Returns the Measurement of a failed exchange (the answer may not have begun),
        None after a clean one. Counted in ``drain`` while it runs."""
        side = proxied.decision.primary
        with self._relaying():
            m = await self._exchange(proxied, side, answer=answer, begun=begun)
        self._after_done(proxied, side, answer.bytes_after_done)
        return m

    @staticmethod
    def failure_response(proxied: ProxiedRequest, m: Measurement) -> Response:
        """The client's answer to a primary that failed before its response began."""
        side = proxied.decision.primary
        failure = upstream_failure(side, m)
        failure.headers[REQUEST_ID_HEADER] = proxied.request_id
        failure.headers[SIDE_HEADER] = side.value
        return failure

    async def _exchange(
        self,
        proxied: ProxiedRequest,
        side: Role,
        *,
        answer: ClientAnswer | None,
        deadline: asyncio.Timeout | None = None,
        begun: Begun | None = None,
    ) -> Measurement | None:
        """One send to ``side``, relayed to ``answer`` (the primary's client) if any.

        The forward-then-measure loop: per read, the exchange stamps and keeps the bytes
        and ``answer``'s forwarder writes them (one call, in the read's own turn); the
        whole response is folded into its Measurement once, after the client has the end
        (``core.measurement.measure.measure_recorded``). Exactly one record, also when cancelled.
        Returns the Measurement of a failed exchange; a clean one is measured and
        recorded a moment later (``recorder.RecordSteps``), and None is returned.
        """
        backend = self._backends[side]
        if begun is None:
            t0_ns, in_flight, early = time.perf_counter_ns(), backend.in_flight, None
        else:
            t0_ns, in_flight, early = begun.t0_ns, begun.in_flight, begun.exchange
        sent = _Sent(self, proxied, side, shadow=answer is None, t0_ns=t0_ns, in_flight=in_flight)
        ex: Exchange | None = None
        failure: tuple[ErrorKind, str] | None = None
        try:
            with backend.counted():  # the exchange keeps every deadline itself (its Carrier)
                ex = await backend.open_exchange(proxied.upstream, t0_ns, sent, early)
                if answer is not None:
                    answer.begin(ex)
                await ex.ended
                if answer is not None:
                    answer.end(ex)
        except (UpstreamFailure, TimeoutError, ConnectionError) as exc:
            failure = _failure_of(exc)
        except asyncio.CancelledError:
            failure = (ErrorKind.CLIENT_CANCELLED, "request cancelled")
            raise
        except Exception:  # a bug: still one record, then the handler's 500
            failure = (ErrorKind.PROTOCOL, "internal error")
            raise
        finally:
            m = self._settle(proxied, sent, ex, failure, answer=answer, deadline=deadline)
        return m

    def _settle(
        self,
        proxied: ProxiedRequest,
        sent: _Sent,
        ex: Exchange | None,
        failure: tuple[ErrorKind, str] | None,
        *,
        answer: ClientAnswer | None,
        deadline: asyncio.Timeout | None,
    ) -> Measurement | None:
        """``_exchange``'s end, whatever ended it: abort a failed exchange, stop the client
        answer, and record exactly once (a clean end a moment later, ``recorder.RecordSteps``)."""
        send = sent.send or sent()  # or nothing was written
        if ex is not None and failure is not None:
            ex.abort()
        if answer is not None:
            answer.stop()
        if failure is None and ex is not None and not self.records.cutting:
            self.records.later(send, ex, sent.t0, deadline)
            return None
        return self.records.now(send, ex, failure, sent.t0, deadline)

    def _start_shadow(self, proxied: ProxiedRequest, side: Role) -> None:
        started = self._shadows.try_start(
            lambda: self._run_shadow(proxied, side), name=f"shadow-{side}-{proxied.request_id}"
        )
        if started:
            self.records.shadow_started(proxied)
        else:
            message = (
                f"{self._shadows.in_flight} shadow copies in flight (limit {self._shadows.limit})"
            )
            self.records.shadow_dropped(proxied, side, message)

    async def _run_shadow(self, proxied: ProxiedRequest, side: Role) -> None:
        """One shadow copy under its deadline; never raises except for cancellation."""
        deadline = asyncio.timeout(self.records.shadow_deadline_s)
        try:
            async with deadline:
                await self._exchange(proxied, side, answer=None, deadline=deadline)
        except TimeoutError:
            pass  # recorded as ``timeout`` (``ProxyRecords.record``)
        except Exception:  # a shadow must never take anything down with it
            self._log.exception("shadow_failed", side=str(side), request_id=proxied.request_id)
