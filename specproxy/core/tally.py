"""Per-side tallies: the one definition of every per-side count and latency percentile.

Pure. ``SideTally`` is fed one ``RequestRecord`` at a time (the recorder feeds one per side
as it writes, the report feeds the saved records) and ``SideTally.summary`` gives the
frozen ``SideSummary`` that experiment.json, the reports and the replay's printed summary
all show, so they cannot disagree.

Rules, each applied here and nowhere else:

- **Warm-up.** A warm-up record is counted in ``warmup_excluded`` (and, when it failed,
  in ``warmup_failed``) and in nothing else: not in requests, completed, failed, tokens,
  latency, throughput, load or send lag.
- **Failures.** ``requests = completed + failed``; ``failures`` counts them by error class.
  Latency percentiles come in two views: over completed requests only, and over every
  request with each failure counted as the worst case (``inf``).
- **Percentiles.** Nearest rank on the exact microsecond values
  (``core.histogram.PERCENTILE_RULE``).
- **Load met.** A side met its intended load when its p99 send lag is at most
  ``max_send_lag_us`` (``--max-lag-ms``, default ``DEFAULT_MAX_SEND_LAG_MS``); a run met
  it when every side did (``load_met``). Requests with no intended send time (proxy
  traffic, closed loop) have no send lag and cannot fail the check.

Time base: a request occupies ``[sent_at_unix_s, sent_at_unix_s + e2e_us]`` of wall time
(a failed one without E2E occupies its send instant). Throughput divides by the union of
a side's request intervals (``active_s``), so alternate mode does not count the other
side's turns. Values are kept in compact arrays (about 60 bytes per request), so a long
proxy run keeps its exact percentiles.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from specproxy.core.compare import Metric, metric_value
from specproxy.core.histogram import SUMMARY_PERCENTILES, nearest_rank_index
from specproxy.core.model import RequestRecord, Role

DEFAULT_MAX_SEND_LAG_MS = 10.0
"""A side whose p99 send lag exceeds this did not meet its intended load (``--max-lag-ms``)."""


@dataclass(frozen=True, slots=True)
class LatencyQuantiles:
    """``SUMMARY_PERCENTILES`` of one metric on one side, in microseconds.

    ``ok`` is over completed requests; ``with_failures`` counts every failed request as
    ``inf`` (a percentile that lands on a failure is ``inf``). ``max_us`` is the slowest
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
    """What one side did in the window (warm-up excluded; see the module docstring)."""

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
    send_lag_p50_us: float | None
    send_lag_p99_us: float | None
    send_lag_max_us: float | None
    send_lag_count: int = 0
    max_send_lag_us: float = DEFAULT_MAX_SEND_LAG_MS * 1000
    warmup_failed: int = 0

    def __post_init__(self) -> None:
        if self.completed > self.requests:
            raise ValueError("completed > requests")
        if self.warmup_failed > self.warmup_excluded:
            raise ValueError("warmup_failed > warmup_excluded")

    @property
    def failed(self) -> int:
        return self.requests - self.completed

    @property
    def lagged(self) -> bool:
        """True when sending fell behind the intended schedule (p99 send lag over the limit)."""
        return self.send_lag_p99_us is not None and self.send_lag_p99_us > self.max_send_lag_us

    def quantiles(self, metric: Metric) -> LatencyQuantiles:
        return next(q for q in self.latency if q.metric is metric)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form experiment.json stores (microseconds; an infinite value is null)."""
        out: dict[str, Any] = {
            "requests": self.requests,
            "completed": self.completed,
            "failed": self.failed,
            "failed_by_kind": dict(self.failures),
            "warmup_excluded": self.warmup_excluded,
            "warmup_failed": self.warmup_failed,
            "output_tokens": self.output_tokens,
            "output_tokens_per_s": _round(self.output_tokens_per_s, 2),
            "requests_per_s": _round(self.requests_per_s, 3),
            "active_s": round(self.active_s, 3),
            "span_s": round(self.span_s, 3),
            "in_flight_at_send": [self.load_min, self.load_max],
        }
        for lat in self.latency:
            out[lat.metric.value] = _latency_dict(lat)
        out["send_lag_us"] = {
            "p50": _finite(self.send_lag_p50_us),
            "p99": _finite(self.send_lag_p99_us),
            "max": _finite(self.send_lag_max_us),
            "count": self.send_lag_count,
            "limit_p99": self.max_send_lag_us,
            "lagged": self.lagged,
        }
        return out


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _latency_dict(lat: LatencyQuantiles) -> dict[str, Any]:
    names = [f"p{q:g}" for q in SUMMARY_PERCENTILES]
    ok = lat.ok or (None,) * len(names)
    worst = lat.with_failures or (None,) * len(names)
    out: dict[str, Any] = {name: _finite(v) for name, v in zip(names, ok, strict=True)}
    out["max"] = lat.max_us
    out["count"] = lat.n_ok
    out["failed"] = lat.n_failed
    out["with_failures"] = {n: _finite(v) for n, v in zip(names, worst, strict=True)}
    return out


def format_ms(value_us: float | None, dash: str = "–") -> str:
    """Microseconds as milliseconds at 3 significant figures (at least 0.01 ms); ``inf`` (a
    failure counted as the worst case) as ``failed``. Every printed latency uses this."""
    if value_us is None:
        return dash
    if math.isinf(value_us):
        return "failed"
    value = value_us / 1000.0
    if value >= 100:
        return f"{value:.0f} ms"
    return f"{value:.1f} ms" if value >= 10 else f"{value:.2f} ms"


def load_met(sides: Iterable[SideSummary]) -> bool:
    """The run met its intended load: no side's p99 send lag is over its limit."""
    return not any(s.lagged for s in sides)


def _quantiles(ordered: Sequence[float], extra_inf: int) -> tuple[float, ...]:
    """``SUMMARY_PERCENTILES`` of ``ordered`` plus ``extra_inf`` infinite values after it."""
    n = len(ordered) + extra_inf
    out = []
    for q in SUMMARY_PERCENTILES:
        index = nearest_rank_index(q, n)
        out.append(ordered[index] if index < len(ordered) else math.inf)
    return tuple(out)


class SideTally:
    """Running figures of one side (mutable, one writer); see the module docstring."""

    __slots__ = (
        "_ends",
        "_lags",
        "_loads",
        "_starts",
        "_values",
        "completed",
        "failed_by_kind",
        "output_tokens",
        "requests",
        "side",
        "warmup_excluded",
        "warmup_failed",
    )

    def __init__(self, side: Role) -> None:
        self.side = side
        self.requests = 0
        self.completed = 0
        self.failed_by_kind: Counter[str] = Counter()
        self.output_tokens = 0
        self.warmup_excluded = 0
        self.warmup_failed = 0
        self._values = {metric: array("q") for metric in Metric}
        self._starts = array("d")
        self._ends = array("d")
        self._lags = array("q")
        self._loads = array("q")

    @property
    def failed(self) -> int:
        return self.requests - self.completed

    def add(self, record: RequestRecord) -> None:
        """Count ``record`` (which must be this side's)."""
        if record.side is not self.side:
            raise ValueError(f"a {record.side.value} record in the {self.side.value} tally")
        m = record.measurement
        if record.warmup:
            self.warmup_excluded += 1
            self.warmup_failed += m.error_kind is not None
            return
        self.requests += 1
        if m.error_kind is not None:
            self.failed_by_kind[m.error_kind.value] += 1
        else:
            self.completed += 1
            self.output_tokens += m.completion_tokens or 0
            for metric, values in self._values.items():
                value = metric_value(record, metric)
                if value is not None:
                    values.append(value)
        start = record.sent_at_unix_s
        self._starts.append(start)
        self._ends.append(start + (m.e2e_us / 1e6 if m.e2e_us is not None else 0.0))
        lag = record.send_lag_us
        if lag is not None:
            self._lags.append(lag)
        self._loads.append(record.in_flight_at_send)

    def _latency(self, metric: Metric) -> LatencyQuantiles:
        ordered = sorted(self._values[metric])
        failed = self.failed
        if not ordered:
            return LatencyQuantiles(metric, 0, failed, None, None, None)
        return LatencyQuantiles(
            metric=metric,
            n_ok=len(ordered),
            n_failed=failed,
            ok=_quantiles(ordered, 0),
            with_failures=_quantiles(ordered, failed),
            max_us=ordered[-1],
        )

    def summary(self, max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS) -> SideSummary:
        """The frozen summary so far; ``max_send_lag_ms`` is the load-met limit at p99."""
        if max_send_lag_ms <= 0 or not math.isfinite(max_send_lag_ms):
            raise ValueError(f"max_send_lag_ms must be a positive number, got {max_send_lag_ms}")
        span = max(self._ends) - min(self._starts) if self._starts else 0.0
        active = _union_length(sorted(zip(self._starts, self._ends, strict=True)))
        lags = sorted(self._lags)

        def lag(q: float) -> float | None:
            return float(lags[nearest_rank_index(q, len(lags))]) if lags else None

        return SideSummary(
            side=self.side,
            requests=self.requests,
            completed=self.completed,
            warmup_excluded=self.warmup_excluded,
            warmup_failed=self.warmup_failed,
            failures=tuple(sorted(self.failed_by_kind.items())),
            latency=tuple(self._latency(m) for m in Metric),
            output_tokens=self.output_tokens,
            span_s=span,
            active_s=active,
            output_tokens_per_s=self.output_tokens / active if active > 0 else None,
            requests_per_s=self.completed / active if active > 0 else None,
            load_min=min(self._loads) if self._loads else None,
            load_max=max(self._loads) if self._loads else None,
            send_lag_p50_us=lag(50.0),
            send_lag_p99_us=lag(99.0),
            send_lag_max_us=float(lags[-1]) if lags else None,
            send_lag_count=len(lags),
            max_send_lag_us=max_send_lag_ms * 1000,
        )


def _union_length(intervals: Sequence[tuple[float, float]]) -> float:
    """Total length covered by sorted ``(start, end)`` intervals."""
    total = 0.0
    cur_start = cur_end = None
    for start, end in intervals:
        if cur_end is None or start > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


def summarise_side(
    records: Iterable[RequestRecord],
    side: Role,
    max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS,
) -> SideSummary:
    """Summary of ``side`` over ``records`` (which may hold both sides)."""
    tally = SideTally(side)
    for record in records:
        if record.side is side:
            tally.add(record)
    return tally.summary(max_send_lag_ms)
