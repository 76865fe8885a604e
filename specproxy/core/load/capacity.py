"""Capacity at a latency objective: the highest load at which each side meets an SLO (pure).

**The objective.** Per-request bounds at a percentile, ``ttft_p99_ms=500``,
``tpot_p99_ms=40``, ``e2e_p95_ms=2000`` (``Bound``; metric ``ttft``, ``tpot`` or ``e2e``,
percentile ``pNN`` or ``pNN.N``). A side *meets* the SLO at a load when, for every bound,
the percentile of its requests' values is at most the bound. A failed request counts as
a violation: its value is ``inf`` (a request that completed without the figure, a
one-token output's TPOT, is left out of that figure).

**One bound, one side.** At each level of the ladder the percentile of the pooled values
(``core.statistics.stats.quantile_sorted``'s definition, found by ``UnitPools``); across levels those
points are made non-decreasing in load by isotonic regression (``core.load.crossover.isotonic``: latency does not fall as load
rises; a failure-driven ``inf`` pools as ``inf``), and the capacity is where the fitted
curve first exceeds the bound, interpolated linearly in load and in value between the
two levels around it (exact where the percentile is affine in load, as in the
simulator's cost model at a fixed batch; on a convex curve the chord crosses early, so
the estimate errs low). Into an ``inf`` level the crossing is the geometric midpoint of
the two loads. When the lowest level already exceeds the bound the capacity is *below
the lowest level* (``0.0``); when no level does, it is *at least the top level*
(``inf``). Several bounds: the lowest of their capacities.

**Interval.** A bootstrap over each level's units of replication (block pairs, the
units the paired intervals rest on): every resample draws each level's units with
replacement, the *same* draw for both sides (block pairs are matched), refits and
recrosses. When every resample crosses inside the ladder the interval has the ratio
intervals' form (``core.statistics.cluster.cluster_interval``): ``point * exp(±t * sd * sqrt(B / (B -
1)))``, ``sd`` the resamples' standard deviation of the log capacity, ``t`` Student's
quantile on ``B - 1`` degrees of freedom, ``B`` the fewest units of any level (``t *
sqrt(B / (B - 1))`` is ``z`` times ``small_sample_factor``). (The resamples' own 2.5th and 97.5th percentiles, which it replaced,
are lumpy with 6 to 8 units a level: a level's percentile takes few values, so an
interval's half-width swung from a quarter to four times the spread between sweeps and
missed where it came out narrow; ``docs/validation/capacity-coverage/``.) When some
resamples leave the ladder (a crossing below the lowest level or beyond the top one) the
interval is their 2.5th and 97.5th percentiles, each bound's distance from the point
stretched by the small-sample factor (``small_sample_factor``: ``t`` over the normal
quantile, times ``sqrt(B / (B - 1))``; 1.44 at 6 block pairs) and widened to hold the
point. An open end stays open: a lower bound ``0.0`` reads "below the lowest
level", an upper bound ``inf`` "beyond the top level". The ratio candidate/baseline is
computed on each resample from the same draw. Served requests/s at the capacity (a
concurrency ladder) is each side's measured rate interpolated at the capacity, the same
way (its interval carries the capacity's uncertainty, not the rate's own noise).
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist, stdev

from specproxy.core.load.crossover import isotonic
from specproxy.core.statistics.cluster import _Pooled
from specproxy.core.statistics.distributions import student_t_quantile
from specproxy.core.statistics.stats import CONFIDENCE, DEFAULT_SEED

METRICS = ("ttft", "tpot", "e2e")
SIDES = ("baseline", "candidate")
RESAMPLES = 1000
_KEY = re.compile(r"^(ttft|tpot|e2e)_p(\d{1,2}(?:\.\d+)?)_ms$")
KEY_FORM = "METRIC_pNN_ms (METRIC ttft, tpot or e2e; e.g. ttft_p99_ms=500, e2e_p99.9_ms=2000)"


@dataclass(frozen=True, slots=True)
class Bound:
    """One per-request bound: the ``percentile`` of ``metric`` at most ``limit_ms``."""

    metric: str
    percentile: float
    limit_ms: float

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ValueError(
                f"slo: metric must be one of {', '.join(METRICS)}, got {self.metric!r}"
            )
        if not 0.0 < self.percentile < 100.0:
            raise ValueError(f"slo {self.key}: the percentile must lie strictly between 0 and 100")
        if not (math.isfinite(self.limit_ms) and self.limit_ms > 0):
            raise ValueError(f"slo {self.key} must be > 0, got {self.limit_ms}")

    @property
    def key(self) -> str:
        return f"{self.metric}_p{self.percentile:g}_ms"

    def text(self) -> str:
        return f"p{self.percentile:g} {self.metric.upper()} <= {self.limit_ms:g} ms"

    def to_json(self) -> dict[str, object]:
        return {"key": self.key, "metric": self.metric, "percentile": self.percentile,
                "limit_ms": self.limit_ms}  # fmt: skip


def parse_bound(key: str, raw: str) -> Bound | None:
    """``("tpot_p99_ms", "40")`` -> Bound; None when ``key`` is not of the ``KEY_FORM``;
    ValueError naming the key when its value is not a number."""
    found = _KEY.match(key)
    if found is None:
        return None
    try:
        limit = float(raw)
    except ValueError:
        raise ValueError(f"slo {key}: not a number: {raw!r}") from None
    return Bound(found.group(1), float(found.group(2)), limit)


@dataclass(frozen=True, slots=True)
class LevelSample:
    """One level's requests for the capacity: ``values[side][metric]`` holds, per unit of
    replication (the same units on both sides), that side's values in ms (``inf``: a failed
    request); ``rates[side]`` the side's served requests/s at this level (None: unknown)."""

    load: float
    units: int
    values: Mapping[str, Mapping[str, Sequence[Sequence[float]]]]
    rates: Mapping[str, float | None]


class UnitPools:
    """Each level's units sorted once per side and metric (``core.statistics.cluster._Pooled``), so a
    resample's percentile is a bisection over the merged values, not a merge and a sort."""

    def __init__(self, levels: Sequence[LevelSample]) -> None:
        self.levels = levels
        self._made: dict[tuple[int, str, str], _Pooled] = {}

    def percentile(
        self, level: int, side: str, metric: str, weights: Sequence[int], q: float
    ) -> float | None:
        """Level ``level``'s ``q``-quantile (0-1) of ``side``'s ``metric``, unit ``i``
        counted ``weights[i]`` times; None without a value."""
        key = (level, side, metric)
        pool = self._made.get(key)
        if pool is None:
            groups = [sorted(g) for g in self.levels[level].values[side][metric]]
            pool = self._made[key] = _Pooled(groups)
        if not any(w and g for g, w in zip(pool.groups, weights, strict=True)):
            return None
        return pool.quantile(q, weights)


def pooled_percentile(
    groups: Sequence[Sequence[float]], weights: Sequence[int], q: float
) -> float | None:
    """The ``q``-quantile (0-1) of the units' values, unit ``i`` counted ``weights[i]``
    times; None without a value."""
    level = LevelSample(0.0, len(groups), {"": {"": groups}}, {})
    return UnitPools([level]).percentile(0, "", "", weights, q)


def first_crossing(loads: Sequence[float], values: Sequence[float], limit: float) -> float:
    """The load where the isotonic fit of ``values`` (ascending ``loads``) first exceeds
    ``limit``: ``0.0`` when it starts above, ``inf`` when it never gets there (module doc)."""
    fitted = isotonic(values)
    if fitted[0] > limit:
        return 0.0
    for i in range(1, len(fitted)):
        y0, y1 = fitted[i - 1], fitted[i]
        if y1 > limit:
            x0, x1 = loads[i - 1], loads[i]
            if math.isinf(y1):
                return math.sqrt(x0 * x1)
            return x0 + (limit - y0) / (y1 - y0) * (x1 - x0)
    return math.inf


def side_capacity(
    levels: Sequence[LevelSample],
    side: str,
    bounds: Sequence[Bound],
    weights: Sequence[Sequence[int]],
    pools: UnitPools | None = None,
) -> float | None:
    """``side``'s capacity under every bound (the lowest), units drawn with ``weights``
    (one list per level; ``pools`` the levels' ``UnitPools``, made when not given); None
    when a bound has no value at some level."""
    pools = UnitPools(levels) if pools is None else pools
    loads = [lv.load for lv in levels]
    found = math.inf
    for bound in bounds:
        points = []
        for i, w in enumerate(weights):
            value = pools.percentile(i, side, bound.metric, w, bound.percentile / 100)
            if value is None:
                return None
            points.append(value)
        found = min(found, first_crossing(loads, points, bound.limit_ms))
    return found


def rate_at(levels: Sequence[LevelSample], side: str, load: float) -> float | None:
    """``side``'s served requests/s at ``load``, interpolated linearly between levels
    (``0.0`` and ``inf`` pass through: open ends); None without rates."""
    if load == 0.0 or math.isinf(load):
        return load
    known = [(lv.load, r) for lv in levels if (r := lv.rates.get(side)) is not None]
    if not known:
        return None
    if load <= known[0][0]:
        return known[0][1] * load / known[0][0]
    for (x0, y0), (x1, y1) in itertools.pairwise(known):
        if load <= x1:
            return y0 + (load - x0) / (x1 - x0) * (y1 - y0)
    return known[-1][1]


@dataclass(frozen=True, slots=True)
class Estimate:
    """A capacity (or a ratio) and its interval; ``0.0``/``inf`` mark an open end."""

    point: float | None
    low: float | None
    high: float | None

    @property
    def status(self) -> str:
        """``within`` the ladder, ``below_lowest``, ``above_top`` or ``unknown``."""
        if self.point is None:
            return "unknown"
        if self.point == 0.0:
            return "below_lowest"
        return "above_top" if math.isinf(self.point) else "within"


@dataclass(frozen=True, slots=True)
class CapacityResult:
    """Each side's capacity in load and in served requests/s, and the ratio
    candidate/baseline of each, with intervals (module docstring)."""

    load: Mapping[str, Estimate]
    served: Mapping[str, Estimate]
    load_ratio: Estimate
    served_ratio: Estimate
    resamples: int
    confidence: float


def _ratio(cand: float | None, base: float | None) -> float | None:
    """cand/base with open ends (``x/0`` is ``inf``, ``inf/x`` is ``inf``); None when both
    ends are open alike (``0/0``, ``inf/inf``) or a side is unknown."""
    if cand is None or base is None:
        return None
    if (cand == 0.0 and base == 0.0) or (math.isinf(cand) and math.isinf(base)):
        return None
    if base == 0.0 or math.isinf(cand):
        return math.inf
    return 0.0 if math.isinf(base) else cand / base


def small_sample_factor(units: int, confidence: float = CONFIDENCE) -> float:
    """How much a bootstrap over ``units`` units understates the spread: Student's quantile
    on ``units - 1`` degrees of freedom over the normal one, times ``sqrt(B / (B - 1))``
    (the correction ``core.statistics.cluster.cluster_interval`` applies to the ratios)."""
    if units < 2:
        return math.inf
    level = 1.0 - (1.0 - confidence) / 2.0
    t = student_t_quantile(level, units - 1)
    return t / NormalDist().inv_cdf(level) * math.sqrt(units / (units - 1))


def _interval(
    point: float | None, draws: Sequence[float | None], confidence: float, units: int
) -> Estimate:
    """The interval around ``point`` from the resamples ``draws`` (module docstring): the
    spread of their logs when every draw lies inside the ladder, else their stretched
    percentile interval; no interval when a draw has no value."""
    if point is None or not draws or any(d is None for d in draws):
        return Estimate(point, None, None)
    ordered = sorted(d for d in draws if d is not None)
    if 0.0 < point < math.inf and ordered[0] > 0.0 and ordered[-1] < math.inf:
        sd = stdev([math.log(d) for d in ordered]) if len(ordered) > 1 else math.inf
        half = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0) * sd
        half *= small_sample_factor(units, confidence)  # z * t / z * sqrt(B / (B - 1))
        return Estimate(point, point * math.exp(-half), point * math.exp(half))
    tail = (1.0 - confidence) / 2.0
    low = min(point, ordered[max(0, math.floor(tail * len(ordered)))])
    high = max(point, ordered[min(len(ordered) - 1, math.ceil((1.0 - tail) * len(ordered)) - 1)])
    if 0.0 < point < math.inf:
        factor = small_sample_factor(units, confidence)
        low = 0.0 if low == 0.0 else max(0.0, point - factor * (point - low))
        high = math.inf if math.isinf(high) else point + factor * (high - point)
    return Estimate(point, low, high)


def _draw(levels: Sequence[LevelSample], rng: random.Random) -> list[list[int]]:
    """One resample: each level's units drawn with replacement (as weights)."""
    out = []
    for lv in levels:
        weights = [0] * lv.units
        for k in rng.choices(range(lv.units), k=lv.units):
            weights[k] += 1
        out.append(weights)
    return out


def _figures(
    pools: UnitPools, bounds: Sequence[Bound], weights: Sequence[Sequence[int]]
) -> dict[str, float | None]:
    """One draw's capacities: ``load:<side>``, ``served:<side>`` and the two ratios."""
    levels = pools.levels
    out: dict[str, float | None] = {}
    for side in SIDES:
        load = side_capacity(levels, side, bounds, weights, pools)
        out[f"load:{side}"] = load
        out[f"served:{side}"] = None if load is None else rate_at(levels, side, load)
    for kind in ("load", "served"):
        out[f"{kind}:ratio"] = _ratio(out[f"{kind}:candidate"], out[f"{kind}:baseline"])
    return out


def estimate_capacity(
    levels: Sequence[LevelSample],
    bounds: Sequence[Bound],
    *,
    resamples: int = RESAMPLES,
    seed: int = DEFAULT_SEED,
    confidence: float = CONFIDENCE,
) -> CapacityResult | None:
    """Both sides' capacity under ``bounds`` over the ladder ``levels`` (module docstring);
    None without a bound or a level with units."""
    ordered = sorted((lv for lv in levels if lv.units > 0), key=lambda lv: lv.load)
    if not bounds or not ordered:
        return None
    pools = UnitPools(ordered)
    point = _figures(pools, bounds, [[1] * lv.units for lv in ordered])
    rng = random.Random(seed)
    draws = [_figures(pools, bounds, _draw(ordered, rng)) for _ in range(resamples)]
    units = min(lv.units for lv in ordered)
    est = {k: _interval(v, [d[k] for d in draws], confidence, units) for k, v in point.items()}
    return CapacityResult(
        load={s: est[f"load:{s}"] for s in SIDES},
        served={s: est[f"served:{s}"] for s in SIDES},
        load_ratio=est["load:ratio"],
        served_ratio=est["served:ratio"],
        resamples=resamples,
        confidence=confidence,
    )
