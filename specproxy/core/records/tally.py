"""Per-side summaries: the one definition of every per-side count, rate and percentile.

Pure. ``build_side_summary`` builds the frozen ``SideSummary`` that experiment.json, the
reports and the replay's printed summary all show, deriving every figure in it from what
one of two paths reduced a side's records to: ``SideTally``, fed one ``RequestRecord`` at
a time (the recorder, as it writes), or the report's column pass over the saved records
(``core.compare.column_figures.side_summary``). Rules (where they pick records, both
paths apply them; ``tests/report/test_side_summary_paths.py`` holds the two equal):

- **Warm-up.** A warm-up record is counted in ``warmup_excluded`` (and, when it failed,
  in ``warmup_failed``) and in nothing else: not in requests, completed, failed, tokens,
  latency, throughput, load or send lag.
- **Failures.** A request failed when it has an error class (a shadow copy, dropped or
  not, counts on its side); ``requests = completed + failed``, ``failures`` by class.
  Latency percentiles are over completed requests, and over every request with each
  failure counted as the worst case (``inf``).
- **Percentiles.** Nearest rank (``core.measurement.histogram.PERCENTILE_RULE``) on the exact
  microsecond values: at any size in the column pass and a tally with ``exact_limit=None``,
  up to ``EXACT_LIMIT`` requests per side in the recorder's (experiment.json, the replay's
  printed summary), so below it they agree exactly. Past it, every value so far moves into
  an HdrHistogram (3 significant digits) and the arrays are freed, so memory stops growing;
  a percentile is then its bucket's highest equivalent value (the exact one rounded up by
  at most 0.1%, never above the exact maximum, which is always kept) and
  ``SideSummary.percentiles`` says ``"histogram"``. Counts, tokens, maxima, span and load
  stay exact.
- **Load met.** A side met its intended load when its p99 send lag is at most
  ``max_send_lag_us`` (``--max-lag-ms``, default ``DEFAULT_MAX_SEND_LAG_MS``); a run met
  it when every side did (``load_met``). Requests with no intended send time (proxy
  traffic, closed loop) have no send lag and cannot fail the check.

Time base: a request occupies ``[sent_at_unix_s, sent_at_unix_s + e2e_us]`` of wall time
(a failed one without E2E occupies its send instant). Throughput divides by the union of
a side's request intervals (``active_s``), so alternate mode does not count the other
side's turns. The tally merges it as records come (``core.records.bounded.Coverage``); past the
limit it holds at most ``INTERVAL_LIMIT`` disjoint intervals (a request that started
before the folded part counts from there on). Below the limit a tally holds about 48
bytes per request (three latencies, a send lag, an interval when idle gaps separate it).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specproxy.core.compare.pairing import Metric, metric_value
from specproxy.core.measurement.histogram import SUMMARY_PERCENTILES, nearest_rank_index
from specproxy.core.records.bounded import Coverage, Ranked, Sample
from specproxy.core.records.model import RequestRecord, Role

DEFAULT_MAX_SEND_LAG_MS = 10.0
"""A side whose p99 send lag exceeds this did not meet its intended load (``--max-lag-ms``)."""
EXACT_LIMIT = 100_000
"""Requests per side whose values a bounded tally (the recorder's) keeps one by one; past it,
its percentiles come from histograms (``SideSummary.percentiles == "histogram"``)."""
PERCENTILE_SOURCES = ("exact", "histogram")
"""``SideSummary.percentiles``: exact nearest-rank values, or histogram (3 significant digits)."""
INTERVAL_LIMIT = 4096
"""Disjoint request intervals a bounded tally holds past ``EXACT_LIMIT`` (``core.records.bounded``)."""


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
    """What one side did in the window (warm-up excluded; see the module docstring).

    ``percentiles`` is ``"exact"``, or ``"histogram"`` once a bounded tally passed its limit.
    """

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
    percentiles: str = "exact"

    def __post_init__(self) -> None:
        if self.completed > self.requests:
            raise ValueError("completed > requests")
        if self.percentiles not in PERCENTILE_SOURCES:
            raise ValueError(f"percentiles must be one of {PERCENTILE_SOURCES}")
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
            "percentiles": self.percentiles,
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


def excluded_name(warmup: int, cooldown: int) -> str:
    """What the requests sent but not counted are (``warmup_excluded``): ``warm-up``,
    ``cool-down`` (a sweep's concurrency level with ``--warmup 0``) or both."""
    if cooldown > 0:
        return "warm-up and cool-down" if warmup > 0 else "cool-down"
    return "warm-up"


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


class SideTally:
    """Running figures of one side (mutable, one writer); see the module docstring.
    ``exact_limit`` None keeps every value; a number bounds the memory (``percentiles``)."""

    __slots__ = (
        "_coverage",
        "_interval_limit",
        "_lags",
        "_limit",
        "_values",
        "completed",
        "failed_by_kind",
        "load_max",
        "load_min",
        "output_tokens",
        "requests",
        "side",
        "warmup_excluded",
        "warmup_failed",
    )

    def __init__(
        self,
        side: Role,
        exact_limit: int | None = None,
        *,
        interval_limit: int = INTERVAL_LIMIT,
    ) -> None:
        if exact_limit is not None and exact_limit < 1:
            raise ValueError(f"exact_limit must be >= 1 or None, got {exact_limit}")
        if interval_limit < 2:
            raise ValueError(f"interval_limit must be >= 2, got {interval_limit}")
        self.side = side
        self.requests = 0
        self.completed = 0
        self.failed_by_kind: Counter[str] = Counter()
        self.output_tokens = 0
        self.warmup_excluded = 0
        self.warmup_failed = 0
        self.load_min: int | None = None
        self.load_max: int | None = None
        self._limit, self._interval_limit = exact_limit, interval_limit
        bounded = exact_limit is not None
        self._values = {metric: Sample(bounded=bounded) for metric in Metric}
        self._lags = Sample(bounded=bounded)
        self._coverage = Coverage()

    @property
    def failed(self) -> int:
        return self.requests - self.completed

    @property
    def exact(self) -> bool:
        """True while every percentile is exact (at most ``exact_limit`` requests so far)."""
        return self._lags.exact

    @property
    def stored(self) -> int:
        """Values held one by one (latencies, send lags, intervals): what grows with requests."""
        samples = (*self._values.values(), self._lags)
        return sum(s.stored for s in samples) + self._coverage.stored

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
                    values.add(value)
        start = record.sent_at_unix_s
        self._coverage.add(start, start + (m.e2e_us / 1e6 if m.e2e_us is not None else 0.0))
        lag = record.send_lag_us
        if lag is not None:
            self._lags.add(lag)
        load = record.in_flight_at_send
        self.load_min = load if self.load_min is None else min(self.load_min, load)
        self.load_max = load if self.load_max is None else max(self.load_max, load)
        if self._limit is not None and self.requests > self._limit and self.exact:
            self._bound()

    def _bound(self) -> None:
        """Past ``exact_limit``: values into histograms, the interval list capped."""
        for sample in (*self._values.values(), self._lags):
            sample.to_histogram()
        self._coverage.bound(self._interval_limit)

    def summary(self, max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS) -> SideSummary:
        """The frozen summary so far; ``max_send_lag_ms`` is the load-met limit at p99."""
        cover = self._coverage
        return build_side_summary(
            self.side,
            requests=self.requests,
            failures=self.failed_by_kind,
            warmup_excluded=self.warmup_excluded,
            warmup_failed=self.warmup_failed,
            latency=self._values,
            output_tokens=self.output_tokens,
            span_s=cover.last - cover.first if self.requests else 0.0,
            active_s=cover.length(),
            load_min=self.load_min,
            load_max=self.load_max,
            lags=self._lags,
            max_send_lag_ms=max_send_lag_ms,
        )


def build_side_summary(
    side: Role,
    *,
    requests: int,
    failures: Mapping[str, int],
    warmup_excluded: int,
    warmup_failed: int,
    latency: Mapping[Metric, Ranked],
    output_tokens: int,
    span_s: float,
    active_s: float,
    load_min: int | None,
    load_max: int | None,
    lags: Ranked,
    max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS,
) -> SideSummary:
    """``side``'s ``SideSummary`` from what a path reduced its live (not warm-up) records
    to; every figure in it is derived here (module docstring: the rules). ``failures``
    counts the failed ``requests`` by error class (the rest completed); ``latency`` holds
    each metric's values over the completed ones; ``span_s`` and ``active_s`` follow the
    time base; the loads are those in flight at send; ``lags`` are the send lags."""
    if max_send_lag_ms <= 0 or not math.isfinite(max_send_lag_ms):
        raise ValueError(f"max_send_lag_ms must be a positive number, got {max_send_lag_ms}")
    failed = sum(failures.values())
    completed = requests - failed
    lag50, lag99, lag_max = _lag_figures(lags)
    exact = lags.exact and all(values.exact for values in latency.values())
    return SideSummary(
        side=side,
        requests=requests,
        completed=completed,
        warmup_excluded=warmup_excluded,
        warmup_failed=warmup_failed,
        failures=tuple(sorted(failures.items())),
        latency=tuple(_latency(m, latency[m], failed) for m in Metric),
        output_tokens=output_tokens,
        span_s=span_s,
        active_s=active_s,
        output_tokens_per_s=output_tokens / active_s if active_s > 0 else None,
        requests_per_s=completed / active_s if active_s > 0 else None,
        load_min=load_min,
        load_max=load_max,
        send_lag_p50_us=lag50,
        send_lag_p99_us=lag99,
        send_lag_max_us=lag_max,
        send_lag_count=lags.count,
        max_send_lag_us=max_send_lag_ms * 1000,
        percentiles="exact" if exact else "histogram",
    )


def _lag_figures(lags: Ranked) -> tuple[float | None, float | None, float | None]:
    """The send lags' p50 and p99 (nearest rank) and maximum; None without any."""
    top = lags.max
    if not lags.count or top is None:
        return None, None, None
    p50, p99 = lags.at_ranks(_ranks((50.0, 99.0), lags.count))
    return float(p50), float(p99), float(top)


def _ranks(percentiles: Sequence[float], n: int) -> list[int]:
    """The 1-based nearest rank (``core.measurement.histogram``'s rule) of each percentile of ``n`` values."""
    return [nearest_rank_index(q, n) + 1 for q in percentiles]


def _latency(metric: Metric, values: Ranked, failed: int) -> LatencyQuantiles:
    """``metric``'s quantiles over the completed ``values``, and with the ``failed`` after
    them as ``inf``, the ranks of both looked up in one pass."""
    n = values.count
    if not n:
        return LatencyQuantiles(metric, 0, failed, None, None, None)
    ok_ranks, all_ranks = _ranks(SUMMARY_PERCENTILES, n), _ranks(SUMMARY_PERCENTILES, n + failed)
    wanted = sorted({rank for rank in (*ok_ranks, *all_ranks) if rank <= n})
    found = dict(zip(wanted, values.at_ranks(wanted), strict=True))
    ok = tuple(found[rank] for rank in ok_ranks)
    with_failures = tuple(found.get(rank, math.inf) for rank in all_ranks)
    return LatencyQuantiles(metric, n, failed, ok, with_failures, values.max)
