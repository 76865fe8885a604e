"""Quantiles, the exact-draw bootstrap and the Wilson interval on data with known answers."""

from __future__ import annotations

import bisect
import math
import random

import pytest

from specproxy.core.statistics.cluster import cluster_interval, lag_one_correlation
from specproxy.core.statistics.distributions import chi2_sf, student_t_cdf, student_t_quantile
from specproxy.core.statistics.stats import (
    Interval,
    bootstrap_quantile,
    bootstrap_quantile_ratio,
    order_statistic_ranks,
    quantile,
    quantile_interval,
    quantile_sorted,
    wilson_interval,
)


def test_quantile_interpolates_like_numpy_default() -> None:
    """The q-quantile interpolates linearly between order statistics (numpy's default)."""
    data = [4.0, 1.0, 3.0, 2.0]
    assert quantile(data, 0.0) == 1.0
    assert quantile(data, 1.0) == 4.0
    assert quantile(data, 0.5) == 2.5
    assert quantile(data, 0.9) == pytest.approx(3.7)


def test_quantile_reaching_a_failure_is_infinite() -> None:
    """A quantile that interpolates into an infinite value (a failed request) is infinite."""
    data = [1.0, 2.0, math.inf]
    assert quantile_sorted(data, 0.5) == 2.0
    assert quantile_sorted(data, 0.75) == math.inf
    assert quantile_sorted(data, 1.0) == math.inf


def test_quantile_rejects_empty_and_out_of_range() -> None:
    """An empty sample or a quantile outside [0, 1] is an error, not a made-up number."""
    with pytest.raises(ValueError, match="empty"):
        quantile([], 0.5)
    with pytest.raises(ValueError, match="outside"):
        quantile([1.0], 1.5)


def _naive_bootstrap(data: list[float], q: float, resamples: int, seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    n = len(data)
    draws = sorted(quantile([rng.choice(data) for _ in range(n)], q) for _ in range(resamples))
    return quantile_sorted(draws, 0.025), quantile_sorted(draws, 0.975)


def _rank_band(ordered: list[float], value: float) -> tuple[float, float]:
    """The values one order statistic either side of where ``value`` falls."""
    i = bisect.bisect_left(ordered, value)
    return ordered[max(i - 2, 0)], ordered[min(i + 1, len(ordered) - 1)]


@pytest.mark.parametrize(("q", "n"), [(0.5, 31), (0.5, 30), (0.9, 41)])
def test_exact_draw_bootstrap_matches_resampling(q: float, n: int) -> None:
    """Drawing a resample's quantile from the Beta law of its order statistics gives the same
    interval as materialising and sorting each resample (odd and even sizes)."""
    rng = random.Random(7)
    data = [rng.lognormvariate(0.0, 0.4) for _ in range(n)]
    fast = bootstrap_quantile(data, q, resamples=20000, seed=3)
    low, high = _naive_bootstrap(data, q, 20000, 11)
    ordered = sorted(data)
    lo_band, hi_band = _rank_band(ordered, low), _rank_band(ordered, high)
    assert lo_band[0] <= fast.low <= lo_band[1]
    assert hi_band[0] <= fast.high <= hi_band[1]


def test_even_median_interval_is_symmetric_in_rank() -> None:
    """For an even-sized sample the median's interval sits symmetrically around the middle."""
    data = [float(i) for i in range(1, 31)]
    iv = bootstrap_quantile(data, 0.5, resamples=20000, seed=1)
    assert iv.point == 15.5
    assert (15.5 - iv.low) == pytest.approx(iv.high - 15.5, abs=1.0)


def test_bootstrap_of_constant_ratio_is_exact() -> None:
    """Pairs that all have ratio 0.8 give the interval [0.8, 0.8]."""
    iv = bootstrap_quantile([0.8] * 50)
    assert (iv.point, iv.low, iv.high, iv.n) == (0.8, 0.8, 0.8, 50)


def test_bootstrap_is_seeded() -> None:
    """The same seed gives the same interval; a different seed may not."""
    data = [random.Random(1).random() for _ in range(200)]
    assert bootstrap_quantile(data, seed=5) == bootstrap_quantile(data, seed=5)


def test_quantile_ratio_point_and_interval() -> None:
    """The unpaired ratio of medians is the ratio of the two medians, inside its interval."""
    rng = random.Random(2)
    base = [rng.lognormvariate(0.0, 0.3) for _ in range(400)]
    cand = [0.5 * x for x in base]
    iv = bootstrap_quantile_ratio(cand, base, 0.5)
    assert iv.point == pytest.approx(0.5)
    assert iv.low < 0.5 < iv.high
    assert iv.n == 400


def test_intervals_over_ten_thousand_values_bracket_their_point() -> None:
    """On 10k values the resampled intervals bracket their point estimates and count every value.

    How long this takes is measured by ``bench/stats_speed.py``, not asserted here."""
    rng = random.Random(3)
    data = [rng.lognormvariate(0.0, 0.3) for _ in range(10_000)]
    median = bootstrap_quantile(data)
    assert median.low <= median.point <= median.high
    assert median.n == 10_000
    ratio = bootstrap_quantile_ratio(data, data, 0.99)
    assert ratio.point == pytest.approx(1.0)
    assert ratio.low <= 1.0 <= ratio.high


def test_wilson_interval_known_values() -> None:
    """Wilson 95% interval of 8/10 is [0.490, 0.943] (textbook values)."""
    iv = wilson_interval(8, 10)
    assert iv.point == 0.8
    assert iv.low == pytest.approx(0.4902, abs=1e-3)
    assert iv.high == pytest.approx(0.9433, abs=1e-3)
    assert wilson_interval(10, 10).high == 1.0


def test_interval_validates() -> None:
    """An interval with low above high, or confidence outside (0, 1), is refused."""
    with pytest.raises(ValueError, match="low"):
        Interval(point=1.0, low=2.0, high=1.0, n=3)
    with pytest.raises(ValueError, match="confidence"):
        Interval(point=1.0, low=1.0, high=1.0, n=3, confidence=1.0)


def test_order_statistic_ranks_known_values() -> None:
    """Median of 30: ranks 10 and 21 (coverage 95.7%); of 5: clamped to 1 and 5 (93.75%)."""
    low, up, coverage = order_statistic_ranks(30, 0.5)
    assert (low, up) == (10, 21)
    assert coverage == pytest.approx(0.95723, abs=1e-4)
    assert order_statistic_ranks(5, 0.5) == (1, 5, pytest.approx(0.9375))
    low, up, coverage = order_statistic_ranks(1000, 0.99)
    assert low < 990 < up and coverage >= 0.95


def test_quantile_interval_on_known_sample() -> None:
    """The median interval of 1..30 is [10, 21] around the median 15.5, and it states its coverage."""
    iv = quantile_interval([float(v) for v in range(30, 0, -1)])
    assert (iv.point, iv.low, iv.high, iv.n) == (15.5, 10.0, 21.0, 30)
    assert iv.confidence == pytest.approx(0.95723, abs=1e-4)


def test_quantile_interval_of_ten_thousand_uniform_values() -> None:
    """The median interval of 10k uniform values is narrow around 0.5 (speed: bench/stats_speed.py)."""
    rng = random.Random(4)
    iv = quantile_interval([rng.random() for _ in range(10_000)])
    assert iv.low <= iv.point <= iv.high
    assert iv.low > 0.48 and iv.high < 0.52
    assert iv.n == 10_000


def _plain_ranks(n: int, q: float, confidence: float) -> tuple[int, int, float]:
    """The order-statistic ranks by the plain loops the fast version replaced."""
    cdf: list[float] = []
    if q <= 0.0 or q >= 1.0:
        cdf = [1.0 if (q <= 0.0 or k == n) else 0.0 for k in range(n + 1)]
    else:
        log_odds = math.log(q) - math.log1p(-q)
        log_pmf = n * math.log1p(-q)
        total = 0.0
        for k in range(n + 1):
            total += math.exp(log_pmf)
            cdf.append(min(total, 1.0))
            if k < n:
                log_pmf += math.log(n - k) - math.log(k + 1) + log_odds
    half = (1.0 - confidence) / 2.0
    low = max((r for r in range(1, n + 1) if cdf[r - 1] <= half), default=1)
    up = min((r for r in range(1, n + 1) if 1.0 - cdf[r - 1] <= half), default=n)
    return low, up, cdf[up - 1] - cdf[low - 1]


@pytest.mark.parametrize("q", [0.5, 0.1, 0.9, 0.99, 0.01])
@pytest.mark.parametrize("confidence", [0.95, 0.9, 0.99])
def test_order_statistic_ranks_equal_the_plain_loops_to_the_bit(
    q: float, confidence: float
) -> None:
    """The C-speed ranks (CDF cut short, bisection) are the plain loops' ranks and coverage,
    float for float, small samples and large."""
    rng = random.Random(7)
    for n in [*range(1, 120), *(rng.randint(120, 30_000) for _ in range(12)), 200_001]:
        assert order_statistic_ranks(n, q, confidence) == _plain_ranks(n, q, confidence), n


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062047), (2, 4.3026527), (5, 2.5705818), (10, 2.2281389), (30, 2.0422725)],
)
def test_student_t_quantile_matches_the_tables(df: int, expected: float) -> None:
    """The 97.5% quantile of Student's t equals the tabulated value, and the CDF inverts it."""
    assert student_t_quantile(0.975, df) == pytest.approx(expected, abs=1e-6)
    assert student_t_cdf(expected, df) == pytest.approx(0.975, abs=1e-7)
    assert student_t_quantile(0.025, df) == pytest.approx(-expected, abs=1e-6)


@pytest.mark.parametrize(
    ("x", "df", "expected"),
    [(3.841458820694124, 1, 0.05), (18.307038053275146, 10, 0.05), (0.5, 2, math.exp(-0.25)),
     (100.0, 80, 0.0645703689), (0.0, 3, 1.0)],
)  # fmt: skip
def test_chi_square_tail_matches_the_tables(x: float, df: int, expected: float) -> None:
    """P(X > x) for a chi-square variable equals the tabulated tail (series and fraction)."""
    assert chi2_sf(x, df) == pytest.approx(expected, rel=1e-6)


def test_cluster_interval_resamples_units_and_says_what_it_rests_on() -> None:
    """Units whose own medians spread widen the pooled median's interval; units that agree
    narrow it; the interval names its units; under two units there is only the point."""
    agree = [[1.0 + 0.001 * i for i in range(10)] for _ in range(8)]
    apart = [[0.7 + 0.1 * k] * 10 for k in range(8)]
    narrow, wide = cluster_interval(agree), cluster_interval(apart)
    assert narrow is not None and wide is not None
    assert (narrow.units, narrow.unit, narrow.n) == (8, "unit", 80)
    assert narrow.high - narrow.low < 0.01 < wide.high - wide.low
    assert wide.low < 1.05 < wide.high
    alone = cluster_interval([[2.0, 3.0]], unit="block pair")
    assert alone is not None and (alone.low, alone.high, alone.units) == (0.0, math.inf, 1)
    assert cluster_interval([[], []]) is None


def test_units_that_follow_each_other_in_time_widen_the_cluster_interval() -> None:
    """Units whose medians drift slowly (neighbours alike) get a wider interval than the same
    units in a shuffled order; lag-1 autocorrelation is clamped to [0, 0.9]."""
    trend = [[1.0 + 0.02 * k + 0.001 * i for i in range(5)] for k in range(10)]
    shuffled = [trend[k] for k in (3, 8, 1, 6, 0, 9, 4, 2, 7, 5)]
    ordered, mixed = cluster_interval(trend), cluster_interval(shuffled)
    assert ordered is not None and mixed is not None
    assert ordered.high - ordered.low > 1.5 * (mixed.high - mixed.low)
    assert lag_one_correlation([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(0.4)
    assert lag_one_correlation([1.0, -1.0, 1.0, -1.0]) == 0.0
    assert lag_one_correlation([1.0, 1.0, 1.0]) == 0.0
