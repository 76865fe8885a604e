"""The interval of a pooled median, or a ratio of two, from the spread between units of
replication (block pairs, segments): a cluster bootstrap over independent units.

Pure: stdlib ``math``, ``bisect`` and ``random`` only. A unit's values are kept ascending
once (``_Pooled``); a resample is a vector of how often each unit was drawn, and its pooled
quantile is found by bisection over the merged values (in C where ``core.speedups`` has
``pooled_kth``), so no resample merges or sorts anything. Quantiles interpolate as
``core.statistics.stats.quantile_sorted`` does.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Sequence

from specproxy.core.speedups import SPEEDUPS
from specproxy.core.statistics.distributions import student_t_quantile
from specproxy.core.statistics.stats import CONFIDENCE, DEFAULT_SEED, Interval, quantile_interval

CLUSTER_RESAMPLES = 200


class _Pooled:
    """Units' ascending values, and any quantile of the multiset that holds unit ``i``
    ``weights[i]`` times, found by bisection over the merged values (no merge per draw)."""

    def __init__(self, groups: Sequence[Sequence[float]]) -> None:
        self.groups = groups
        self.merged = sorted(itertools.chain.from_iterable(self.groups))

    def _kth(self, k: int, weights: Sequence[int]) -> float:
        """The ``k``-th smallest value (0-based) of the weighted multiset (C: ``pooled_kth``)."""
        found = SPEEDUPS.pooled_kth(self.groups, weights, self.merged, k) if SPEEDUPS else None
        if found is not None:
            return float(found)
        lo, hi = 0, len(self.merged) - 1
        live = [(g, w) for g, w in zip(self.groups, weights, strict=True) if w]
        while lo < hi:  # the smallest merged value with more than k values at or below it
            mid, value = (lo + hi) // 2, self.merged[(lo + hi) // 2]
            if sum(w * bisect.bisect_right(g, value) for g, w in live) > k:
                hi = mid
            else:
                lo = mid + 1
        return self.merged[lo]

    def quantile(self, q: float, weights: Sequence[int]) -> float:
        total = sum(w * len(g) for g, w in zip(self.groups, weights, strict=True))
        pos = q * (total - 1)
        rank = math.floor(pos)
        a = self._kth(rank, weights)
        weight = pos - rank
        if weight == 0.0:
            return a
        b = self._kth(min(rank + 1, total - 1), weights)
        if a == b:
            return a
        if math.isinf(a) or math.isinf(b):
            return math.inf
        return a + (b - a) * weight


MAX_LAG_CORRELATION = 0.9


def lag_one_correlation(values: Sequence[float]) -> float:
    """The lag-1 autocorrelation of ``values`` in their order, clamped to
    ``[0, MAX_LAG_CORRELATION]`` (0 under 3 values or without spread): how much neighbours in
    time share, when positive."""
    n = len(values)
    if n < 3:
        return 0.0
    mean = math.fsum(values) / n
    dev = [v - mean for v in values]
    var = math.fsum(d * d for d in dev)
    if var <= 0.0:
        return 0.0
    rho = math.fsum(a * b for a, b in itertools.pairwise(dev)) / var
    return min(max(rho, 0.0), MAX_LAG_CORRELATION)


def cluster_interval(
    groups: Sequence[Sequence[float]],
    denominators: Sequence[Sequence[float]] | None = None,
    *,
    unit: str = "unit",
    resamples: int = CLUSTER_RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> Interval | None:
    """The pooled median of ``groups`` (ascending values of one unit each), or with
    ``denominators`` (each unit's other side) the ratio of the two pooled medians, and its
    interval from the spread between units: independent clusters.

    The units are resampled with replacement (seeded, ``resamples`` times) and the figure is
    recomputed from each resample's pooled values, so a figure that jumps between units
    (a median sitting between two groups of units) shows it. The interval is
    ``point * exp(±t * sd * sqrt(B / (B - 1)))``: ``sd`` the resamples' standard deviation
    of the log figure, ``B`` the units, ``t`` Student's quantile on ``B - 1`` degrees of
    freedom (the bootstrap's own spread shrinks by ``(B - 1) / B`` with few units), widened by
    ``sqrt((1 + rho) / (1 - rho))`` where the units' own log figures, in the order given
    (time), have a positive lag-1 autocorrelation ``rho``: neighbouring units that share a
    server state (a drift longer than a block) are fewer independent units than they seem.
    When a figure is ``0`` or ``inf`` (most pairs failed on one side) there is no log: the
    interval is then the distribution-free order-statistic interval of the units' own figures'
    median (``quantile_interval``; ``confidence`` holds what its ranks reach). Under 2 units
    the interval is ``[0, inf]``, the point alone; None without a value.
    """
    num, den = _kept_pools(groups, denominators)
    units = len(num.groups)
    if units == 0:
        return None
    point = _pooled_figure(num, den, [1] * units)
    n = len(num.merged)
    if units < 2:
        return Interval(point, 0.0, math.inf, n, confidence, units=units, unit=unit)
    own = [_pooled_figure(num, den, [int(i == j) for j in range(units)]) for i in range(units)]
    if any(v <= 0.0 or math.isinf(v) for v in (point, *own)):
        return _rank_interval(point, own, n, confidence, unit)
    sd = _resampled_log_sd(num, den, units, resamples, seed)
    if sd is None:  # a resample landed on failures: no finite spread
        return Interval(point, 0.0, math.inf, n, confidence, units=units, unit=unit)
    half = _half_width(sd, own, confidence)
    return Interval(
        point, point * math.exp(-half), point * math.exp(half), n, confidence, units=units,
        unit=unit,
    )  # fmt: skip


def _kept_pools(
    groups: Sequence[Sequence[float]], denominators: Sequence[Sequence[float]] | None
) -> tuple[_Pooled, _Pooled | None]:
    """The pools of the units with values (on both sides, with ``denominators``)."""
    keep = [i for i, g in enumerate(groups) if g and (denominators is None or denominators[i])]
    num = _Pooled([groups[i] for i in keep])
    den = _Pooled([denominators[i] for i in keep]) if denominators is not None else None
    return num, den


def _pooled_figure(num: _Pooled, den: _Pooled | None, weights: Sequence[int]) -> float:
    """The pooled median of the units, each held ``weights[i]`` times, or with ``den`` the
    ratio of the two pooled medians (``inf`` over a median at or below 0)."""
    top = num.quantile(0.5, weights)
    if den is None:
        return top
    bottom = den.quantile(0.5, weights)
    return math.inf if bottom <= 0 else top / bottom


def _rank_interval(
    point: float, own: Sequence[float], n: int, confidence: float, unit: str
) -> Interval:
    """The order-statistic interval of the units' own figures' median, stretched to hold
    ``point``: the interval when a figure is ``0`` or ``inf`` and has no log."""
    by_rank = quantile_interval(own, 0.5, confidence=confidence)
    low, high = min(by_rank.low, point), max(by_rank.high, point)
    return Interval(point, low, high, n, by_rank.confidence, units=len(own), unit=unit)


def _resampled_log_sd(
    num: _Pooled, den: _Pooled | None, units: int, resamples: int, seed: int
) -> float | None:
    """The standard deviation of the log figure over ``resamples`` seeded resamples of the
    units with replacement; None when a resample's figure is ``0`` or ``inf``."""
    rng = random.Random(seed)
    logs = []
    for _ in range(resamples):
        weights = [0] * units
        for k in rng.choices(range(units), k=units):
            weights[k] += 1
        value = _pooled_figure(num, den, weights)
        logs.append(math.log(value) if 0.0 < value < math.inf else math.nan)
    finite = [y for y in logs if not math.isnan(y)]
    if len(finite) < resamples:
        return None
    mean = math.fsum(finite) / len(finite)
    return math.sqrt(math.fsum((y - mean) ** 2 for y in finite) / (len(finite) - 1))


def _half_width(sd: float, own: Sequence[float], confidence: float) -> float:
    """The interval's half width in log units: Student's ``t`` on ``B - 1`` degrees of
    freedom times ``sd``, the few-units correction and the lag-1 widening (the docstring of
    ``cluster_interval``)."""
    units = len(own)
    t = student_t_quantile(1.0 - (1.0 - confidence) / 2.0, units - 1)
    rho = lag_one_correlation([math.log(v) for v in own])
    inflation = math.sqrt((1.0 + rho) / (1.0 - rho))
    return t * sd * math.sqrt(units / (units - 1)) * inflation
