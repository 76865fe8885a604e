"""Throughput over time per side, in round windows: the values and the window rule (pure).

``report.timeline.streamed_timeline`` fills them from the record columns (the code that
runs); ``tests/oracles/sides.py`` keeps a record-by-record version it is held equal to.
The per-side counts, latency percentiles, load and send lag live in ``core.records.tally``.
Warm-up records are left out here too.

Time base: a request occupies ``[sent_at_unix_s, sent_at_unix_s + e2e_us]`` of wall time
(a failed one without E2E occupies its send instant). Output tokens arrive at their
stream-chunk offsets when recorded, else all at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from specproxy.core.records.model import Role

_NICE_WINDOWS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)


@dataclass(frozen=True, slots=True)
class TimelineWindow:
    """One window of one side: output tokens and requests completed / failed in it."""

    start_s: float
    output_tokens: int
    completed: int
    failed: int


@dataclass(frozen=True, slots=True)
class Timeline:
    """Throughput over time; ``start_s`` is seconds since the first send of either side."""

    window_s: float
    origin_unix_s: float
    sides: tuple[tuple[Role, tuple[TimelineWindow, ...]], ...]

    def __post_init__(self) -> None:
        if self.window_s <= 0:
            raise ValueError("window_s must be > 0")


def choose_window_s(span_s: float, target_windows: int = 60) -> float:
    """The smallest round window (1 s, 2 s, 5 s, ...) giving at most ``target_windows``."""
    for w in _NICE_WINDOWS_S:
        if span_s / w <= target_windows:
            return float(w)
    return float(_NICE_WINDOWS_S[-1])
