"""The replay driver against scripted in-memory backends: one record per send, pairing, bounds, stop."""

from __future__ import annotations

import asyncio

from specproxy.core.records.model import ErrorKind, RequestRecord, Role, Route, SendMode
from specproxy.replay import driver as driver_module
from specproxy.replay.driver import TIMER_TICK_US, Driver, RunContext
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


async def test_the_pacing_loop_sends_each_request_once_at_its_offset_in_order() -> None:
    """Open loop with gaps shorter than a timer tick (several due per tick) and longer ones
    (yielded up to): each job is sent once, in offset order, never before its offset, and
    has one record whose intended time is the window's start plus its offset."""
    offsets = (*range(0, 30 * 250, 250), *range(8_000, 8_000 + 5 * 3_000, 3_000))
    n = len(offsets)
    backend = FakeBackend(Role.BASELINE)
    records: list[RequestRecord] = []
    jobs = tuple(Job(i, (Role.BASELINE,), None, warmup=False) for i in range(n))
    driver = _driver({Role.BASELINE: backend}, records, n)
    result = await driver.run_window(Window(jobs, offsets, "paced"))
    assert (result.planned, result.sent, result.cancelled) == (n, n, 0)
    assert [r.body for r in backend.sent] == [f'{{"text":"q{i}"}}'.encode() for i in range(n)]
    by_index = sorted(records, key=lambda r: r.trace_index or 0)
    assert [r.trace_index for r in by_index] == list(range(n))
    assert len({r.request_id for r in records}) == n
    for record, offset in zip(by_index, offsets, strict=True):
        assert record.intended_send_us == result.start_us + offset
        assert record.actual_send_us >= record.intended_send_us
    sends = [r.actual_send_us for r in by_index]
    assert sends == sorted(sends)


def test_timers_are_asked_in_whole_ticks_never_less_than_one() -> None:
    """A delay under half a tick would fire at once (a spin): it is one tick; others round."""
    assert [driver_module._ticks(d) for d in (-5, 0, 1, 499, 500, 1_499, 1_500, 2_600)] == [
        1,
        1,
        1,
        1,
        1,
        1,
        2,
        3,
    ]
    assert TIMER_TICK_US == 1000


def test_the_sender_yields_only_within_a_share_of_the_gap_else_sleeps_ticks() -> None:
    """Whole ticks while a tick and the margin are left; then a yield (0) only when what is
    left is within 1/SPIN_SHARE of the gap since the previous due time, else one more tick:
    at 2,000/s (0.5 ms gaps) the sender never yields, at 100/s it yields the last stretch."""
    driver = _driver({Role.BASELINE: FakeBackend(Role.BASELINE)}, [], 1)
    tick, margin = TIMER_TICK_US, driver._margin_us
    due = 1_000_000
    assert driver._ticks_before(due, due - 500, due - 480) == 1  # 2,000/s: sleep, no spin
    assert driver._ticks_before(due, due - 1_000, due - 980) == 1  # 1,000/s
    assert driver._ticks_before(due, due - 10_000, due - 9_900) == (9_900 - margin) // tick
    assert driver._ticks_before(due, due - 10_000, due - tick // 2) == 0  # 100/s: yield
    assert driver._ticks_before(due, due - 10_000, due) == 0
    assert driver._ticks_before(due, None, due - tick - margin + 1) == 0  # no previous send
    assert driver._ticks_before(due, None, due - 2 * tick - margin) == 2


async def test_an_ended_request_wakes_a_wait_for_a_slot_but_not_for_a_due_time() -> None:
    """A completion wakes the sender waiting for a slot (or the last answers); a wait for
    a due time is left to its timer (waking it on every answer cost a timer and a turn of
    the sender per request); stop() wakes either."""
    driver = _driver({Role.BASELINE: FakeBackend(Role.BASELINE)}, [], 1)
    timed = spawn(driver._wait(60_000_000), name="unit-timed-wait")
    await asyncio.sleep(0)
    driver._slot_freed()
    for _ in range(3):
        await asyncio.sleep(0)
    assert not timed.done()
    driver.stop()
    assert await timed is False
    untimed = spawn(driver._wait(None), name="unit-slot-wait")
    await asyncio.sleep(0)
    driver._slot_freed()
    assert await untimed is False
