"""The replay driver: runs sending windows on the monotonic clock and records every request.

For one ``Window`` the driver asks a ``core.load.schedule.SendPlan`` what to do, waits on
the run's ``MonotonicClock`` and dispatches each due job as one named task per side. A task stamps ``actual_send_us`` and the wall time just
before calling the backend, whose ``on_done`` turns the measurement into exactly one
``RequestRecord``; a request never sent (cancelled before its task ran) has no record.

Waiting: the event loop's timers have millisecond resolution (``TIMER_TICK_US``: uvloop
rounds a delay to whole milliseconds, so one under half a millisecond fires at once) and
fire late under load. The driver sleeps on timers of whole ticks while a tick and a
margin are left before the due time, then yields to the loop (``sleep(0)``, which keeps
I/O flowing) until the clock reaches it if what is left is within ``1/SPIN_SHARE`` of the
gap since the previous due time, else sleeps one more tick and sends what is then due,
about a tick late at most: below about 100 requests/s sends stay on time to the loop's
resolution, and at higher rates the sender does not spin through the loop between sends
(which took most of a core at 2,000 requests/s and starved the server it measured). The
margin adapts to how late the timers fire (an average of the lateness plus
``MARGIN_SLACK_US``, between ``MARGIN_MIN_US`` and ``MARGIN_MAX_US``).

Stopping (``stop()``, e.g. on Ctrl-C): nothing more is sent, in-flight requests get
``drain_s`` to finish, then they are cancelled; their records say ``aborted`` ("cut off
at the end of the replay"), as the proxy's do when its shutdown drain runs out.
Owns its tasks; the caller owns the backends, the recorder and the clock.

With ``via`` (driving a specproxy proxy) a request's side is what the proxy's
``x-specproxy-side`` response header says, else the job's side (the primary).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from specproxy.backends.base import Backend, UpstreamRequest
from specproxy.backends.send import send
from specproxy.core.load.schedule import Finished, Send, SendPlan, WaitForSlot, WaitUntil
from specproxy.core.protocol.headers import (
    CATEGORY_HEADER,
    SIDE_HEADER,
    WARMUP_HEADER,
    parse_category,
)
from specproxy.core.records.model import ErrorKind, Measurement, RequestRecord, Role, SendMode
from specproxy.replay.modes import Job, Window
from specproxy.replay.requests import RequestSource
from specproxy.replay.trace import TraceRecord
from specproxy.runtime import MonotonicClock, drain, spawn

PREBUILD = 512  # requests built before a window's clock starts
LOOKAHEAD = 256  # requests built ahead while waiting for the next due time
BURST = 16  # requests dispatched back to back before yielding to the event loop
MARGIN_MIN_US, MARGIN_MAX_US, MARGIN_SLACK_US = 300, 1500, 200
TIMER_TICK_US = 1000  # the event loop's timer resolution (see the module docstring)
SPIN_SHARE = 8  # yielding before a send takes at most this fraction of the gap to it
CUT_OFF_MESSAGE = "cut off at the end of the replay: the drain deadline ran out"


def _via_headers(request: UpstreamRequest, warmup: bool, trace: TraceRecord) -> UpstreamRequest:
    """``request`` with the headers a specproxy proxy reads: warm-up, the prompt's category."""
    extra = {WARMUP_HEADER: "1"} if warmup else {}
    category = parse_category(trace.category) if trace.category else None
    if category is not None:  # one a header cannot carry is kept in the replay's records only
        extra[CATEGORY_HEADER] = category
    if not extra:
        return request
    return dataclasses.replace(request, headers={**request.headers, **extra})


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every record of a run shares: experiment id, mode, per-side fingerprints."""

    experiment_id: str
    mode: SendMode | None
    fingerprints: Mapping[Role, str | None] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    via: bool = False


@dataclass(frozen=True, slots=True)
class _Sent:
    """The stamps of one request taken just before it went to its backend."""

    job: Job
    side: Role
    url: str
    request: UpstreamRequest
    intended_us: int | None  # None in closed loop (``core.load.schedule``)
    in_flight: int
    actual_us: int
    sent_unix_s: float


@dataclass(frozen=True, slots=True)
class WindowResult:
    """How one window went: its span on the run clock, jobs planned and sent, cancellations."""

    label: str
    start_us: int
    end_us: int
    planned: int
    sent: int
    stopped: bool
    cancelled: int
    held_in_flight: tuple[float, int] | None = None  # closed loop: SendPlan.held_in_flight


class _SideSniffer:
    """Reads which side the proxy says answered, from the answer's headers."""

    __slots__ = ("side",)

    def __init__(self) -> None:
        self.side: Role | None = None

    def __call__(self, status: int, headers: Mapping[str, str]) -> None:
        value = headers.get(SIDE_HEADER)
        if value in (Role.BASELINE.value, Role.CANDIDATE.value):
            self.side = Role(value)


def _ticks(delay_us: int) -> int:
    """``delay_us`` in whole timer ticks, at least one (a shorter timer fires at once)."""
    return max(1, (delay_us + TIMER_TICK_US // 2) // TIMER_TICK_US)


def _resolve(fut: asyncio.Future[bool], timer: bool) -> None:
    if not fut.done():
        fut.set_result(timer)


class Driver:
    """Sends windows of jobs to the backends; see the module docstring."""

    def __init__(
        self,
        *,
        clock: MonotonicClock,
        backends: Mapping[Role, Backend],
        source: RequestSource,
        context: RunContext,
        on_record: Callable[[RequestRecord], None],
        on_sent: Callable[[Role], None] | None = None,
        concurrency: int | None = None,
        drain_s: float = 30.0,
        on_output: Callable[[RequestRecord, UpstreamRequest], None] | None = None,
    ) -> None:
        self._clock = clock
        self._on_output = on_output  # sees each record with its output text, before on_record
        self._backends = backends
        self._source = source
        self._ctx = context
        self._on_record = on_record
        self._on_sent = on_sent
        self._concurrency = concurrency
        self._drain_s = drain_s
        self._margin_us = 1000
        self._built = 0
        self._wake: asyncio.Future[bool] | None = None
        self._timed = False  # the current wait is for a due time (``_wait``)
        self._tasks: set[asyncio.Task[None]] = set()
        self._errors: list[BaseException] = []
        self._in_flight = dict.fromkeys(Role, 0)
        self._plan: SendPlan | None = None
        self._stopped = False

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """Send nothing more; in-flight requests drain for ``drain_s``, then are cancelled."""
        self._stopped = True
        if self._plan is not None:
            self._plan.stop()
        self._poke()

    def _poke(self) -> None:
        if self._wake is not None:
            _resolve(self._wake, False)

    def _slot_freed(self) -> None:
        """A request ended: wake a wait for a free slot or for the last answers (a wait
        for a due time has nothing to do with it, and is left to its timer)."""
        if self._wake is not None and not self._timed:
            _resolve(self._wake, False)

    async def _wait(self, delay_us: int | None) -> bool:
        """Sleep ``delay_us`` (None: indefinitely) or until poked; True if the timer fired."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        self._wake = fut
        self._timed = delay_us is not None
        handle = None
        if delay_us is not None:
            handle = loop.call_later(delay_us / 1e6, _resolve, fut, True)
        try:
            return await fut
        finally:
            if handle is not None:
                handle.cancel()
            self._wake = None

    async def _sleep_ticks(self, ticks: int, window: Window, sent: int) -> None:
        """Sleep ``ticks`` timer ticks, building requests ahead before the timer is due;
        the timer's lateness adapts the margin."""
        now = self._clock.now_us()
        target_us = now + ticks * TIMER_TICK_US
        self._prefetch(window, sent, target_us - TIMER_TICK_US // 2)
        now = self._clock.now_us()
        delay_us = _ticks(target_us - now) * TIMER_TICK_US
        if await self._wait(delay_us):
            late_us = self._clock.now_us() - (now + delay_us)
            target = late_us + MARGIN_SLACK_US
            margin = (7 * self._margin_us + target) // 8
            self._margin_us = min(MARGIN_MAX_US, max(MARGIN_MIN_US, margin))

    def _ticks_before(self, due_us: int, last_due_us: int | None, now_us: int) -> int:
        """Timer ticks to sleep now on the way to ``due_us``, 0 to yield instead (module
        docstring): whole ticks while more than a tick and the margin are left; then a
        yield when what is left is within ``1/SPIN_SHARE`` of the gap since ``last_due_us``
        (a tick and the margin with no previous send), else one more tick."""
        left_us = due_us - now_us
        ticks = (left_us - self._margin_us) // TIMER_TICK_US
        if ticks >= 1:
            return ticks
        budget_us = TIMER_TICK_US + self._margin_us
        if last_due_us is not None:
            budget_us = (due_us - last_due_us) // SPIN_SHARE
        return 0 if left_us <= budget_us else 1

    async def run_window(self, window: Window, *, duration_us: int | None = None) -> WindowResult:
        """Send every job of ``window`` on its schedule and wait for (or drain) the answers.

        The first ``PREBUILD`` requests are built before the window's clock starts, and
        later ones while waiting, so building a request (prompt synthesis,
        serialisation) is not on the send path.
        """
        for job in window.jobs[:PREBUILD]:
            self._source.get(job.record_index)
        self._built = min(PREBUILD, len(window.jobs))
        start_us = self._clock.now_us()
        plan = SendPlan(
            count=len(window.jobs),
            start_us=start_us,
            offsets_us=window.offsets_us,
            concurrency=self._concurrency,
            duration_us=duration_us,
        )
        self._plan = plan
        if self._stopped:
            plan.stop()
        await self._send_all(window, plan)
        cancelled = await self._finish()
        self._plan = None
        if self._errors:
            raise self._errors[0]
        return WindowResult(
            window.label,
            start_us,
            self._clock.now_us(),
            len(window.jobs),
            plan.sent,
            self._stopped,
            cancelled,
            plan.held_in_flight(),
        )

    async def _send_all(self, window: Window, plan: SendPlan) -> None:
        """Follow the plan. Items due together go out in groups of ``BURST``, with a yield to
        the loop between groups, so a late or bursty schedule never stops the responses
        already streaming from being read (which would inflate their latencies)."""
        burst = 0
        last_due: int | None = None
        while True:
            now = self._clock.now_us()
            decision = plan.next(now)
            if isinstance(decision, Send):
                self._dispatch(window.jobs[decision.item], decision.intended_us, plan)
                last_due = decision.intended_us
                burst += 1
                if burst >= BURST:
                    burst = 0
                    await asyncio.sleep(0)
                continue
            burst = 0
            if isinstance(decision, WaitUntil):
                ticks = self._ticks_before(decision.t_us, last_due, now)
                if ticks:
                    await self._sleep_ticks(ticks, window, plan.sent)
                else:
                    await asyncio.sleep(0)
            elif isinstance(decision, WaitForSlot):
                await self._wait(None)
            else:
                assert isinstance(decision, Finished)
                return

    def _prefetch(self, window: Window, sent: int, until_us: int) -> None:
        """Build requests up to ``LOOKAHEAD`` past the last sent, while time is left."""
        limit = min(len(window.jobs), sent + LOOKAHEAD)
        self._built = max(self._built, sent)
        while self._built < limit and self._clock.now_us() < until_us:
            self._source.get(window.jobs[self._built].record_index)
            self._built += 1

    async def _finish(self) -> int:
        """Wait for every in-flight request; bounded by ``drain_s`` once stopped, then the
        rest is cancelled (recorded as ``aborted``)."""
        while self._tasks and not self._stopped:
            await self._wait(None)
        return await drain(set(self._tasks), self._drain_s)

    def _dispatch(self, job: Job, intended_us: int | None, plan: SendPlan) -> None:
        request = self._source.get(job.record_index)
        remaining = [len(job.sides)]

        def side_done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and (error := task.exception()) is not None:
                self._errors.append(error)
            remaining[0] -= 1
            if remaining[0] == 0:
                plan.on_done(self._clock.now_us())
            self._slot_freed()

        for side in job.sides:
            task = spawn(
                self._send(job, side, request, intended_us),
                name=f"replay-{job.record_index}-{side.value}",
            )
            self._tasks.add(task)
            task.add_done_callback(side_done)

    async def _send(
        self, job: Job, side: Role, request: UpstreamRequest, intended_us: int | None
    ) -> None:
        backend = self._backends[side]
        sniffer = _SideSniffer() if self._ctx.via else None
        if self._ctx.via:  # the proxy keeps warm-up out of its stats, and the category
            request = _via_headers(request, job.warmup, self._source.record(job.record_index))
        sent = _Sent(
            job=job,
            side=side,
            url=backend.spec.url,
            request=request,
            intended_us=intended_us,
            in_flight=self._in_flight[side],
            actual_us=self._clock.now_us(),
            sent_unix_s=self._clock.wall_s(),
        )
        self._in_flight[side] += 1
        if self._on_sent is not None:
            self._on_sent(side)

        def on_done(measurement: Measurement) -> None:
            self._in_flight[side] -= 1
            # only the drain after a stop cancels a send: such a cut is ``aborted``
            if self._stopped and measurement.error_kind is ErrorKind.CLIENT_CANCELLED:
                measurement = dataclasses.replace(
                    measurement, error_kind=ErrorKind.ABORTED, error_message=CUT_OFF_MESSAGE
                )
            answered = sniffer.side if sniffer is not None and sniffer.side else side
            record = self._record(sent, answered, measurement)
            if self._on_output is not None:
                self._on_output(record, sent.request)
            self._on_record(record)

        keep_text = self._on_output is not None
        await send(backend, request, on_done=on_done, keep_text=keep_text, on_head=sniffer)

    def _record(self, sent: _Sent, side: Role, measurement: Measurement) -> RequestRecord:
        job = sent.job
        trace = self._source.record(job.record_index)
        labels = {**self._ctx.labels, **job.labels}
        if trace.turn_index:
            labels["turn"] = str(trace.turn_index)
        return RequestRecord(
            experiment_id=self._ctx.experiment_id,
            request_id=f"{self._ctx.experiment_id}-{job.record_index}-{side.value}",
            side=side,
            route=sent.request.route,
            stream=sent.request.stream,
            backend_url=sent.url,
            sent_at_unix_s=sent.sent_unix_s,
            actual_send_us=sent.actual_us,
            measurement=measurement,
            pair_id=job.pair_id,
            mode=self._ctx.mode,
            warmup=job.warmup,
            intended_send_us=sent.intended_us,
            in_flight_at_send=sent.in_flight,
            fingerprint=self._ctx.fingerprints.get(side),
            category=trace.category,
            trace_index=trace.index,
            synthetic_prompt=trace.synthetic_prompt,
            labels=labels,
        )
