"""Quantiles and seeded bootstrap intervals, fast enough for 10k samples in pure Python.

Pure: stdlib ``math`` and ``random`` only (numpy may be absent).

How the bootstrap stays fast. A bootstrap resample of ``n`` sorted values ``x(1..n)``
has its ``j``-th order statistic equal to ``x(k)`` with ``P(k' <= k) = P(Binomial(n, k/n)
>= j)``, which is the law of ``ceil(n * U(j))`` where ``U(j)`` is the ``j``-th order
statistic of ``n`` uniforms, a ``Beta(j, n - j + 1)`` variable. So one resample's
quantile is drawn exactly, in O(1), with ``random.betavariate`` instead of drawing ``n``
indices and sorting them: the intervals are the ordinary percentile bootstrap, not an
approximation of it (``tests/report/test_stats.py`` checks them against the naive
resampling loop). A resample's quantile is its nearest-rank order statistic
``j = ceil(q * n)``; point estimates use linear interpolation between order statistics.

Invariants: every function takes its data unsorted unless its name says ``sorted``;
``math.inf`` is a legal value (a failed request counted as the worst latency) and sorts
last; NaN is rejected by the callers, never produced here.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 20240601
CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Interval:
    """A point estimate with a two-sided confidence interval over ``n`` observations.

    Dimensionless when it holds a ratio (candidate / baseline); otherwise in the unit of
    the data it was computed from. ``low <= point <= high`` is not guaranteed for the
    percentile bootstrap in general, but ``low <= high`` always holds.
    """

    point: float
    low: float
    high: float
    n: int
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("n must be >= 0")
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


def median(values: Sequence[float]) -> float:
    return quantile(values, 0.5)


def _rank(n: int, q: float) -> int:
    """Nearest-rank order statistic (1-based) that is a resample's ``q``-quantile."""
    return min(n, max(1, math.ceil(q * n)))


def _draw_order_stat(sorted_values: Sequence[float], rank: int, rng: random.Random) -> float:
    """One bootstrap resample's ``rank``-th order statistic, drawn exactly (module doc)."""
    n = len(sorted_values)
    u = rng.betavariate(rank, n - rank + 1)
    k = min(n, max(1, math.ceil(n * u)))
    return sorted_values[k - 1]


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

    Applied to per-pair ratios (candidate / baseline) this is the paired median ratio.
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("bootstrap of an empty sample")
    rng = random.Random(seed)
    rank = _rank(len(ordered), q)
    draws = [_draw_order_stat(ordered, rank, rng) for _ in range(resamples)]
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
    r_num, r_den = _rank(len(num), q), _rank(len(den), q)
    draws = [
        _safe_ratio(_draw_order_stat(num, r_num, rng), _draw_order_stat(den, r_den, rng))
        for _ in range(resamples)
    ]
    point = _safe_ratio(quantile_sorted(num, q), quantile_sorted(den, q))
    return _percentile_interval(point, draws, min(len(num), len(den)), confidence)


def _safe_ratio(a: float, b: float) -> float:
    if b <= 0.0 or math.isinf(b):
        return math.inf if b <= 0.0 else 0.0
    return a / b


def wilson_interval(successes: int, trials: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson score interval of a proportion (e.g. the output exact-match rate)."""
    if trials <= 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials > 0, got {successes}/{trials}")
    z = _normal_quantile(1.0 - (1.0 - confidence) / 2.0)
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


def _normal_quantile(p: float) -> float:
    """Inverse standard normal CDF by bisection on ``math.erf`` (precise to ~1e-12)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of an empty sample")
    return math.fsum(values) / len(values)
