"""The replay driver: runs sending windows on the monotonic clock and records every request.

For one ``Window`` the driver asks a ``core.schedule.SendPlan`` what to do, waits on the
run's ``MonotonicClock`` (a timer until ``spin_us`` before the due time, then yielding
to the loop until the clock reaches it, so send times are accurate well below the
loop's millisecond timer resolution), and dispatches each due job as one named task
per side (``runtime.spawn``). A task stamps ``actual_send_us`` and the wall time just
before calling the backend, whose ``on_done`` turns the measurement into exactly one
``RequestRecord``; a request never sent (cancelled before its task ran) has no record.

Stopping (``stop()``, e.g. on Ctrl-C): nothing more is sent, in-flight requests get
``drain_s`` to finish, then they are cancelled (their records say ``client_cancelled``).
Owns its tasks; the caller owns the backends, the recorder and the clock.

With ``via`` (driving a specproxy proxy) a request's side is what the proxy's
``x-specproxy-side`` response header says, else the job's side (the primary).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specproxy.backends.base import Backend, UpstreamRequest
from specproxy.core.model import Measurement, RequestRecord, Role, SendMode
from specproxy.core.schedule import Finished, Send, SendPlan, WaitForSlot, WaitUntil
from specproxy.replay.modes import Job, Window
from specproxy.replay.requests import RequestSource
from specproxy.runtime import MonotonicClock, drain, spawn

SIDE_HEADER = "x-specproxy-side"
LOOKAHEAD = 32


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every record of a run shares: experiment id, mode, per-side fingerprints."""

    experiment_id: str
    mode: SendMode | None
    fingerprints: Mapping[Role, str | None] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    via: bool = False


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


class _SideSniffer:
    """A response sink that only reads which side the proxy says answered."""

    def __init__(self) -> None:
        self.side: Role | None = None

    async def on_headers(self, status: int, headers: Mapping[str, str]) -> None:
        value = headers.get(SIDE_HEADER)
        if value in (Role.BASELINE.value, Role.CANDIDATE.value):
            self.side = Role(value)

    async def on_bytes(self, data: bytes) -> None:
        return None

    async def on_end(self) -> None:
        return None


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


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
        spin_us: int = 1500,
    ) -> None:
        self._clock = clock
        self._backends = backends
        self._source = source
        self._ctx = context
        self._on_record = on_record
        self._on_sent = on_sent
        self._concurrency = concurrency
        self._drain_s = drain_s
        self._spin_us = spin_us
        self._wake: asyncio.Future[None] | None = None
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
            _resolve(self._wake)

    async def _wait(self, until_us: int | None) -> None:
        """Sleep until ``until_us`` on the run clock (None: indefinitely) or until poked."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._wake = fut
        handle = None
        if until_us is not None:
            delay_s = max(0.0, (until_us - self._clock.now_us()) / 1e6)
            handle = loop.call_later(delay_s, _resolve, fut)
        try:
            await fut
        finally:
            if handle is not None:
                handle.cancel()
            self._wake = None

    async def run_window(self, window: Window, *, duration_us: int | None = None) -> WindowResult:
        """Send every job of ``window`` on its schedule and wait for (or drain) the answers.

        The first requests are built before the window's clock starts, so the first
        sends are not late by their own serialisation.
        """
        for job in window.jobs[:LOOKAHEAD]:
            self._source.get(job.record_index)
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
        )

    async def _send_all(self, window: Window, plan: SendPlan) -> None:
        while True:
            now = self._clock.now_us()
            decision = plan.next(now)
            if isinstance(decision, Send):
                self._dispatch(window.jobs[decision.item], decision.intended_us, plan)
            elif isinstance(decision, WaitUntil):
                wake_us = decision.t_us - self._spin_us
                if now < wake_us:
                    self._prefetch(window, plan.sent, wake_us)
                    await self._wait(wake_us)
                else:
                    await asyncio.sleep(0)
            elif isinstance(decision, WaitForSlot):
                await self._wait(None)
            else:
                assert isinstance(decision, Finished)
                return

    def _prefetch(self, window: Window, first: int, until_us: int) -> None:
        """Build upcoming requests while there is time before ``until_us``."""
        for job in window.jobs[first : first + LOOKAHEAD]:
            if self._clock.now_us() >= until_us:
                return
            if not self._source.is_built(job.record_index):
                self._source.get(job.record_index)

    async def _finish(self) -> int:
        """Wait for every in-flight request; bounded by ``drain_s`` once stopped."""
        while self._tasks and not self._stopped:
            await self._wait(None)
        if self._tasks:
            return await drain(set(self._tasks), self._drain_s)
        return 0

    def _dispatch(self, job: Job, intended_us: int, plan: SendPlan) -> None:
        request = self._source.get(job.record_index)
        remaining = [len(job.sides)]

        def side_done(task: asyncio.Task[None]) -> None:
            self._tasks.discard(task)
            if not task.cancelled() and task.exception() is not None:
                self._errors.append(task.exception())  # type: ignore[arg-type]
            remaining[0] -= 1
            if remaining[0] == 0:
                plan.on_done(self._clock.now_us())
            self._poke()

        for side in job.sides:
            task = spawn(
                self._send(job, side, request, intended_us),
                name=f"replay-{job.record_index}-{side.value}",
            )
            self._tasks.add(task)
            task.add_done_callback(side_done)

    async def _send(self, job: Job, side: Role, request: UpstreamRequest, intended_us: int) -> None:
        backend = self._backends[side]
        sniffer = _SideSniffer() if self._ctx.via else None
        in_flight = self._in_flight[side]
        self._in_flight[side] += 1
        actual_us = self._clock.now_us()
        sent_unix_s = time.time()
        if self._on_sent is not None:
            self._on_sent(side)

        def on_done(measurement: Measurement) -> None:
            self._in_flight[side] -= 1
            labelled = sniffer.side if sniffer is not None and sniffer.side else side
            self._on_record(
                self._record(
                    job,
                    labelled,
                    backend.spec.url,
                    request,
                    measurement,
                    intended_us=intended_us,
                    actual_us=actual_us,
                    sent_unix_s=sent_unix_s,
                    in_flight=in_flight,
                )
            )

        await backend.send(request, on_done=on_done, sink=sniffer)

    def _record(
        self,
        job: Job,
        side: Role,
        url: str,
        request: UpstreamRequest,
        measurement: Measurement,
        **stamps: Any,
    ) -> RequestRecord:
        trace = self._source.record(job.record_index)
        labels = {**self._ctx.labels, **job.labels}
        if trace.turn_index:
            labels["turn"] = str(trace.turn_index)
        return RequestRecord(
            experiment_id=self._ctx.experiment_id,
            request_id=f"{self._ctx.experiment_id}-{job.record_index}-{side.value}",
            side=side,
            route=request.route,
            stream=request.stream,
            backend_url=url,
            sent_at_unix_s=stamps["sent_unix_s"],
            actual_send_us=stamps["actual_us"],
            measurement=measurement,
            pair_id=job.pair_id,
            mode=self._ctx.mode,
            warmup=job.warmup,
            intended_send_us=stamps["intended_us"],
            in_flight_at_send=stamps["in_flight"],
            fingerprint=self._ctx.fingerprints.get(side),
            category=trace.category,
            trace_index=trace.index,
            synthetic_prompt=trace.synthetic_prompt,
            labels=labels,
        )
