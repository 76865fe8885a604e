"""Failures inside the paired verdict: the failure-aware ratio, the paired failure-rate
interval and the verdict and recommendation rules built on them."""

from __future__ import annotations

import math
import random

import pytest

from specproxy.core.compare import conditions as cc
from specproxy.core.compare.failures import compare_failures
from specproxy.core.compare.pairing import Metric, PairedRatio, find_pairs, paired_ratio
from specproxy.core.compare.verdict import VerdictLabel, decide, recommend
from specproxy.core.records.model import ErrorKind, RequestRecord, Role, SendMode
from specproxy.core.statistics.stats import Interval, paired_difference_interval, quantile_interval
from specproxy.testing.fabricate import record
from tests.report.test_failures_report import TIMEOUTS, issue_case

B, C = Role.BASELINE, Role.CANDIDATE
Z95 = 1.959963984540054


def test_failure_aware_ratio_of_each_outcome() -> None:
    """Only the candidate failed → +inf, only the baseline → 0, both → not ranked but counted."""
    recs = [
        record(B, "ok", e2e_us=1_000_000),
        record(C, "ok", e2e_us=800_000),
        record(B, "cand", e2e_us=1_000_000),
        record(C, "cand", error=ErrorKind.TIMEOUT),
        record(B, "base", error=ErrorKind.HTTP_5XX),
        record(C, "base", e2e_us=900_000),
        record(B, "both", error=ErrorKind.CONNECT),
        record(C, "both", error=ErrorKind.TIMEOUT),
    ]
    pairs = {p.key[1]: p for p in find_pairs(recs).pairs}
    assert pairs["ok"].failure_aware_ratio(Metric.E2E) == pytest.approx(0.8)
    assert pairs["cand"].failure_aware_ratio(Metric.E2E) == math.inf
    assert pairs["base"].failure_aware_ratio(Metric.E2E) == 0.0
    assert pairs["both"].failure_aware_ratio(Metric.E2E) is None
    ratio = paired_ratio(list(pairs.values()), Metric.E2E)
    assert (ratio.n, ratio.candidate_failed, ratio.baseline_failed, ratio.both_failed) == (
        3,
        1,
        1,
        1,
    )
    assert ratio.completed == 1
    assert ratio.interval is not None and ratio.interval.point == pytest.approx(0.8)


def test_shadow_drop_pairs_with_its_primary_and_counts_as_candidate_failure() -> None:
    """A dropped shadow copy (same pair id as its primary) is a candidate-only failure (+inf)."""
    recs = [record(B, "p1", e2e_us=1_000_000), record(C, "p1", error=ErrorKind.SHADOW_DROPPED)]
    pairing = find_pairs(recs)
    assert pairing.counts.pairs == 1 and pairing.counts.candidate_failed_only == 1
    assert pairing.pairs[0].failure_aware_ratio(Metric.TPOT) == math.inf
    assert compare_failures(pairing.counts).candidate_only == 1


def _mostly_failing(ok_from: int) -> list[RequestRecord]:
    """60 pairs sent in order: the candidate fails 4 of every 5 before pair ``ok_from`` and
    completes at half the baseline's E2E from there on."""
    recs: list[RequestRecord] = []
    for i in range(60):
        recs.append(record(B, f"p{i}", e2e_us=1_000_000, sent_at=float(i)))
        failed = i % 5 != 0 and i < ok_from
        recs.append(
            record(C, f"p{i}", error=ErrorKind.TIMEOUT, sent_at=float(i))
            if failed
            else record(C, f"p{i}", e2e_us=500_000, sent_at=float(i))
        )
    return recs


def test_infinite_interval_end_is_ordered_not_computed() -> None:
    """With most pairs failing on the candidate in every segment, the median and both ends
    are +inf (the units' order statistics, no arithmetic on inf), no NaN; with the failures
    in 5 of 6 segments only, the interval reaches down to the sixth one's ratio."""
    ratio = paired_ratio(find_pairs(_mostly_failing(60)).pairs, Metric.E2E)
    assert ratio.interval is not None and ratio.units == 6
    assert ratio.interval.point == math.inf and ratio.interval.low == math.inf
    assert decide(ratio, mode=SendMode.MIRROR).label is VerdictLabel.SLOWER
    ratio = paired_ratio(find_pairs(_mostly_failing(50)).pairs, Metric.E2E)
    assert ratio.interval is not None and ratio.interval.low == pytest.approx(0.5)
    assert ratio.interval.point == math.inf and not math.isnan(ratio.interval.high)
    assert decide(ratio, mode=SendMode.MIRROR).label is VerdictLabel.INCONCLUSIVE


def _score_by_likelihood(x: int, y: int, n: int, d: float) -> float:
    """Tango's statistic with the constrained rate of baseline-only pairs found by direct
    maximisation of the likelihood (golden-section search), not by the closed form."""
    lo, hi = max(0.0, -d) + 1e-12, (1.0 - d) / 2.0 - 1e-12
    rest = n - x - y

    def loglik(q: float) -> float:
        return x * math.log(q + d) + y * math.log(q) + rest * math.log(1.0 - 2.0 * q - d)

    g = (math.sqrt(5.0) - 1.0) / 2.0
    for _ in range(200):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        lo, hi = (lo, b) if loglik(a) > loglik(b) else (a, hi)
    q = (lo + hi) / 2.0
    return (x - y - n * d) / math.sqrt(n * (2.0 * q + d * (1.0 - d)))


@pytest.mark.parametrize(("x", "y", "n"), [(38, 0, 400), (5, 3, 50), (1, 7, 21), (12, 9, 300)])
def test_tango_interval_ends_are_where_the_score_reaches_z(x: int, y: int, n: int) -> None:
    """At each end of the interval the score statistic, recomputed by maximising the
    likelihood directly, is ±1.96: the interval is the inverted 95% score test."""
    iv = paired_difference_interval(x, y, n)
    assert iv.point == pytest.approx((x - y) / n)
    assert _score_by_likelihood(x, y, n, iv.low) == pytest.approx(Z95, abs=1e-4)
    assert _score_by_likelihood(x, y, n, iv.high) == pytest.approx(-Z95, abs=1e-4)
    mirrored = paired_difference_interval(y, x, n)
    assert (mirrored.low, mirrored.high) == pytest.approx((-iv.high, -iv.low))


def test_tango_interval_without_discordant_pairs_is_not_a_point() -> None:
    """No discordant pair: the interval is ±z²/(n+z²), not the Wald interval's single 0."""
    iv = paired_difference_interval(0, 0, 100)
    edge = Z95 * Z95 / (100 + Z95 * Z95)
    assert (iv.low, iv.point, iv.high) == pytest.approx((-edge, 0.0, edge))
    with pytest.raises(ValueError, match="first_only"):
        paired_difference_interval(3, 2, 4)


def test_tango_interval_covers_about_95_percent() -> None:
    """Over 400 simulated runs of 200 pairs (failure rates 6% and 3%, correlated), the
    interval covers the true difference of 3 points in 92-98% of them."""
    covered = 0
    for seed in range(400):
        rng = random.Random(seed)
        x = y = 0
        for _ in range(200):
            u = rng.random()
            both = u < 0.02
            x += not both and u < 0.06
            y += not both and 0.06 <= u < 0.07
        covered += paired_difference_interval(x, y, 200).contains(0.03)
    assert 0.92 <= covered / 400 <= 0.98, covered


def _interval(low: float, high: float) -> PairedRatio:
    return PairedRatio(
        Metric.E2E, Interval((low + high) / 2, low, high, 400), 400, 0.6, units=10, clean_units=10
    )


def test_more_candidate_failures_block_faster_and_the_recommendation() -> None:
    """A clear speed-up with the candidate failing measurably more often is not faster, the
    reason names the failure-rate difference, the failure condition is MISSING and the
    failures-counted condition names the difference instead of hiding it."""
    pairing = find_pairs(issue_case())
    worse = compare_failures(pairing.counts)
    assert worse.candidate_fails_more
    v = decide(_interval(0.80, 0.90), mode=SendMode.MIRROR, failures=worse)
    assert v.label is VerdictLabel.INCONCLUSIVE
    assert "fails measurably more often" in v.reason and "failure-rate difference" in v.reason
    counted = cc.failures_counted("completed", SendMode.MIRROR, pairing.counts, {B: 400, C: 400})
    assert f"fails measurably more often ({TIMEOUTS / 400:+.1%} [95% CI" in counted.detail
    cond = cc.failure_rates(worse)
    assert not cond.met and f"{TIMEOUTS / 400:+.1%}" in cond.detail
    rec = recommend(v, [cond], simulated=False, aa=False, algorithm="EAGLE3", scope={})
    assert rec.text is None and cc.FAILURE_RATES in rec.reason
    slower = decide(_interval(1.10, 1.20), mode=SendMode.MIRROR, failures=worse)
    assert slower.label is VerdictLabel.SLOWER and "fails measurably more often" in slower.reason


def test_equal_failures_leave_the_verdict_alone() -> None:
    """Failure rates that do not differ measurably neither block nor change the verdict."""
    recs = []
    for i in range(100):
        fail_b, fail_c = i % 20 == 0, i % 20 == 1
        recs.append(record(B, f"p{i}", error=ErrorKind.TIMEOUT if fail_b else None))
        recs.append(record(C, f"p{i}", error=ErrorKind.TIMEOUT if fail_c else None))
    same = compare_failures(find_pairs(recs).counts)
    assert not same.candidate_fails_more and cc.failure_rates(same).met
    v = decide(_interval(0.80, 0.90), mode=SendMode.MIRROR, failures=same)
    assert v.label is VerdictLabel.FASTER


def test_issue_case_was_faster_on_completed_pairs_only() -> None:
    """The fabricated case reproduces the issue: completed pairs alone say faster."""
    pairs = find_pairs(issue_case()).pairs
    completed = [r for p in pairs if (r := p.ratio(Metric.E2E)) is not None]
    old = PairedRatio(Metric.E2E, quantile_interval(completed), len(completed), None, units=10)
    assert decide(old, mode=SendMode.MIRROR).label is VerdictLabel.FASTER


def _slow_failures(seed: int, n: int = 400) -> list[RequestRecord]:
    """Mirror pairs: the candidate is 0.95x (x e^(0.05 z) by size z) when it completes, and
    fails 20% of requests, the slow ones more (probability 0.4 Phi(z)); the true
    failure-aware median is 1.004 (bench/stats_coverage.py measures 1.057 x 0.95)."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    for i in range(n):
        z = rng.gauss(0.0, 1.0)
        base = int(1e6 * math.exp(0.5 * z))
        cand = int(base * 0.95 * math.exp(0.05 * z + 0.2 * rng.gauss(0.0, 1.0)))
        failed = rng.random() < 0.4 * (0.5 * (1.0 + math.erf(z / math.sqrt(2.0))))
        out.append(record(B, f"p{i}", e2e_us=base))
        out.append(record(C, f"p{i}", e2e_us=cand, error=ErrorKind.TIMEOUT if failed else None))
    return out


def test_candidate_failing_on_slow_requests_is_rarely_called_faster() -> None:
    """Over 60 runs of 400 pairs whose true failure-aware median is above 1, at most 5% are
    called faster, where the completed pairs alone say faster in most of them."""
    new = old = 0
    for seed in range(60):
        pairing = find_pairs(_slow_failures(seed))
        ratio = paired_ratio(pairing.pairs, Metric.E2E)
        failures = compare_failures(pairing.counts)
        new += decide(ratio, mode=SendMode.MIRROR, failures=failures).label is VerdictLabel.FASTER
        done = [r for p in pairing.pairs if (r := p.ratio(Metric.E2E)) is not None]
        completed = PairedRatio(Metric.E2E, quantile_interval(done), len(done), None, units=10)
        old += decide(completed, mode=SendMode.MIRROR).label is VerdictLabel.FASTER
    assert new <= 3, new
    assert old >= 30, old
