"""Quantiles and seeded bootstrap intervals, fast enough for 10k samples in pure Python.

Pure: stdlib ``math`` and ``random`` only (numpy may be absent).

How the bootstrap stays fast. A bootstrap resample of ``n`` sorted values ``x(1..n)`` is
``x(ceil(n * U))`` for ``n`` iid uniforms ``U``, a monotone map, so its ``j``-th order
statistic is ``x(ceil(n * U(j)))`` with ``U(j) ~ Beta(j, n - j + 1)`` the ``j``-th uniform
order statistic; given ``U(j)``, the next one is ``U(j) + (1 - U(j)) * Beta(1, n - j)``.
So a resample's quantile is drawn exactly, in O(1), with ``random.betavariate`` instead of
drawing ``n`` indices and sorting them: the intervals are the ordinary percentile
bootstrap, not an approximation of it (``tests/core/test_stats.py`` checks them against
the naive resampling loop). Point estimates and resample quantiles use the same
definition: linear interpolation between order statistics (numpy's default), so the
interval of an even-sized sample's median is centred as the median is.

Invariants: every function takes its data unsorted unless its name says ``sorted``;
``math.inf`` is a legal value (a failed request counted as the worst latency) and sorts
last; NaN is rejected by the callers, never produced here.

The interval from the spread between units of replication is ``core.statistics.cluster``'s; the
normal, Student's t and chi-square functions are ``core.statistics.distributions``'.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from specproxy.core.statistics.distributions import normal_quantile

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 20240601
CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate with a two-sided confidence interval over ``n`` observations.

    Dimensionless when it holds a ratio (candidate / baseline); otherwise in the unit of
    the data it was computed from. ``low <= point <= high`` is not guaranteed for the
    percentile bootstrap in general, but ``low <= high`` always holds. ``units`` is how
    many independent units of replication (``unit``: "block pair", "segment") the interval
    rests on when its observations are not independent draws (None: they are); under 2
    units it is ``[0, inf]``, the point alone.
    """

    point: float
    low: float
    high: float
    n: int
    confidence: float = CONFIDENCE
    units: int | None = None
    unit: str | None = None

    def __post_init__(self) -> None:
        if self.n < 0 or (self.units is not None and self.units < 0):
            raise ValueError("n and units must be >= 0")
        if not self.low <= self.high:
            raise ValueError(f"interval low {self.low} > high {self.high}")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError("confidence must be in (0, 1)")

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def quantile_sorted(values: Sequence[float], q: float) -> float:
    """Linearly interpolated ``q``-quantile of ascending ``values`` (numpy's default).

    An interpolation that touches ``inf`` with a non-zero weight is ``inf``.
    """
    if not values:
        raise ValueError("quantile of an empty sample")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} outside [0, 1]")
    pos = q * (len(values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    weight = pos - lo
    a, b = values[lo], values[hi]
    if weight == 0.0 or a == b:
        return a
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return a + (b - a) * weight


def quantile(values: Sequence[float], q: float) -> float:
    """``q``-quantile of unsorted ``values``."""
    return quantile_sorted(sorted(values), q)


def _order_index(n: int, u: float) -> int:
    """The 0-based index of the original value a resample draw at uniform ``u`` lands on."""
    return min(n, max(1, math.ceil(n * u))) - 1


def _draw_quantile(sorted_values: Sequence[float], q: float, rng: random.Random) -> float:
    """One bootstrap resample's interpolated ``q``-quantile, drawn exactly (module doc).

    The resample's ``j``-th order statistic sits at uniform ``U(j) ~ Beta(j, n - j + 1)``;
    the next one, given it, at ``U(j) + (1 - U(j)) * Beta(1, n - j)``. Interpolating
    between the two gives the same quantile definition as the point estimate.
    """
    n = len(sorted_values)
    pos = q * (n - 1)
    j = math.floor(pos) + 1
    weight = pos - (j - 1)
    u1 = rng.betavariate(j, n - j + 1)
    a = sorted_values[_order_index(n, u1)]
    if weight == 0.0 or j >= n:
        return a
    u2 = u1 + (1.0 - u1) * rng.betavariate(1, n - j)
    b = sorted_values[_order_index(n, u2)]
    if a == b:
        return a
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return a + (b - a) * weight


def _percentile_interval(point: float, draws: list[float], n: int, confidence: float) -> Interval:
    draws.sort()
    alpha = (1.0 - confidence) / 2.0
    low = quantile_sorted(draws, alpha)
    high = quantile_sorted(draws, 1.0 - alpha)
    return Interval(point=point, low=low, high=high, n=n, confidence=confidence)


def bootstrap_quantile(
    values: Sequence[float],
    q: float = 0.5,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Percentile-bootstrap interval of the ``q``-quantile of one sample.

    Not what a report uses for the paired median ratio (``quantile_interval`` replaced it);
    kept to check the exact draw against naive resampling and, in
    ``bench/stats_coverage.py``, to measure the coverage of the method it replaced.
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("bootstrap of an empty sample")
    rng = random.Random(seed)
    draws = [_draw_quantile(ordered, q, rng) for _ in range(resamples)]
    return _percentile_interval(quantile_sorted(ordered, q), draws, len(ordered), confidence)


def bootstrap_quantile_ratio(
    numerator: Sequence[float],
    denominator: Sequence[float],
    q: float = 0.5,
    *,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> Interval:
    """Interval of ``quantile(numerator, q) / quantile(denominator, q)`` for two independent
    samples (the unpaired comparison), both resampled independently.

    ``n`` is the smaller of the two sample sizes. A ratio with an infinite numerator is
    ``inf``; the denominator must be finite and positive at every order statistic used.
    """
    num = sorted(numerator)
    den = sorted(denominator)
    if not num or not den:
        raise ValueError("bootstrap of an empty sample")
    rng = random.Random(seed)
    draws = [
        _safe_ratio(_draw_quantile(num, q, rng), _draw_quantile(den, q, rng))
        for _ in range(resamples)
    ]
    point = _safe_ratio(quantile_sorted(num, q), quantile_sorted(den, q))
    return _percentile_interval(point, draws, min(len(num), len(den)), confidence)


def _safe_ratio(a: float, b: float) -> float:
    if b <= 0.0 or math.isinf(b):
        return math.inf if b <= 0.0 else 0.0
    return a / b


def _binomial_cdf(n: int, p: float, upto: int | None = None) -> list[float]:
    """``P(B <= k)`` for ``k = 0..n`` (or ``k < upto``), ``B ~ Binomial(n, p)``: a log-space
    recurrence, run at C speed through ``itertools`` with the same float operations in the
    same order as the plain loop ``log_pmf += log(n - k) - log(k + 1) + log_odds; total +=
    exp(log_pmf)``, so every value is the same to the last bit."""
    count = n + 1 if upto is None else min(upto, n + 1)
    if p <= 0.0 or p >= 1.0:
        return [1.0 if (p <= 0.0 or k == n) else 0.0 for k in range(count)]
    log_odds = math.log(p) - math.log1p(-p)
    steps = map(
        operator.add,
        map(operator.sub, map(math.log, range(n, 0, -1)), map(math.log, range(1, n + 1))),
        itertools.repeat(log_odds),
    )
    log_pmf = itertools.accumulate(steps, initial=n * math.log1p(-p))
    cdf = list(itertools.accumulate(map(math.exp, itertools.islice(log_pmf, count))))
    over = bisect.bisect_right(cdf, 1.0)  # running sums never decrease: clamp the tail
    cdf[over:] = [1.0] * (len(cdf) - over)
    return cdf


@functools.lru_cache(maxsize=1024)
def order_statistic_ranks(
    n: int, q: float, confidence: float = CONFIDENCE
) -> tuple[int, int, float]:
    """1-based ranks ``(l, u)`` with ``P(x(l) <= true q-quantile <= x(u)) >= confidence`` for
    any continuous distribution, and the coverage those ranks actually give.

    ``B``, the number of observations below the true quantile, is ``Binomial(n, q)``; the
    interval misses only when ``B < l`` or ``B >= u``, each kept below ``(1 - confidence) / 2``.
    With too few values to reach ``confidence`` the ranks are clamped to ``(1, n)`` and the
    coverage returned is the lower one actually achieved.

    ``l`` is the largest rank whose CDF is at most the tail, ``u`` the smallest whose upper
    tail is: both found by bisection (the CDF never decreases). Only the CDF up to a bound
    far past ``u`` (``n q`` + 12 standard deviations) is computed; the full one only when
    ``u`` lies beyond it.
    """
    if n < 1:
        raise ValueError("order statistics of an empty sample")
    half = (1.0 - confidence) / 2.0
    bound = math.ceil(n * q + 12.0 * math.sqrt(n * q * (1.0 - q))) + 16
    cdf = _binomial_cdf(n, q, upto=bound)
    if len(cdf) < n + 1 and 1.0 - cdf[-1] > half:
        cdf = _binomial_cdf(n, q)
    searched = min(n, len(cdf))
    low = bisect.bisect_right(cdf, half, 0, searched) or 1
    first = bisect.bisect_left(range(searched), True, key=lambda j: 1.0 - cdf[j] <= half)
    up = first + 1 if first < searched else n
    return low, up, cdf[up - 1] - cdf[low - 1]


def quantile_interval(
    values: Sequence[float], q: float = 0.5, *, confidence: float = CONFIDENCE
) -> Interval:
    """Distribution-free interval of the ``q``-quantile between two order statistics.

    Exact and deterministic (no resampling, so no Monte Carlo noise in which order
    statistic an endpoint lands on: with a fixed bootstrap seed that noise is shared by
    every report and moved measured coverage at 30 pairs to 92%). Coverage is at least
    ``confidence`` for continuous data; ``Interval.confidence`` holds what the ranks give.
    Applied to per-pair ratios with ``q = 0.5`` this is the paired median-ratio interval.
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("interval of an empty sample")
    low, up, achieved = order_statistic_ranks(len(ordered), q, confidence)
    return Interval(
        point=quantile_sorted(ordered, q),
        low=ordered[low - 1],
        high=ordered[up - 1],
        n=len(ordered),
        confidence=min(max(achieved, 1e-9), 1.0 - 1e-12),
    )


def wilson_interval(successes: int, trials: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval of a proportion (e.g. the output exact-match rate)."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes}/{trials}")
    z = normal_quantile(1.0 - (1.0 - confidence) / 2.0)
    p = successes / trials
    denom = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return Interval(
        point=p,
        low=max(0.0, centre - half),
        high=min(1.0, centre + half),
        n=trials,
        confidence=confidence,
    )


def paired_difference_interval(
    first_only: int, second_only: int, n: int, confidence: float = CONFIDENCE
) -> Interval:
    """Tango's score interval of ``p_first - p_second`` for two proportions on the same ``n``
    pairs (e.g. the candidate's and the baseline's failure rates over the same requests).

    Only the discordant pairs carry the difference: ``first_only`` pairs where only the
    first outcome happened, ``second_only`` where only the second did; pairs where both or
    neither happened enter through ``n`` alone. The interval is every difference ``d`` whose
    score statistic ``|T(d)| <= z`` (Tango 1998, Stat. Med. 17:891), found by bisection:
    ``T(d) = (first_only - second_only - n d) / sqrt(n (2 q(d) + d (1 - d)))`` with ``q(d)``
    the maximum-likelihood rate of ``second_only`` pairs under the constraint. Unlike the
    Wald interval it stays inside [-1, 1] and does not collapse to a point when no pair is
    discordant (then the upper limit is ``z^2 / (n + z^2)``).
    """
    if n <= 0 or first_only < 0 or second_only < 0 or first_only + second_only > n:
        raise ValueError(
            f"need n > 0 and 0 <= first_only + second_only <= n, got "
            f"{first_only} + {second_only} of {n}"
        )
    z = normal_quantile(1.0 - (1.0 - confidence) / 2.0)
    point = (first_only - second_only) / n

    def score(d: float) -> float:
        w = -first_only - second_only + (2 * n - first_only + second_only) * d
        disc = max(w * w + 8.0 * n * second_only * d * (1.0 - d), 0.0)
        q = (-w + math.sqrt(disc)) / (4.0 * n)
        numerator = first_only - second_only - n * d
        variance = n * (2.0 * q + d * (1.0 - d))
        if variance <= 0.0:
            return 0.0 if numerator == 0 else math.copysign(math.inf, numerator)
        return numerator / math.sqrt(variance)

    low = _bisect_score(score, -1.0, point, z)
    high = _bisect_score(score, point, 1.0, -z)
    return Interval(point=point, low=low, high=high, n=n, confidence=confidence)


def _bisect_score(score: Callable[[float], float], lo: float, hi: float, target: float) -> float:
    """The ``d`` in ``[lo, hi]`` where the decreasing ``score`` crosses ``target``."""
    if score(lo if target > 0 else hi) * (1 if target > 0 else -1) <= abs(target):
        return lo if target > 0 else hi
    for _ in range(80):
        mid = (lo + hi) / 2.0
        if score(mid) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0
