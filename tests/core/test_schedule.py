"""Arrival schedules and the pacing state machine, driven by an injected clock."""

from __future__ import annotations

import itertools
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core.load.schedule import (
    Finished,
    Send,
    SendPlan,
    WaitForSlot,
    WaitUntil,
    compress_idle,
    constant_offsets_us,
    poisson_offsets_us,
    recorded_offsets_us,
    spread_buckets,
)


def test_recorded_offsets_scale_by_speed() -> None:
    """Recorded offsets become exact microseconds divided by the speed factor."""
    assert recorded_offsets_us([0.0, 0.5, 3.0]) == [0, 500_000, 3_000_000]
    assert recorded_offsets_us([0.0, 0.5, 3.0], speed=2.0) == [0, 250_000, 1_500_000]
    assert recorded_offsets_us([0.0, 1.0], speed=0.5) == [0, 2_000_000]
    with pytest.raises(ValueError, match="sorted"):
        recorded_offsets_us([1.0, 0.5])
    with pytest.raises(ValueError, match="speed"):
        recorded_offsets_us([0.0], speed=0)


def test_constant_offsets_are_exact() -> None:
    """A constant rate puts request i at exactly i/rate seconds."""
    assert constant_offsets_us(4, 4.0) == [0, 250_000, 500_000, 750_000]
    assert constant_offsets_us(3, 3.0) == [0, 333_333, 666_667]


def test_poisson_is_reproducible_and_has_the_right_mean() -> None:
    """Seeded Poisson arrivals repeat exactly and their mean gap is 1/rate."""
    a = poisson_offsets_us(20_000, 100.0, seed=7)
    assert a == poisson_offsets_us(20_000, 100.0, seed=7)
    assert a != poisson_offsets_us(20_000, 100.0, seed=8)
    assert a[0] == 0
    gaps = [b - x for x, b in itertools.pairwise(a)]
    assert statistics.fmean(gaps) == pytest.approx(10_000, rel=0.03)
    # exponential gaps: standard deviation equals the mean
    assert statistics.pstdev(gaps) == pytest.approx(10_000, rel=0.05)


def test_spread_buckets_spreads_each_timestamp_over_the_gap() -> None:
    """Requests sharing a timestamp are spread evenly up to the next distinct timestamp."""
    out = spread_buckets([0.0, 0.0, 0.0, 3.0, 3.0, 6.0])
    assert out == [0.0, 1.0, 2.0, 3.0, 4.5, 6.0]
    assert spread_buckets([0.0, 0.0, 3.0, 3.0], last_bucket_s=1.0) == [0.0, 1.5, 3.0, 3.5]


def test_compress_idle_shortens_long_gaps_only() -> None:
    """Gaps longer than the limit become the limit; shorter gaps stay."""
    assert compress_idle([0.0, 1.0, 101.0, 102.5], 5.0) == [0.0, 1.0, 6.0, 7.5]


class FakeClock:
    """An injected clock: the test moves time by hand."""

    def __init__(self) -> None:
        self.now_us = 0


def test_open_loop_sends_each_item_at_its_offset() -> None:
    """Open loop: nothing before the offset; at the offset a Send with that intended time."""
    plan = SendPlan(count=3, start_us=1_000, offsets_us=[0, 500, 2_000])
    assert plan.next(1_000) == Send(0, 1_000)
    assert plan.next(1_200) == WaitUntil(1_500)
    assert plan.next(1_700) == Send(1, 1_500)  # late: intended stays 1_500
    assert plan.next(1_700) == WaitUntil(3_000)
    assert plan.next(3_000) == Send(2, 3_000)
    assert plan.next(9_999) == Finished()
    assert plan.in_flight == 3


def test_open_loop_duration_and_stop() -> None:
    """Items due at or after the duration are not sent; stop() ends the plan at once."""
    plan = SendPlan(count=3, start_us=0, offsets_us=[0, 100, 200], duration_us=200)
    assert isinstance(plan.next(0), Send)
    assert isinstance(plan.next(100), Send)
    assert plan.next(300) == Finished()
    stopped = SendPlan(count=3, start_us=0, offsets_us=[0, 100, 200])
    stopped.stop()
    assert stopped.next(0) == Finished()


def test_open_loop_with_a_concurrency_cap_waits_for_a_slot() -> None:
    """A capped open loop waits for a slot and keeps the item's own intended time."""
    plan = SendPlan(count=3, start_us=0, offsets_us=[0, 10, 20], concurrency=1)
    assert plan.next(0) == Send(0, 0)
    assert plan.next(15) == WaitForSlot()
    plan.on_done(40)
    assert plan.next(41) == Send(1, 10)


def test_closed_loop_has_no_intended_time() -> None:
    """Closed loop: N sends at the start, then one per completion, none with an intended time
    (a lag against the instant a slot freed would measure the sender's ramp and bursts)."""
    plan = SendPlan(count=4, start_us=100, concurrency=2)
    assert plan.next(100) == Send(0, None)
    assert plan.next(101) == Send(1, None)
    assert plan.next(102) == WaitForSlot()
    plan.on_done(500)
    assert plan.next(503) == Send(2, None)
    plan.on_done(600)
    plan.on_done(650)
    assert plan.next(700) == Send(3, None)
    assert plan.next(700) == Finished()
    with pytest.raises(ValueError, match="on_done"):
        SendPlan(count=1, start_us=0, concurrency=1).on_done(0)


def test_closed_loop_held_in_flight_is_time_weighted_from_the_ramp_to_the_last_send() -> None:
    """The mean in flight counts from the ramp's N-th send to the last send:
    a slot left empty for a while lowers it, the start-up ramp and the final drain do not."""
    plan = SendPlan(count=5, start_us=0, concurrency=2)
    plan.next(0)
    assert plan.held_in_flight() is None  # the limit is not reached yet
    plan.next(300)  # the ramp ends at 300: both in flight from here
    plan.on_done(1_300)
    plan.next(1_300)  # refilled at once
    plan.on_done(2_300)
    plan.next(2_800)  # this slot stayed empty for 500 us
    plan.on_done(3_300)
    plan.next(3_300)  # the last send
    plan.on_done(9_000)  # the drain after it does not count
    mean, span = plan.held_in_flight() or (0.0, 0)
    assert span == 3_000
    assert mean == (2 * 3_000 - 500) / 3_000
    assert SendPlan(count=2, start_us=0, offsets_us=[0, 10]).held_in_flight() is None


def test_closed_loop_ramp_slower_than_the_server_does_not_hold() -> None:
    """When requests finish before the start-up ramp has sent all N, the loop never had N in
    flight: the mean from the N-th send on says so."""
    plan = SendPlan(count=4, start_us=0, concurrency=2)
    plan.next(0)
    plan.on_done(100)  # done before the ramp's second send
    plan.next(300)  # the ramp ends with 1 in flight
    plan.next(300)  # refilled at once: 2 in flight
    plan.on_done(500)
    plan.next(1_300)  # the last send, after 800 us with 1 in flight
    mean, span = plan.held_in_flight() or (0.0, 0)
    assert span == 1_000
    assert mean == (2 * 200 + 1 * 800) / 1_000


def test_closed_loop_duration_stops_new_sends() -> None:
    """A closed loop sends nothing once its duration is over."""
    plan = SendPlan(count=100, start_us=0, concurrency=1, duration_us=1_000)
    assert isinstance(plan.next(0), Send)
    plan.on_done(1_000)
    assert plan.next(1_000) == Finished()


@settings(max_examples=80, deadline=None)
@given(
    concurrency=st.integers(1, 8),
    count=st.integers(0, 60),
    steps=st.lists(st.tuples(st.booleans(), st.integers(0, 50)), max_size=300),
)
def test_closed_loop_never_exceeds_the_limit(
    concurrency: int, count: int, steps: list[tuple[bool, int]]
) -> None:
    """Whatever the order of completions and polls, at most N items are ever in flight."""
    clock = FakeClock()
    plan = SendPlan(count=count, start_us=0, concurrency=concurrency)
    in_flight = 0
    sent = 0
    for complete, advance in steps:
        clock.now_us += advance
        if complete and in_flight:
            plan.on_done(clock.now_us)
            in_flight -= 1
        decision = plan.next(clock.now_us)
        if isinstance(decision, Send):
            assert decision.intended_us is None
            in_flight += 1
            sent += 1
        assert in_flight <= concurrency
        assert plan.in_flight == in_flight
    assert sent <= count
