"""Bounded tallies (``core.records.tally`` with ``exact_limit``, ``core.records.bounded``): exact below the
limit, constant memory and histogram-precision percentiles past it."""

from __future__ import annotations

import math
import random

import pytest

from specproxy.core.compare.acceptance import AcceptanceTally
from specproxy.core.compare.pairing import Metric
from specproxy.core.measurement.histogram import LatencyHistogram, nearest_rank
from specproxy.core.records.bounded import PENDING_LIMIT, Coverage, Sample, SortedSample
from specproxy.core.records.model import (
    Acceptance,
    AcceptanceSource,
    ErrorKind,
    RequestRecord,
    Role,
)
from specproxy.core.records.tally import SideSummary, SideTally, build_side_summary
from specproxy.testing.fabricate import record

C = Role.CANDIDATE


def _records(n: int, seed: int) -> list[RequestRecord]:
    """``n`` records of mixed latencies, failures, warm-ups, idle gaps, send lags and loads."""
    rng = random.Random(seed)
    out = []
    t = 0.0
    for i in range(n):
        t += rng.choice((0.001, 0.01, 0.2, 2.0))  # overlapping requests and idle gaps
        intended = int(t * 1e6) - rng.randint(0, 20_000)
        if rng.random() < 0.1:
            kind = rng.choice((ErrorKind.TIMEOUT, ErrorKind.HTTP_5XX))
            out.append(record(C, str(i), error=kind, sent_at=t, intended_send_us=intended))
            continue
        e2e = rng.randint(1_000, 3_000_000)
        out.append(
            record(
                C, str(i), e2e_us=e2e, ttft_us=rng.randint(100, e2e),
                tpot_us=rng.randint(10, 50_000) if rng.random() < 0.8 else None,
                tokens=rng.randint(1, 500), sent_at=t, intended_send_us=intended,
                in_flight=rng.randint(0, 64), warmup=rng.random() < 0.02,
            )
        )  # fmt: skip
    return out


def _tally(records: list[RequestRecord], exact_limit: int | None, **kw: int) -> SideTally:
    tally = SideTally(C, exact_limit, **kw)
    for rec in records:
        tally.add(rec)
    return tally


def _sweep(intervals: list[tuple[float, float]]) -> float:
    """Union length by sorting and sweeping: the reference for ``Coverage``."""
    total, cur = 0.0, None
    for start, end in sorted(intervals):
        if cur is None or start > cur[1]:
            if cur is not None:
                total += cur[1] - cur[0]
            cur = [start, end]
        else:
            cur[1] = max(cur[1], end)
    return total + (cur[1] - cur[0] if cur is not None else 0.0)


def test_below_the_limit_a_bounded_tally_is_exact_and_equals_the_unbounded_one() -> None:
    """Up to the limit the summary is the exact one (same dataclass, ``percentiles="exact"``),
    with nearest-rank percentiles and the sort-and-sweep active time, to the last bit."""
    recs = _records(600, seed=1)
    live = [r for r in recs if not r.warmup]
    bounded = _tally(recs, exact_limit=len(live)).summary()
    assert bounded == _tally(recs, None).summary()
    assert bounded.percentiles == "exact" and bounded.to_dict()["percentiles"] == "exact"
    e2e = sorted(r.measurement.e2e_us for r in live if r.measurement.e2e_us is not None)
    assert bounded.quantiles(Metric.E2E).ok == tuple(nearest_rank(e2e, q) for q in (50, 90, 99))
    spans = [(r.sent_at_unix_s, r.sent_at_unix_s + (r.measurement.e2e_us or 0) / 1e6) for r in live]
    assert bounded.active_s == _sweep(spans)


def test_past_the_limit_memory_per_request_stops_growing() -> None:
    """Once over the limit the arrays are freed: however many requests follow, what is held
    one by one stays under a constant bound (the batch buffers and the interval limit)."""
    recs = _records(12_000, seed=2)
    tally = SideTally(C, 50, interval_limit=16)
    held = []
    for rec in recs:
        tally.add(rec)
        held.append(tally.stored)
    bound = 16 + (len(Metric) + 1) * PENDING_LIMIT
    assert held[45] > 2 * 45  # below the limit: several values per request
    assert max(held[60:]) <= bound < 2 * len(recs)  # exact values would be over 3 per request
    assert not tally.exact and tally.summary().percentiles == "histogram"


def _assert_close(exact: tuple[float, ...] | None, got: tuple[float, ...] | None) -> None:
    assert exact is not None and got is not None
    for want, found in zip(exact, got, strict=True):
        if math.isinf(want):
            assert math.isinf(found)
        else:
            assert want <= found <= want * 1.001 + 1


def test_past_the_limit_percentiles_agree_with_exact_ones_within_histogram_precision() -> None:
    """Histogram percentiles are the exact nearest-rank ones rounded up by at most 0.1%;
    counts, tokens, maxima, span, active time and load stay exact."""
    recs = _records(4000, seed=3)
    exact, bounded = _tally(recs, None).summary(), _tally(recs, 100, interval_limit=16).summary()
    assert bounded.percentiles == "histogram"
    for metric in Metric:
        want, got = exact.quantiles(metric), bounded.quantiles(metric)
        assert (got.n_ok, got.n_failed, got.max_us) == (want.n_ok, want.n_failed, want.max_us)
        _assert_close(want.ok, got.ok)
        _assert_close(want.with_failures, got.with_failures)
    _assert_close(
        (exact.send_lag_p50_us or 0.0, exact.send_lag_p99_us or 0.0),
        (bounded.send_lag_p50_us or 0.0, bounded.send_lag_p99_us or 0.0),
    )
    same = ("requests", "completed", "failures", "output_tokens", "span_s", "load_min",
            "load_max", "send_lag_max_us", "send_lag_count", "warmup_excluded")  # fmt: skip
    assert [getattr(bounded, f) for f in same] == [getattr(exact, f) for f in same]
    assert bounded.active_s == pytest.approx(exact.active_s, rel=1e-12)


def test_coverage_merges_intervals_in_any_order_like_a_sort_and_sweep() -> None:
    """Intervals arriving in any order, touching, nested or of zero length, cover exactly
    what sorting and sweeping them covers."""
    rng = random.Random(4)
    for _ in range(50):
        intervals = []
        for _ in range(rng.randint(1, 60)):
            start = rng.choice((0.0, 1.0, 2.5)) + rng.randint(0, 40) / 4
            intervals.append((start, start + rng.choice((0.0, 0.25, 0.5, 3.0))))
        cover = Coverage()
        for start, end in intervals:
            cover.add(start, end)
        assert cover.length() == _sweep(intervals)
        assert (cover.first, cover.last) == (
            min(s for s, _ in intervals),
            max(e for _, e in intervals),
        )


def test_bounded_coverage_counts_a_late_interval_only_after_its_horizon() -> None:
    """Past its limit the coverage folds old intervals; one arriving before the horizon
    counts from the horizon on, so it loses at most its own length."""
    cover = Coverage()
    cover.bound(4)
    for i in range(10):
        cover.add(float(i), i + 0.5)  # ten disjoint half-second intervals
    assert cover.stored <= 4
    assert cover.length() == pytest.approx(5.0)
    cover.add(0.0, 7.75)  # started long ago: only what lies after the folded part counts
    # folded: [0, 5.5) holds 3.0 s; the late one counts as [5.5, 7.75]; then 8-8.5, 9-9.5
    assert cover.length() == pytest.approx(3.0 + 2.25 + 1.0)
    with pytest.raises(ValueError, match="interval limit"):
        Coverage().bound(1)


def test_sample_ranks_come_from_the_histogram_but_never_exceed_the_exact_maximum() -> None:
    """A histogram sample answers rank queries by bucket, capped at the exact maximum."""
    sample = Sample()
    for value in (1_000_001, 1_000_002, 1_000_003):
        sample.add(value)
    assert sample.at_ranks([3, 1]) == [1_000_003, 1_000_001]
    sample.to_histogram()
    assert sample.stored == 0 and not sample.exact
    top, low = sample.at_ranks([3, 1])
    assert top == 1_000_003  # the bucket's highest equivalent value is above it
    assert 1_000_001 <= low <= 1_000_001 * 1.001


def test_a_bounded_sample_fed_all_along_ends_with_the_same_histogram() -> None:
    """A bounded sample, which feeds its histogram in batches from the start, answers every
    rank as an unbounded one that moves its values over at once."""
    rng = random.Random(6)
    values = [rng.randint(-5, 10**7) for _ in range(3 * PENDING_LIMIT + 17)]
    bounded, moved = Sample(bounded=True), Sample()
    for value in values:
        bounded.add(value)
        moved.add(value)
    assert bounded.exact and bounded.at_ranks([1, len(values)]) == [min(values), max(values)]
    bounded.to_histogram()
    moved.to_histogram()
    ranks = list(range(1, len(values) + 1, 97))
    assert bounded.at_ranks(ranks) == moved.at_ranks(ranks)
    assert bounded.max == moved.max == max(values)


def test_histogram_at_ranks_keeps_the_order_given_and_checks_the_range() -> None:
    """``LatencyHistogram.at_ranks`` answers ranks in the order asked; 0 or past the count is
    an error naming the range."""
    hist = LatencyHistogram()
    for value in (10, 20, 30, 40):
        hist.record(value)
    assert hist.at_ranks([4, 1, 2]) == [40, 10, 20]
    with pytest.raises(ValueError, match=r"1\.\.4"):
        hist.at_ranks([5])


def _built(
    latency: dict[Metric, Sample | SortedSample], lags: Sample | SortedSample
) -> SideSummary:
    return build_side_summary(
        C, requests=12, failures={"timeout": 2, "connect": 1}, warmup_excluded=3,
        warmup_failed=1, latency=latency, output_tokens=900, span_s=4.0, active_s=3.0,
        load_min=1, load_max=7, lags=lags, max_send_lag_ms=2.0,
    )  # fmt: skip


def test_the_summary_built_from_a_sample_or_from_sorted_values_is_the_same() -> None:
    """``build_side_summary`` reads a running ``Sample`` (the tally's) and the sorted values
    of the column pass alike, and derives completed, the rates and the failure view."""
    rng = random.Random(3)
    values = {m: [rng.randint(-5, 10**6) for _ in range(9)] for m in Metric}
    lags = [rng.randint(-100, 5_000) for _ in range(11)]
    samples = {m: Sample() for m in Metric}
    for m, vs in values.items():
        for v in vs:
            samples[m].add(v)
    lag_sample = Sample()
    for v in lags:
        lag_sample.add(v)
    from_sample = _built(dict(samples), lag_sample)
    from_sorted = _built({m: SortedSample(sorted(vs)) for m, vs in values.items()},
                         SortedSample(sorted(lags)))  # fmt: skip
    assert from_sample == from_sorted and repr(from_sample) == repr(from_sorted)
    assert (from_sorted.completed, from_sorted.failed) == (9, 3)
    assert from_sorted.failures == (("connect", 1), ("timeout", 2))
    assert from_sorted.requests_per_s == 3.0 and from_sorted.output_tokens_per_s == 300.0
    e2e = from_sorted.quantiles(Metric.E2E)
    assert e2e.ok is not None and e2e.with_failures is not None
    assert e2e.ok[0] == nearest_rank(sorted(values[Metric.E2E]), 50.0)
    assert e2e.with_failures[2] == math.inf  # p99 of 9 values and 3 failures is a failure
    assert from_sorted.send_lag_p99_us == float(max(lags)) == from_sorted.send_lag_max_us
    assert from_sorted.percentiles == "exact"
    lag_sample.to_histogram()  # one sample no longer exact: the summary says so
    assert _built(dict(samples), lag_sample).percentiles == "histogram"


def test_bad_limits_and_sources_are_refused() -> None:
    """A limit below 1 (or 2 intervals) and an unknown percentile source are clear errors."""
    with pytest.raises(ValueError, match="exact_limit"):
        SideTally(C, 0)
    with pytest.raises(ValueError, match="interval_limit"):
        SideTally(C, 10, interval_limit=1)
    base = _tally(_records(5, seed=5), None).summary()
    with pytest.raises(ValueError, match="percentiles"):
        SideSummary(**{**{f: getattr(base, f) for f in SideSummary.__slots__}, "percentiles": "x"})


def test_bounded_acceptance_keeps_counts_and_means_exact_and_stops_keeping_lengths() -> None:
    """Past its limit an acceptance tally keeps no more lengths, its count, mean and
    distribution stay those of every request, and its quantiles are withheld."""
    records = [
        record(Role.CANDIDATE, f"p{i}", sent_at=float(i), tokens=60, acceptance=Acceptance(
            source=AcceptanceSource.META_INFO, accept_length=length, verify_ct=round(60 / length)
        ))
        for i, length in enumerate(1.0 + (i % 4) * 0.5 for i in range(10))
    ]  # fmt: skip
    exact, bounded = AcceptanceTally(Role.CANDIDATE), AcceptanceTally(Role.CANDIDATE, limit=4)
    for rec in records:
        exact.add(rec)
        bounded.add(rec)
    full, kept = exact.summary(), bounded.summary()
    assert bounded.exact is False and len(bounded._lengths) == 4
    assert kept.n_requests == full.n_requests == 10
    assert kept.request_weighted_mean == pytest.approx(full.request_weighted_mean)
    assert kept.distribution == full.distribution
    assert kept.token_weighted_mean == full.token_weighted_mean
    assert full.quantiles is not None and kept.quantiles is None
