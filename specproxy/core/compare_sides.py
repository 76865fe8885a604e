"""Per-side summaries: counts, failures by class, latency quantiles, throughput, load, lag.

Pure: records in, frozen values out. Warm-up records are counted (``warmup_excluded``)
and otherwise ignored. Latency values are microseconds; rates are per second of wall
time. Two latency views are kept: over completed requests only, and over every request
with each failure counted as the worst case (``inf``), so a side that fails its slow
requests cannot look fast.

Time base: a request occupies ``[sent_at_unix_s, sent_at_unix_s + e2e_us]`` of wall time
(a failed one without E2E occupies its send instant). Output tokens arrive at their
stream-chunk offsets when recorded, else all at the end.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specproxy.core.compare import Metric, metric_value
from specproxy.core.model import RequestRecord, Role
from specproxy.core.stats import quantile_sorted

SUMMARY_QUANTILES = (0.5, 0.9, 0.99)
LAG_FLAG_US = 100_000
"""A side whose p99 send lag exceeds this (100 ms) did not meet its intended load."""
_NICE_WINDOWS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)


@dataclass(frozen=True, slots=True)
class LatencyQuantiles:
    """p50/p90/p99 of one metric on one side, in microseconds.

    ``ok`` is over completed requests; ``with_failures`` counts every failed request as
    ``inf`` (a quantile that lands on a failure is ``inf``). ``max_us`` is the slowest
    completed request; None fields mean no completed request had the metric.
    """

    metric: Metric
    n_ok: int
    n_failed: int
    ok: tuple[float, ...] | None
    with_failures: tuple[float, ...] | None
    max_us: float | None


@dataclass(frozen=True, slots=True)
class SideSummary:
    """What one side did in the window (warm-up excluded)."""

    side: Role
    requests: int
    completed: int
    warmup_excluded: int
    failures: tuple[tuple[str, int], ...]
    latency: tuple[LatencyQuantiles, ...]
    output_tokens: int
    span_s: float
    active_s: float
    output_tokens_per_s: float | None
    requests_per_s: float | None
    load_min: int | None
    load_max: int | None
    send_lag_p99_us: float | None
    send_lag_max_us: float | None

    def __post_init__(self) -> None:
        if self.completed > self.requests:
            raise ValueError("completed > requests")

    @property
    def failed(self) -> int:
        return self.requests - self.completed

    @property
    def lagged(self) -> bool:
        """True when sending fell materially behind the intended schedule."""
        return self.send_lag_p99_us is not None and self.send_lag_p99_us > LAG_FLAG_US


def request_interval_s(rec: RequestRecord) -> tuple[float, float]:
    """Wall-clock ``(start, end)`` of one request in Unix seconds."""
    start = rec.sent_at_unix_s
    e2e = rec.measurement.e2e_us
    return start, start + (e2e / 1e6 if e2e is not None else 0.0)


def _latency(records: Sequence[RequestRecord], metric: Metric) -> LatencyQuantiles:
    ok_values = sorted(
        float(v) for r in records if r.ok and (v := metric_value(r, metric)) is not None
    )
    failed = sum(not r.ok for r in records)
    if not ok_values:
        return LatencyQuantiles(metric, 0, failed, None, None, None)
    worst = ok_values + [math.inf] * failed
    return LatencyQuantiles(
        metric=metric,
        n_ok=len(ok_values),
        n_failed=failed,
        ok=tuple(quantile_sorted(ok_values, q) for q in SUMMARY_QUANTILES),
        with_failures=tuple(quantile_sorted(worst, q) for q in SUMMARY_QUANTILES),
        max_us=ok_values[-1],
    )


def _union_length(intervals: list[tuple[float, float]]) -> float:
    total = 0.0
    cur_start = cur_end = None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


def summarise_side(records: Sequence[RequestRecord], side: Role) -> SideSummary:
    """Summary of ``side`` over ``records`` (which may hold both sides)."""
    mine = [r for r in records if r.side is side]
    live = [r for r in mine if not r.warmup]
    failures: dict[str, int] = {}
    for r in live:
        if r.measurement.error_kind is not None:
            kind = r.measurement.error_kind.value
            failures[kind] = failures.get(kind, 0) + 1
    intervals = [request_interval_s(r) for r in live]
    span = max(e for _, e in intervals) - min(s for s, _ in intervals) if intervals else 0.0
    active = _union_length(intervals)
    completed = sum(r.ok for r in live)
    tokens = sum(r.measurement.completion_tokens or 0 for r in live if r.ok)
    lags = sorted(float(lag) for r in live if (lag := r.send_lag_us) is not None)
    loads = [r.in_flight_at_send for r in live]
    return SideSummary(
        side=side,
        requests=len(live),
        completed=completed,
        warmup_excluded=len(mine) - len(live),
        failures=tuple(sorted(failures.items())),
        latency=tuple(_latency(live, m) for m in Metric),
        output_tokens=tokens,
        span_s=span,
        active_s=active,
        output_tokens_per_s=tokens / active if active > 0 else None,
        requests_per_s=completed / active if active > 0 else None,
        load_min=min(loads) if loads else None,
        load_max=max(loads) if loads else None,
        send_lag_p99_us=quantile_sorted(lags, 0.99) if lags else None,
        send_lag_max_us=lags[-1] if lags else None,
    )


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


def _add_tokens(rec: RequestRecord, tokens: list[int], origin: float, width: float) -> None:
    """Add one request's output tokens to the windows they arrived in (hot loop: a long run
    has millions of chunks, so this stays flat arithmetic)."""
    m = rec.measurement
    start, end = request_interval_s(rec)
    last = len(tokens) - 1
    if not m.chunk_offsets_us or sum(m.chunk_tokens) <= 0:
        tokens[min(last, max(0, int((end - origin) // width)))] += m.completion_tokens or 0
        return
    base = (start - origin) / width
    scale = 1e-6 / width
    for offset, count in zip(m.chunk_offsets_us, m.chunk_tokens, strict=True):
        index = int(base + offset * scale)
        tokens[index if index < last else last] += count


def throughput_timeline(
    records: Sequence[RequestRecord], window_s: float | None = None
) -> Timeline:
    """Per-side windows over the whole run (warm-up excluded)."""
    live = [r for r in records if not r.warmup]
    if not live:
        return Timeline(window_s or 1.0, 0.0, ())
    origin = min(r.sent_at_unix_s for r in live)
    horizon = max(request_interval_s(r)[1] for r in live) - origin
    width = window_s or choose_window_s(horizon)
    count = max(1, math.floor(horizon / width) + 1)
    sides: list[tuple[Role, tuple[TimelineWindow, ...]]] = []
    for side in Role:
        tokens, done, failed = [0] * count, [0] * count, [0] * count
        mine = [r for r in live if r.side is side]
        for rec in mine:
            end_idx = min(count - 1, int((request_interval_s(rec)[1] - origin) // width))
            if not rec.ok:
                failed[end_idx] += 1
                continue
            done[end_idx] += 1
            _add_tokens(rec, tokens, origin, width)
        if mine:
            windows = tuple(
                TimelineWindow(i * width, tokens[i], done[i], failed[i]) for i in range(count)
            )
            sides.append((side, windows))
    return Timeline(width, origin, tuple(sides))
