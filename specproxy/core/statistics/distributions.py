"""Distribution functions the intervals rest on: the standard normal and Student's t
quantiles, the regularised incomplete beta and the chi-square tail.

Pure: stdlib ``math`` only (scipy may be absent). Each is found by bisection, a series or a
continued fraction (modified Lentz). Used by the intervals of ``core.statistics.stats`` and
``core.statistics.cluster``, the heterogeneity test of ``core.compare.blocks`` and the capacity and
setting bounds (``core.load.capacity``, ``core.load.setting_choice``).
"""

from __future__ import annotations

import functools
import math


def normal_quantile(p: float) -> float:
    """Inverse standard normal CDF by bisection on ``math.erf`` (precise to ~1e-12)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularised incomplete beta (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 400):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return result


def regularized_beta(x: float, a: float, b: float) -> float:
    """``I_x(a, b)``, the regularised incomplete beta function, for ``0 <= x <= 1``."""
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be within [0, 1], got {x}")
    if x in (0.0, 1.0):
        return x
    front = math.exp(a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1.0 - x) / b


def student_t_cdf(t: float, df: float) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError("df must be > 0")
    tail = 0.5 * regularized_beta(df / (df + t * t), df / 2.0, 0.5)
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=256)
def student_t_quantile(p: float, df: float) -> float:
    """The ``p``-quantile of Student's t with ``df`` degrees of freedom (bisection)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be within (0, 1), got {p}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while student_t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if student_t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def chi2_sf(x: float, df: float) -> float:
    """``P(X > x)`` for a chi-square variable with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError("df must be > 0")
    if x <= 0.0:
        return 1.0
    a, half = df / 2.0, x / 2.0
    log_front = a * math.log(half) - half - math.lgamma(a)
    if half < a + 1.0:  # the series of the lower incomplete gamma
        term = total = 1.0 / a
        for n in range(1, 1000):
            term *= half / (a + n)
            total += term
            if term < total * 1e-16:
                break
        return max(0.0, 1.0 - math.exp(log_front) * total)
    tiny = 1e-300  # the continued fraction of the upper one (modified Lentz)
    b = half + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    result = d
    for n in range(1, 1000):
        an = -n * (n - a)
        b += 2.0
        d = an * d + b
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        result *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return math.exp(log_front) * result
