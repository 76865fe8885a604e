"""The replay driver against scripted in-memory backends: one record per send, pairing, bounds, stop."""

from __future__ import annotations

import asyncio

from specproxy.core.model import ErrorKind, RequestRecord, Role, Route, SendMode
from specproxy.replay.driver import Driver, RunContext
from specproxy.replay.modes import Job, Window
from specproxy.replay.requests import RequestOptions, RequestSource
from specproxy.replay.trace import TraceRecord
from specproxy.runtime import MonotonicClock, spawn
from tests.backends.fake import FakeBackend

BOTH = (Role.BASELINE, Role.CANDIDATE)


def _source(n: int) -> RequestSource:
    records = [
        TraceRecord("unit.jsonl", i + 1, 0.0, route=Route.GENERATE, body={"text": f"q{i}"}, index=i)
        for i in range(n)
    ]
    return RequestSource(records, RequestOptions(route=Route.GENERATE))


def _driver(
    backends: dict[Role, FakeBackend],
    records: list[RequestRecord],
    n: int,
    *,
    concurrency: int | None = None,
    drain_s: float = 5.0,
) -> Driver:
    return Driver(
        clock=MonotonicClock(),
        backends=backends,
        source=_source(n),
        context=RunContext("exp-unit", SendMode.MIRROR),
        on_record=records.append,
        concurrency=concurrency,
        drain_s=drain_s,
    )


def _mirror_window(n: int, *, closed_loop: bool = False) -> Window:
    jobs = tuple(Job(i, BOTH, f"p{i}", warmup=False) for i in range(n))
    return Window(jobs, None if closed_loop else (0,) * n, "unit")


async def test_a_mirror_window_records_one_paired_record_per_side_and_job() -> None:
    """Five mirrored jobs: each fake gets five requests, and each pair id has a baseline and a candidate record."""
    backends = {role: FakeBackend(role) for role in BOTH}
    records: list[RequestRecord] = []
    result = await _driver(backends, records, 5).run_window(_mirror_window(5))
    assert (result.planned, result.sent, result.cancelled) == (5, 5, 0)
    assert all(len(b.sent) == 5 for b in backends.values())
    assert sorted((r.pair_id, r.side.value) for r in records) == sorted(
        (f"p{i}", side.value) for i in range(5) for side in BOTH
    )
    assert all(r.ok and r.trace_index == int(r.pair_id[1:]) for r in records if r.pair_id)


async def test_closed_loop_concurrency_bounds_the_requests_in_flight_per_side() -> None:
    """At --concurrency 2, no fake ever holds more than two requests, and all eight are sent."""
    backends = {role: FakeBackend(role) for role in BOTH}
    records: list[RequestRecord] = []
    driver = _driver(backends, records, 8, concurrency=2)
    await driver.run_window(_mirror_window(8, closed_loop=True))
    assert all(b.peak_in_flight <= 2 and len(b.sent) == 8 for b in backends.values())
    assert len(records) == 16


async def test_stop_cancels_requests_still_in_flight_and_records_each() -> None:
    """Stopping with both servers holding their answers cuts them: one aborted record per send (a drain cut)."""
    gate = asyncio.Event()  # never opened: the servers hold every request
    backends = {role: FakeBackend(role, gate=gate) for role in BOTH}
    records: list[RequestRecord] = []
    driver = _driver(backends, records, 3, drain_s=0.0)
    running = spawn(driver.run_window(_mirror_window(3)), name="unit-window")
    await asyncio.gather(*(b.until_sent(3) for b in backends.values()))
    driver.stop()
    result = await running
    assert result.stopped and result.cancelled == 6
    assert len(records) == 6
    assert {r.measurement.error_kind for r in records} == {ErrorKind.ABORTED}
    assert all(b.in_flight == 0 for b in backends.values())
