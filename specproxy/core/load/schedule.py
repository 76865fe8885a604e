"""Arrival schedules and the pacing state machine of the replayer (pure: no clock, no I/O).

Offsets are integer microseconds from the start of a sending window. The open-loop
schedules are lists computed up front:

- ``recorded_offsets_us``: a trace's own offsets divided by ``speed`` (2.0 = twice as fast);
- ``constant_offsets_us``: one request every 1/rate seconds, the first at 0;
- ``poisson_offsets_us``: exponential gaps of mean 1/rate drawn from ``random.Random(seed)``
  (the same seed gives the same offsets on every machine), the first at 0.

Two transforms for recorded offsets (seconds, sorted): ``spread_buckets`` spreads
requests that share one timestamp evenly over the gap to the next distinct timestamp
(Mooncake's traces are quantised to ~3 s, which otherwise replays as a burst every 3 s),
and ``compress_idle`` shortens every gap longer than a limit to that limit (the Azure
trace has twelve idle gaps of 1 to 4 minutes).

``SendPlan`` decides, given the time now, whether the next request may go out: open
loop (each item at its offset, optionally also capped by a concurrency limit) or closed
loop (a new item whenever fewer than N are in flight). It owns the in-flight count: the
caller reports each completion with ``on_done``. ``Send.intended_us`` is when the item
should have gone out: its offset, so the caller's actual send time minus it is the send
lag. A closed loop has no such time (None): it asks for N at once at the start and for a
new one the instant a slot frees, which no sender does, so a lag against those instants
would measure the sender's start-up ramp and its refill bursts rather than the load. A
closed loop is judged instead by ``held_in_flight``: the time-weighted mean number in
flight from the end of its start-up ramp (the N-th send) to the last send (after which the loop
drains by design).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from statistics import median

US_PER_S = 1_000_000


def _check_sorted(offsets_s: Sequence[float]) -> None:
    if any(b < a for a, b in pairwise(offsets_s)):
        raise ValueError("offsets must be sorted")
    if offsets_s and offsets_s[0] < 0:
        raise ValueError("offsets must be >= 0")


def recorded_offsets_us(offsets_s: Sequence[float], *, speed: float = 1.0) -> list[int]:
    """Trace offsets (seconds) scaled by ``1/speed``, in integer microseconds."""
    if not speed > 0:
        raise ValueError(f"speed must be > 0, got {speed}")
    _check_sorted(offsets_s)
    return [round(t * US_PER_S / speed) for t in offsets_s]


def constant_offsets_us(count: int, rate: float) -> list[int]:
    """``count`` arrivals exactly ``1/rate`` seconds apart, the first at 0."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    return [round(i * US_PER_S / rate) for i in range(count)]


def poisson_offsets_us(count: int, rate: float, *, seed: int) -> list[int]:
    """``count`` Poisson arrivals of mean rate ``rate``/s, the first at 0, reproducible by seed."""
    if not rate > 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    rng = random.Random(seed)
    out: list[int] = []
    t = 0.0
    for i in range(count):
        if i:
            t += rng.expovariate(rate)
        out.append(round(t * US_PER_S))
    return out


def spread_buckets(
    offsets_s: Sequence[float], *, last_bucket_s: float | None = None
) -> list[float]:
    """Spread requests sharing a timestamp evenly over the gap to the next distinct timestamp.

    The k-th of n requests at time t, with the next distinct timestamp at t', goes out at
    ``t + k * (t' - t) / n``. The last bucket has no next timestamp: it is spread over
    ``last_bucket_s``, by default the median gap between distinct timestamps (0 when the
    trace has a single timestamp).
    """
    _check_sorted(offsets_s)
    distinct = sorted(set(offsets_s))
    gaps = [b - a for a, b in pairwise(distinct)]
    if last_bucket_s is None:
        last_bucket_s = median(gaps) if gaps else 0.0
    nxt = {
        t: (distinct[i + 1] - t if i + 1 < len(distinct) else last_bucket_s)
        for i, t in enumerate(distinct)
    }
    sizes: dict[float, int] = {}
    for t in offsets_s:
        sizes[t] = sizes.get(t, 0) + 1
    seen: dict[float, int] = {}
    out: list[float] = []
    for t in offsets_s:
        k = seen.get(t, 0)
        seen[t] = k + 1
        out.append(t + k * nxt[t] / sizes[t])
    return out


def compress_idle(offsets_s: Sequence[float], max_gap_s: float) -> list[float]:
    """Shorten every inter-arrival gap longer than ``max_gap_s`` to exactly ``max_gap_s``."""
    if not max_gap_s > 0:
        raise ValueError(f"max_gap_s must be > 0, got {max_gap_s}")
    _check_sorted(offsets_s)
    out: list[float] = []
    removed = 0.0
    for i, t in enumerate(offsets_s):
        if i:
            gap = t - offsets_s[i - 1]
            if gap > max_gap_s:
                removed += gap - max_gap_s
        out.append(t - removed)
    return out


@dataclass(frozen=True, slots=True)
class Send:
    """Send item ``item`` now; it was due at ``intended_us``."""

    item: int
    intended_us: int | None  # None in closed loop (module docstring)


@dataclass(frozen=True, slots=True)
class WaitUntil:
    """Nothing is due before ``t_us``."""

    t_us: int


@dataclass(frozen=True, slots=True)
class WaitForSlot:
    """An item is due but the concurrency limit is reached: wait for a completion."""


@dataclass(frozen=True, slots=True)
class Finished:
    """Every item was sent, the duration ran out, or sending was stopped."""


Decision = Send | WaitUntil | WaitForSlot | Finished


class SendPlan:
    """Pacing for one sending window; see the module docstring. Times are run-clock microseconds."""

    def __init__(
        self,
        *,
        count: int,
        start_us: int,
        offsets_us: Sequence[int] | None = None,
        concurrency: int | None = None,
        duration_us: int | None = None,
    ) -> None:
        if count < 0:
            raise ValueError("count must be >= 0")
        if offsets_us is None and concurrency is None:
            raise ValueError("a plan needs offsets (open loop) or a concurrency (closed loop)")
        if offsets_us is not None and len(offsets_us) < count:
            raise ValueError("fewer offsets than items")
        if concurrency is not None and concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        if duration_us is not None and duration_us < 0:
            raise ValueError("duration must be >= 0")
        self._count = count
        self._start_us = start_us
        self._offsets = offsets_us
        self._limit = concurrency
        self._deadline_us = None if duration_us is None else start_us + duration_us
        self._next = 0
        self._in_flight = 0
        self._stopped = False
        # closed loop: in flight x time (us) from the N-th send (the end of the ramp)
        self._held_from_us: int | None = None
        self._last_change_us = start_us
        self._area = 0
        self._area_at_last_send = 0
        self._last_send_us = start_us

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def sent(self) -> int:
        return self._next

    def stop(self) -> None:
        """Send nothing more (Ctrl-C, or a window cut short)."""
        self._stopped = True

    def next(self, now_us: int) -> Decision:
        """What to do at ``now_us``. A ``Send`` counts the item as in flight."""
        if self._stopped or self._next >= self._count:
            return Finished()
        if self._offsets is not None:
            intended = self._start_us + self._offsets[self._next]
            if self._deadline_us is not None and intended >= self._deadline_us:
                return Finished()
            if now_us < intended:
                return WaitUntil(intended)
        elif self._deadline_us is not None and now_us >= self._deadline_us:
            return Finished()
        if self._limit is not None and self._in_flight >= self._limit:
            return WaitForSlot()
        due = None if self._offsets is None else intended
        self._change(now_us, +1)
        self._last_send_us = now_us
        self._area_at_last_send = self._area
        self._next += 1
        if self._offsets is None and self._held_from_us is None and self._next == self._limit:
            self._held_from_us = now_us  # the ramp's last send: N are out (some may be done)
        return Send(self._next - 1, due)

    def _change(self, now_us: int, delta: int) -> None:
        """Change the in-flight count at ``now_us``, integrating it from the end of the ramp."""
        if self._held_from_us is not None:
            self._area += self._in_flight * max(0, now_us - self._last_change_us)
        self._last_change_us = max(self._last_change_us, now_us)
        self._in_flight += delta

    def held_in_flight(self) -> tuple[float, int] | None:
        """Closed loop: (time-weighted mean in flight, span in us) from the N-th send (the
        end of the start-up ramp; a sender slower than the server never has N in flight) to
        the last send; None in open loop, before the ramp ended, or for an empty span."""
        if self._held_from_us is None:
            return None
        span = self._last_send_us - self._held_from_us
        if span <= 0:
            return None
        return self._area_at_last_send / span, span

    def on_done(self, now_us: int) -> None:
        """One item in flight completed at ``now_us``; its slot is free from then."""
        if self._in_flight <= 0:
            raise ValueError("on_done without an item in flight")
        self._change(now_us, -1)
