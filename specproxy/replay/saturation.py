"""Did the servers keep up? Server saturation, judged apart from the sender's load.

Send lag says whether the *sender* kept to the schedule (``core.records.tally``). A server that
cannot keep up lets its queue grow while the sender is on time, so ``load met`` stays
true. This module looks at the other side, per side and over that side's sending
windows (warm-up and cool-down requests left out, as everywhere):

- **achieved vs offered rate** (open loop). Offered: sends per second over each window's
  send span. Achieved: completions per second over the same span shifted by the
  window's median E2E (answers follow sends by about one latency), so a server that
  keeps up scores about 1 whatever its latency. A saturated server finishes at its own
  service rate.
- **in-flight growth** (open loop): the mean number in flight at send over the last
  quarter of each window's sends against the second quarter (the first is the warm-up
  of the queue itself). A stable server's in-flight count stays level; a saturated
  one's grows with every request.
- **queueing**: SGLang's ``sglang:num_queue_reqs`` gauge (summed over its label sets), sampled
  from ``/metrics`` every ``QUEUE_SAMPLE_S`` while the side is sending, where the server
  exposes it (``--enable-metrics``). SGLang refreshes the gauge at its log interval.

A side is **saturated** when its achieved rate is under ``MIN_ACHIEVED_SHARE`` of the
offered rate, when its in-flight count grew to at least ``GROWTH_FACTOR`` times the
second quarter's plus ``GROWTH_MIN``, or when its queue was non-empty in at least
``QUEUED_SHARE`` of the samples. A closed loop (``--concurrency N``) keeps N in flight by
design, so only its queue is reported there. Its load is judged here too, since a
closed loop has no intended send times: ``held_in_flight`` is the time-weighted mean in
flight from the end of the start-up ramp (the N-th send) to the last send
(``core.load.schedule.SendPlan``), and the loop **held** its load when that is at least
``HELD_SHARE`` of N.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from specproxy.core.records.model import RequestRecord, Role

QUEUE_SAMPLE_S = 1.0
MIN_ACHIEVED_SHARE = 0.9
GROWTH_FACTOR = 1.5
GROWTH_MIN = 2.0
QUEUED_SHARE = 0.5
HELD_SHARE = 0.95
MIN_SENDS = 8  # a window with fewer counted sends says nothing about rates or growth


@dataclass(slots=True)
class _Window:
    """One sending window of one side: send times and in-flight counts, answer ends."""

    sends_us: array[int] = field(default_factory=lambda: array("q"))
    in_flight: array[int] = field(default_factory=lambda: array("q"))
    ends_us: array[int] = field(default_factory=lambda: array("q"))
    e2e_us: array[int] = field(default_factory=lambda: array("q"))


@dataclass(slots=True)
class _Side:
    windows: list[_Window] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    held: list[tuple[float, int]] = field(default_factory=list)  # (mean in flight, span us)


def _quarter_means(values: array[int]) -> tuple[float, float] | None:
    """Means of the second and the last quarter of ``values`` (None when too few)."""
    n = len(values)
    if n < MIN_SENDS:
        return None
    q = n // 4
    second, last = values[q : 2 * q], values[n - q :]
    return sum(second) / len(second), sum(last) / len(last)


def _rates(w: _Window) -> tuple[float, float, float] | None:
    """(offered sends, achieved answers within the shifted span, span s) of one window."""
    if len(w.sends_us) < MIN_SENDS or not w.e2e_us:
        return None
    first, last = min(w.sends_us), max(w.sends_us)
    span_us = last - first
    if span_us <= 0:
        return None
    shift = median(w.e2e_us)
    lo, hi = first + shift, last + shift
    answered = sum(1 for t in w.ends_us if lo <= t <= hi)
    return float(len(w.sends_us) - 1), float(answered), span_us / 1e6


class SaturationTally:
    """Per side: each window's sends and answers, queue samples and held concurrency.

    Fed by the run: ``begin_window`` before each window, ``observe`` for each record,
    ``queue_sample`` from the poller, ``held`` with each closed-loop window's result.
    """

    def __init__(self) -> None:
        self._sides = {side: _Side() for side in Role}
        self._current: dict[Role, _Window] = {}

    def begin_window(self, sides: tuple[Role, ...]) -> None:
        """A new window starts, sending to ``sides``."""
        self._current = {}
        for side in sides:
            window = _Window()
            self._sides[side].windows.append(window)
            self._current[side] = window

    def observe(self, record: RequestRecord) -> None:
        window = self._current.get(record.side)
        if window is None or record.warmup:
            return
        window.sends_us.append(record.actual_send_us)
        window.in_flight.append(record.in_flight_at_send)
        m = record.measurement
        if m.ok and m.e2e_us is not None:
            window.ends_us.append(record.actual_send_us + m.e2e_us)
            window.e2e_us.append(m.e2e_us)

    def queue_sample(self, side: Role, queued: float) -> None:
        self._sides[side].queue.append(queued)

    def held(self, side: Role, held: tuple[float, int] | None) -> None:
        if held is not None:
            self._sides[side].held.append(held)

    def summary(self, side: Role, *, closed_loop: bool, concurrency: int | None) -> dict[str, Any]:
        """``side``'s saturation figures and verdict (module docstring), as JSON data."""
        s = self._sides[side]
        out: dict[str, Any] = {"closed_loop": closed_loop}
        reasons: list[str] = []
        out.update(_queue_figures(s.queue, reasons))
        if closed_loop:
            out.update(_held_figures(s.held, concurrency))
        else:
            out.update(_open_loop_figures(s.windows, reasons))
        out["saturated"] = bool(reasons)
        out["reasons"] = reasons
        return out


def _queue_figures(samples: list[float], reasons: list[str]) -> dict[str, Any]:
    if not samples:
        return {"queue_samples": 0, "queue_max": None, "queued_share": None}
    share = sum(1 for q in samples if q > 0) / len(samples)
    if share >= QUEUED_SHARE:
        reasons.append(f"requests queued at the server in {share:.0%} of its samples")
    return {"queue_samples": len(samples), "queue_max": max(samples), "queued_share": share}


def _held_figures(held: list[tuple[float, int]], concurrency: int | None) -> dict[str, Any]:
    """The time-weighted mean in flight over the windows, and whether it held N (None when
    no window sent more than N requests)."""
    span = sum(s for _, s in held)
    mean = sum(m * s for m, s in held) / span if span else None
    ok = None if mean is None or not concurrency else mean >= HELD_SHARE * concurrency
    return {"concurrency": concurrency, "held_in_flight": mean, "held": ok}


def _open_loop_figures(windows: list[_Window], reasons: list[str]) -> dict[str, Any]:
    rates = [r for w in windows if (r := _rates(w)) is not None]
    offered = achieved = None
    if rates:
        span = sum(r[2] for r in rates)
        offered, achieved = sum(r[0] for r in rates) / span, sum(r[1] for r in rates) / span
        if achieved < MIN_ACHIEVED_SHARE * offered:
            reasons.append(f"answered {achieved:.3g}/s of {offered:.3g}/s offered")
    quarters = [q for w in windows if (q := _quarter_means(w.in_flight)) is not None]
    early = late = None
    if quarters:
        early = sum(q[0] for q in quarters) / len(quarters)
        late = sum(q[1] for q in quarters) / len(quarters)
        if late >= GROWTH_FACTOR * early + GROWTH_MIN:
            reasons.append(f"requests in flight grew from {early:.3g} to {late:.3g}")
    return {
        "offered_per_s": offered,
        "achieved_per_s": achieved,
        "in_flight_early": early,
        "in_flight_late": late,
    }


def render_line(side: str, s: dict[str, Any]) -> str:
    """One terminal line: the side's saturation verdict and its figures."""
    parts: list[str] = []
    if s.get("offered_per_s") is not None:
        parts.append(f"answered {s['achieved_per_s']:.3g}/s of {s['offered_per_s']:.3g}/s offered")
    if s.get("in_flight_early") is not None:
        parts.append(f"in flight {s['in_flight_early']:.3g} -> {s['in_flight_late']:.3g}")
    if s.get("held_in_flight") is not None:
        parts.append(f"{s['held_in_flight']:.1f} of {s['concurrency']} in flight (time-weighted)")
    if s.get("queue_max") is not None:
        parts.append(f"queue max {s['queue_max']:g} ({s['queued_share']:.0%} of samples)")
    flag = "SERVER SATURATED" if s.get("saturated") else "kept up"
    return f"server {side}: {flag}; " + ("; ".join(parts) or "no figures")
