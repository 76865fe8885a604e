"""One record per send: its identity, its Measurement, its counts and its ``RequestRecord``.

``ProxyRecords`` is where a relayed send becomes a record (``proxy.relay`` calls it):

- ``stamp`` fixes a send's identity (``SendIdentity``) just as it is written;
- ``now`` folds a failed exchange into its Measurement (``backends.exchange``) and
  records it at once; ``later`` does so for a cleanly ended one a moment later, one step
  per event-loop turn (``recording.recorder.RecordSteps`` says why); ``flush`` makes
  those still waiting (the shutdown calls it);
- each record counts in the metrics (``MetricUpdates``: the series ``proxy.metrics``
  declares, once per request, never per chunk), goes to the records file, and (a
  primary's) to the trace being recorded (``on_primary_done``).

The cancellation rule: a cancelled shadow copy was cut off by its own deadline
(``timeout``) or by the shutdown (``aborted``); a primary cancelled once the shutdown's
drain has run out (``cutting``) is ``aborted`` too. A shadow copy whose primary's client
went away runs on, and its record carries the label ``primary=client_cancelled``.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Histogram

from specproxy import runtime
from specproxy.backends.base import Backend
from specproxy.backends.exchange import Exchange, exchange_ends, measure_exchange
from specproxy.core.compare.acceptance import verify_steps
from specproxy.core.records.model import (
    ErrorKind,
    Measurement,
    RequestRecord,
    Role,
    Route,
    SendMode,
)
from specproxy.core.speedups import SPEEDUPS
from specproxy.log import get_logger
from specproxy.proxy.metrics import CHUNK_ESTIMATE, PRIMARY, SERVER, SHADOW, ProxyMetrics
from specproxy.recording.recorder import Recorder, RecordSteps

if TYPE_CHECKING:
    from specproxy.proxy.relay import ProxiedRequest

# How long a cleanly ended exchange waits before the records begin (``RecordSteps``).
RECORD_DELAY_S = 0.01
_C_BUCKET_COUNTS = SPEEDUPS.bucket_counts if SPEEDUPS is not None else None
# The children of one (side, route) a successful request touches: ttft, e2e, tpot, itl, tokens
_SideRoute = tuple[Histogram, Histogram, Histogram, Histogram, Counter]


@dataclass(frozen=True, slots=True)
class SendIdentity:
    """Identity of one upstream send, fixed just before it starts."""

    proxied: ProxiedRequest
    side: Role
    shadow: bool
    sent_at_unix_s: float
    actual_send_us: int
    in_flight_at_send: int


_Ended = tuple[SendIdentity, Exchange, int, asyncio.Timeout | None]  # to fold; began at (ns)
_Folded = tuple[SendIdentity, Measurement, asyncio.Timeout | None]  # folded, to record


class ProxyRecords:
    """Makes and writes the records of one proxy run; see the module docstring."""

    def __init__(
        self,
        *,
        backends: Mapping[Role, Backend],
        recorder: Recorder,
        metrics: ProxyMetrics,
        clock: runtime.MonotonicClock,
        experiment_id: str,
        mode: SendMode,
        fingerprints: Mapping[Role, str | None],
        shadow_deadline_s: float,
        keep_text: bool = False,
        on_primary_done: Callable[[ProxiedRequest, Measurement], None] | None = None,
    ) -> None:
        self._backends = backends
        self._recorder = recorder
        self.metrics = metrics
        self.updates = MetricUpdates(metrics)
        self._clock = clock
        self._experiment_id = experiment_id
        self._mode = mode
        self._fingerprints = fingerprints
        self.shadow_deadline_s = shadow_deadline_s
        self._keep_text = keep_text
        self._on_primary_done = on_primary_done
        self.log = get_logger(experiment_id=experiment_id)
        self._shadowing: set[str] = set()  # request ids whose shadow copy is running
        self._client_gone: set[str] = set()  # ... and whose client has since gone away
        self.cutting = False  # set when the shutdown drain has run out
        self._steps: RecordSteps[_Ended, _Folded] = RecordSteps(
            fold=self._fold,
            write=self._write_folded,
            batch=recorder.batch,
            failed=self._record_failed,
            delay_s=RECORD_DELAY_S,
        )

    def shadow_started(self, proxied: ProxiedRequest) -> None:
        self._shadowing.add(proxied.request_id)

    def shadow_dropped(self, proxied: ProxiedRequest, side: Role, message: str) -> None:
        """The shadow copy was never sent (too many in flight): its one record."""
        dropped = Measurement(error_kind=ErrorKind.SHADOW_DROPPED, error_message=message)
        self.updates.shadow_dropped(side, proxied.upstream.route)
        self._write(self.stamp(proxied, side, shadow=True), dropped)

    def later(
        self, send: SendIdentity, ex: Exchange, t0_ns: int, deadline: asyncio.Timeout | None
    ) -> None:
        """Record the cleanly ended ``ex`` a moment later (``RecordSteps``)."""
        self._steps.later((send, ex, t0_ns, deadline))

    def now(
        self,
        send: SendIdentity,
        ex: Exchange | None,
        failure: tuple[ErrorKind, str] | None,
        t0_ns: int,
        deadline: asyncio.Timeout | None,
    ) -> Measurement:
        """Measure and record ``ex`` now (it failed, or the shutdown is cutting)."""
        m = self.measure(send.proxied, ex, failure, t0_ns)
        self.record(send, m, deadline)
        return m

    def _fold(self, ended: _Ended) -> _Folded:
        send, ex, t0_ns, deadline = ended
        return send, self.measure(send.proxied, ex, None, t0_ns), deadline

    def _write_folded(self, folded: _Folded) -> None:
        self.record(*folded)

    def _record_failed(self, folded: _Folded) -> None:
        """Called inside ``RecordSteps.step``'s ``except`` block: the traceback is logged."""
        send = folded[0]
        self.log.exception(  # noqa: LOG004
            "record_failed", side=str(send.side), request_id=send.proxied.request_id
        )

    def flush(self) -> int:
        """Make every record still waiting (``later``) now, together; returns how many."""
        try:
            return self._steps.flush()
        except Exception:  # the batch's write: a full disk must not take anything down
            self.log.exception("record_write_failed")
            return 0

    def measure(
        self,
        proxied: ProxiedRequest,
        ex: Exchange | None,
        failure: tuple[ErrorKind, str] | None,
        t0_ns: int,
    ) -> Measurement:
        """The exchange folded into its Measurement (``failure``: how it failed, if it did);
        when a bug makes the fold raise (logged), the Measurement of an internal error, so
        that the exchange still gets its one record."""
        upstream = proxied.upstream
        try:
            return measure_exchange(
                upstream.route, upstream.stream, ex, failure, t0_ns, keep_text=self._keep_text
            )
        except Exception:
            self.log.exception("measure_failed", request_id=proxied.request_id)
        status, headers_us, end_us = exchange_ends(ex, failure, t0_ns)
        return Measurement(
            status=status,
            error_kind=ErrorKind.PROTOCOL,
            error_message="internal error: the response could not be measured",
            headers_us=headers_us if status is not None else None,
            e2e_us=end_us,
        )

    def stamp(
        self,
        proxied: ProxiedRequest,
        side: Role,
        *,
        shadow: bool,
        t0_ns: int | None = None,
        in_flight: int | None = None,
    ) -> SendIdentity:
        """Fix the identity of one send to ``side``: sent at ``t0_ns`` (``perf_counter_ns``;
        now when None), with ``in_flight`` requests in flight to ``side`` then (now when None)."""
        if in_flight is None:
            in_flight = self._backends[side].in_flight
        if t0_ns is None:
            return SendIdentity(proxied, side, shadow, time.time(), self._clock.now_us(), in_flight)
        unix_s = time.time() - (time.perf_counter_ns() - t0_ns) / 1e9
        return SendIdentity(proxied, side, shadow, unix_s, self._clock.us_at(t0_ns), in_flight)

    def record(self, send: SendIdentity, m: Measurement, deadline: asyncio.Timeout | None) -> None:
        """Name why a cancelled send was cancelled (the module docstring's rule), count, write."""
        if m.error_kind is ErrorKind.CLIENT_CANCELLED:
            m = self._name_cancellation(send, m, deadline)
        itl = m.itl_us if m.ok else []  # once per request, for the metrics and the recorder
        try:
            self.updates.finished(
                send.side, send.proxied.upstream.route, m, shadow=send.shadow, itl=itl
            )
        except Exception:  # a bug in the metrics must not lose the record
            self.log.exception("metrics_failed", request_id=send.proxied.request_id)
        self._write(send, m, itl)
        if not send.shadow and self._on_primary_done is not None:
            try:
                self._on_primary_done(send.proxied, m)
            except Exception:  # recording a trace must not take the client's response down
                self.log.exception("trace_write_failed", request_id=send.proxied.request_id)

    def _name_cancellation(
        self, send: SendIdentity, m: Measurement, deadline: asyncio.Timeout | None
    ) -> Measurement:
        if send.shadow and deadline is not None and deadline.expired():
            message = f"shadow deadline of {self.shadow_deadline_s:g} s exceeded"
            return dataclasses.replace(m, error_kind=ErrorKind.TIMEOUT, error_message=message)
        if send.shadow:
            message = "proxy shut down before the shadow finished"
            return dataclasses.replace(m, error_kind=ErrorKind.ABORTED, error_message=message)
        if self.cutting:
            message = "cut off at shutdown: the drain deadline ran out"
            return dataclasses.replace(m, error_kind=ErrorKind.ABORTED, error_message=message)
        if send.proxied.request_id in self._shadowing:
            self._client_gone.add(send.proxied.request_id)
        return m

    def _write(
        self, send: SendIdentity, m: Measurement, itl: list[tuple[int, int]] | None = None
    ) -> None:
        proxied = send.proxied
        labels: dict[str, str] = {}
        if send.shadow:
            self._shadowing.discard(proxied.request_id)
            if proxied.request_id in self._client_gone:
                self._client_gone.discard(proxied.request_id)
                labels["primary"] = "client_cancelled"
        record = RequestRecord(
            experiment_id=self._experiment_id,
            request_id=proxied.request_id,
            side=send.side,
            route=proxied.upstream.route,
            stream=proxied.upstream.stream,
            backend_url=self._backends[send.side].spec.url,
            sent_at_unix_s=send.sent_at_unix_s,
            actual_send_us=send.actual_send_us,
            measurement=m,
            pair_id=proxied.request_id if proxied.decision.shadow is not None else None,
            mode=self._mode,
            shadow=send.shadow,
            in_flight_at_send=send.in_flight_at_send,
            fingerprint=self._fingerprints.get(send.side),
            warmup=proxied.warmup,
            category=proxied.category,
            labels=labels,
        )
        try:
            self._recorder.write(record, itl=itl)
        except Exception:  # a full disk must not take the client's response down
            self.log.exception(
                "record_write_failed", side=str(send.side), request_id=proxied.request_id
            )


def _observe_many(
    hist: Histogram, bounds: list[float], latencies: Iterable[tuple[int, int]]
) -> None:
    """``hist.observe(latency_s)`` ``tokens`` times per ``(latency_us, tokens)``, with one
    update per bucket touched: the child's bucket and sum values are written directly, as
    ``Histogram.observe`` does (non-cumulative bucket counts, cumulated on collection)."""
    done = _C_BUCKET_COUNTS(latencies, bounds) if _C_BUCKET_COUNTS is not None else None
    counts, total_s = done if done is not None else _bucket_counts_py(latencies, bounds)
    if not counts:
        return
    buckets: Any = hist._buckets  # no public API observes a value n times
    for i, n in counts.items():
        buckets[i].inc(n)
    hist._sum.inc(total_s)


def _bucket_counts_py(
    latencies: Iterable[tuple[int, int]], bounds: list[float]
) -> tuple[dict[int, int], float]:
    """``_observe_many``'s loop in Python (the reference for ``core/_speedups.c``'s
    ``bucket_counts``): tokens per bucket index, and the sum of seconds x tokens."""
    counts: dict[int, int] = {}
    total_s = 0.0
    find = bisect.bisect_left
    for latency_us, tokens in latencies:
        seconds = latency_us / 1e6
        i = find(bounds, seconds)  # the first bound >= the value: ``observe``'s bucket
        counts[i] = counts.get(i, 0) + tokens
        total_s += seconds * tokens
    return counts, total_s


class MetricUpdates:
    """The per-request writes of the series ``metrics`` declares; children by label
    values are looked up once (``labels()`` validates and locks per call)."""

    def __init__(self, metrics: ProxyMetrics) -> None:
        self._series = metrics
        self._token_bounds = metrics.token_bounds
        self._in_flight = metrics.in_flight
        self._dropped = metrics.dropped
        self._requests: dict[tuple[str, str, str, str], Counter] = {}
        self._side_route: dict[tuple[str, str], _SideRoute] = {}
        self._spec: dict[tuple[str, str], tuple[Counter, Counter]] = {}

    def started(self, side: Role, *, shadow: bool) -> None:
        """A request was sent to ``side``."""
        self._in_flight[(side, SHADOW if shadow else PRIMARY)].inc()

    def _request(self, key: tuple[str, str, str, str]) -> Counter:
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self._series.requests_total.labels(*key)
        return child

    def _children(self, key: tuple[str, str]) -> _SideRoute:
        found = self._side_route.get(key)
        if found is None:
            series = self._series
            found = self._side_route[key] = (
                series.ttft.labels(*key),
                series.e2e.labels(*key),
                series.tpot.labels(*key),
                series.itl.labels(*key),
                series.tokens_total.labels(*key),
            )
        return found

    def finished(
        self,
        side: Role,
        route: Route,
        m: Measurement,
        *,
        shadow: bool,
        itl: list[tuple[int, int]] | None = None,
    ) -> None:
        """A request sent to ``side`` ended with measurement ``m`` (``itl``: its
        ``Measurement.itl_us`` when the caller has it already)."""
        role = SHADOW if shadow else PRIMARY
        self._in_flight[(side, role)].dec()
        outcome = "ok" if m.error_kind is None else m.error_kind.value
        self._request((side.value, route.value, role, outcome)).inc()
        if m.error_kind is not None:
            return
        ttft, e2e, tpot, itl_hist, tokens = self._children((side.value, route.value))
        if m.ttft_us is not None:
            ttft.observe(m.ttft_us / 1e6)
        if m.e2e_us is not None:
            e2e.observe(m.e2e_us / 1e6)
        if m.tpot_us is not None:
            tpot.observe(m.tpot_us / 1e6)
        _observe_many(itl_hist, self._token_bounds, m.itl_us if itl is None else itl)
        if m.completion_tokens:
            tokens.inc(m.completion_tokens)
            self._acceptance(side, m, m.completion_tokens)

    def _acceptance(self, side: Role, m: Measurement, tokens: int) -> None:
        """Add the request's tokens and verify steps (``core.compare.acceptance.verify_steps``:
        the server's count, else tokens / accept length) to its source."""
        acc = m.acceptance
        if acc is None or not acc.accept_length or acc.accept_length <= 0:
            return
        steps = verify_steps(m, acc.accept_length)
        if steps is None:
            return
        key = (side.value, CHUNK_ESTIMATE if acc.estimated else SERVER)
        pair = self._spec.get(key)
        if pair is None:
            series = self._series
            pair = self._spec[key] = (
                series.spec_tokens.labels(*key),
                series.spec_steps.labels(*key),
            )
        pair[0].inc(tokens)
        pair[1].inc(steps)

    def shadow_dropped(self, side: Role, route: Route) -> None:
        """A shadow copy for ``side`` was dropped because too many were in flight."""
        self._request((side.value, route.value, SHADOW, ErrorKind.SHADOW_DROPPED.value)).inc()
        self._dropped[side].inc()
