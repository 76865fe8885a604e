"""One record per send: its identity, its Measurement, and its ``RequestRecord``.

``ProxyRecords`` is where a relayed send becomes a record (``proxy.relay`` calls it):

- ``stamp`` fixes a send's identity just as it is written (``SendIdentity``: its side, whether
  it is a shadow copy, when it was sent, how many requests its side then had in flight);
- ``now`` folds a failed exchange into its Measurement (``backends.exchange``) and
  records it at once; ``later`` does so for a cleanly ended one, a moment later, one step
  per event-loop turn (``recording.steps``), so that the requests that have just arrived
  are served first; ``flush`` makes those still waiting (the shutdown calls it);
- each record counts in the metrics, goes to the records file, and (a primary's) to the
  trace being recorded (``on_primary_done``).

The cancellation rule: a cancelled shadow copy was cut off by its own deadline
(``timeout``) or by the shutdown (``aborted``); a primary cancelled once the shutdown's
drain has run out (``cutting``) is ``aborted`` too. A shadow copy whose primary's client
went away runs on, and its record carries the label ``primary=client_cancelled``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from specproxy import runtime
from specproxy.backends.base import Backend
from specproxy.backends.exchange import Exchange, exchange_ends, measure_exchange
from specproxy.core.records.model import ErrorKind, Measurement, RequestRecord, Role, SendMode
from specproxy.log import get_logger
from specproxy.proxy.app import ProxiedRequest
from specproxy.proxy.metrics import ProxyMetrics
from specproxy.recording.steps import RecordSteps

# How long a cleanly ended exchange waits before the records begin (``recording.steps``).
RECORD_DELAY_S = 0.01


class RecordWriter(Protocol):
    """Where records go (``recording.Recorder``)."""

    def write(self, record: RequestRecord, *, itl: list[tuple[int, int]] | None = None) -> None:
        """``itl``: the record's ``Measurement.itl_us``, computed once by the relay."""

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """The records written inside are written out together when it ends."""


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
        recorder: RecordWriter,
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

    def started(self, send: SendIdentity) -> None:
        """``send`` has been written."""
        self.metrics.started(send.side, shadow=send.shadow)

    def shadow_started(self, proxied: ProxiedRequest) -> None:
        self._shadowing.add(proxied.request_id)

    def shadow_dropped(self, proxied: ProxiedRequest, side: Role, message: str) -> None:
        """The shadow copy was never sent (too many in flight): its one record."""
        dropped = Measurement(error_kind=ErrorKind.SHADOW_DROPPED, error_message=message)
        self.metrics.shadow_dropped(side, proxied.route)
        self._write(self.stamp(proxied, side, shadow=True), dropped)

    def later(
        self, send: SendIdentity, ex: Exchange, t0_ns: int, deadline: asyncio.Timeout | None
    ) -> None:
        """Record the cleanly ended ``ex`` a moment later (``recording.steps``)."""
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
        send, m, deadline = folded
        self.record(send, m, deadline)

    def _record_failed(self, folded: _Folded) -> None:
        """Called inside ``RecordSteps.step``'s ``except`` block: the traceback is logged."""
        send = folded[0]
        self.log.exception(  # noqa: LOG004
            "record_failed", side=str(send.side), request_id=send.proxied.request_id
        )

    def flush(self) -> int:
        """Make every record still waiting (``later``) now, written out together;
        returns how many."""
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
        """Name why a shadow was cancelled, count, write.

        A cancelled shadow was cut off either by its own deadline (recorded as
        ``timeout``) or by the shutdown drain running out (``aborted``); a primary
        cancelled once the drain has run out is ``aborted`` too.
        """
        if m.error_kind is ErrorKind.CLIENT_CANCELLED:
            m = self._name_cancellation(send, m, deadline)
        itl = m.itl_us if m.ok else []  # once per request, for the metrics and the recorder
        try:
            self.metrics.finished(send.side, send.proxied.route, m, shadow=send.shadow, itl=itl)
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
            route=proxied.route,
            stream=proxied.stream,
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
