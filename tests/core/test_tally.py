"""Per-side tallies (``core.records.tally``) and the one percentile rule (``core.measurement.histogram``)."""

from __future__ import annotations

import math
import random

import pytest

from specproxy.core.compare.pairing import Metric
from specproxy.core.measurement.histogram import LatencyHistogram, nearest_rank, nearest_rank_index
from specproxy.core.records.model import ErrorKind, Role
from specproxy.core.records.tally import SideTally, format_ms, load_met
from specproxy.testing.fabricate import record
from tests.oracles.sides import summarise_side

B, C = Role.BASELINE, Role.CANDIDATE


def test_nearest_rank_of_the_issue_example_is_two_not_two_and_a_half() -> None:
    """p50 of {1, 2, 3, 10} ms is 2 ms, on exact values and on a histogram alike."""
    assert nearest_rank([1_000, 2_000, 3_000, 10_000], 50.0) == 2_000
    hist = LatencyHistogram()
    for value in (1_000, 2_000, 3_000, 10_000):
        hist.record(value)
    assert hist.percentile(50.0) == 2_000


def test_nearest_rank_index_is_ceil_of_p_times_n() -> None:
    """The rank is ceil(p/100 * n), at least 1, with no floating-point overshoot."""
    assert nearest_rank_index(0.0, 5) == 0
    assert nearest_rank_index(100.0, 5) == 4
    assert nearest_rank_index(99.0, 100) == 98
    assert nearest_rank_index(99.9, 1000) == 998  # 99.9 * 1000 / 100 is a hair over 999
    assert nearest_rank_index(99.0, 160) == 158  # ceil(158.4) = 159th; rounding would say 158th
    with pytest.raises(ValueError, match="empty"):
        nearest_rank_index(50.0, 0)


def test_histogram_percentile_is_the_exact_one_rounded_up_to_three_digits() -> None:
    """On random data the histogram's percentile is the exact nearest-rank value, up to 0.1%."""
    rng = random.Random(7)
    for n in (1, 2, 3, 160, 1001):
        values = sorted(rng.randint(1, 10**7) for _ in range(n))
        hist = LatencyHistogram()
        for v in values:
            hist.record(v)
        found = hist.percentiles((50.0, 90.0, 99.0, 99.9))
        for q, got in found.items():
            exact = nearest_rank(values, q)
            assert exact <= got <= exact * 1.001 + 1, (n, q)


def test_side_summary_counts_failures_and_worst_case_quantiles() -> None:
    """Failures are counted per class, and quantiles counting them as worst turn infinite."""
    recs = [record(B, str(i), e2e_us=1_000 * (i + 1), sent_at=i) for i in range(8)]
    recs += [
        record(B, "x", error=ErrorKind.TIMEOUT, sent_at=1),
        record(B, "y", error=ErrorKind.HTTP_5XX),
    ]
    s = summarise_side(recs, B)
    assert (s.requests, s.completed, s.failed) == (10, 8, 2)
    assert s.failures == (("http_5xx", 1), ("timeout", 1))
    e2e = s.quantiles(Metric.E2E)
    assert e2e.ok is not None and e2e.with_failures is not None
    assert e2e.ok[0] == 4_000  # 4th of 8 (nearest rank), not 4,500
    assert e2e.with_failures[0] == 5_000  # 5th of 8 values + 2 x inf
    assert math.isinf(e2e.with_failures[2])
    assert e2e.max_us == 8_000


def test_warmup_is_counted_apart_and_in_nothing_else() -> None:
    """Warm-up records (one failed) change only the warm-up counts, never a figure."""
    live = [record(B, str(i), e2e_us=1_000 * (i + 1), sent_at=i, intended_send_us=0)
            for i in range(4)]  # fmt: skip
    warm = [
        record(B, "w1", e2e_us=9_000_000, tokens=999, warmup=True, intended_send_us=-(10**7)),
        record(B, "w2", error=ErrorKind.TIMEOUT, warmup=True),
    ]
    with_warm, without = summarise_side(live + warm, B), summarise_side(live, B)
    assert (with_warm.warmup_excluded, with_warm.warmup_failed) == (2, 1)
    assert (without.warmup_excluded, without.warmup_failed) == (0, 0)
    strip = {"warmup_excluded", "warmup_failed"}
    a = {k: v for k, v in with_warm.to_dict().items() if k not in strip}
    b = {k: v for k, v in without.to_dict().items() if k not in strip}
    assert a == b


def test_streamed_tally_equals_the_summary_of_the_records() -> None:
    """Feeding records one by one gives the same summary as summarising the list."""
    recs = [record(C, str(i), e2e_us=500 * (i % 7 + 1), sent_at=i * 0.1) for i in range(30)]
    recs.append(record(C, "f", error=ErrorKind.CONNECT))
    tally = SideTally(C)
    for rec in recs:
        tally.add(rec)
    assert tally.summary() == summarise_side(recs, C)
    with pytest.raises(ValueError, match="baseline record in the candidate tally"):
        tally.add(record(B, "1"))


def test_throughput_uses_active_time() -> None:
    """Tokens/s divides by the time requests were in flight, not by gaps between them."""
    recs = [
        record(B, "1", e2e_us=1_000_000, tokens=100, sent_at=0.0),
        record(B, "2", e2e_us=1_000_000, tokens=300, sent_at=0.5),
        record(B, "3", e2e_us=1_000_000, tokens=200, sent_at=10.0),
    ]
    s = summarise_side(recs, B)
    assert s.span_s == pytest.approx(11.0)
    assert s.active_s == pytest.approx(2.5)
    assert s.output_tokens_per_s == pytest.approx(600 / 2.5)
    assert s.requests_per_s == pytest.approx(3 / 2.5)


def test_load_met_is_p99_send_lag_within_the_configured_limit() -> None:
    """A side lags when its p99 send lag exceeds the limit it was given; a run meets its
    load only when no side lags."""
    recs = [record(B, str(i), sent_at=1.0, intended_send_us=1_000_000) for i in range(99)]
    recs += [record(C, "c", sent_at=1.0, intended_send_us=1_000_000 - 5_000)]  # 5 ms late
    base = summarise_side(recs, B, max_send_lag_ms=2.0)
    cand = summarise_side(recs, C, max_send_lag_ms=2.0)
    assert base.send_lag_p99_us == 0 and not base.lagged
    assert cand.send_lag_p99_us == 5_000 and cand.lagged
    assert not load_met([base, cand])
    assert load_met([base, summarise_side(recs, C, max_send_lag_ms=5.0)])
    with pytest.raises(ValueError, match="max_send_lag_ms"):
        summarise_side(recs, B, max_send_lag_ms=0.0)


def test_format_ms_keeps_three_significant_figures() -> None:
    """Printed latencies: 3 significant figures, ``failed`` for inf, a dash for None."""
    assert [format_ms(v) for v in (1_234, 12_345, 123_456)] == ["1.23 ms", "12.3 ms", "123 ms"]
    assert format_ms(math.inf) == "failed"
    assert format_ms(None, "-") == "-"
