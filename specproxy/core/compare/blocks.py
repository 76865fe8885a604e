"""The unit of replication, and what rests on it (pure): which unit each pair belongs to,
the paired intervals from the spread *between* units, the heterogeneity between them and
the drift episodes they show.

Why: requests sent in one block share the server's batch state and whatever the server was doing at
that moment, and servers drift (a candidate's verify step once went from 6 to 11 ms for tens of
seconds while the baseline held steady). An interval that treats a block's pairs as independent
draws describes one run, not the answer a rerun gives. So:

* **The unit.** In alternate mode, a *block pair*: one block's requests sent to the baseline, and
  the same requests to the candidate (the ``block`` label inside one experiment, so every sweep
  batch adds its own). In mirror mode, and for any pair without a block label, a *segment*: one
  experiment's pairs in send order, cut into consecutive runs of at least ``SEGMENT_PAIRS`` pairs
  (at most ``MAX_SEGMENTS``), since both sides served a segment's requests at the same moments.
  Split and passthrough runs have no pairs, so no unit.
* **The interval** of a paired figure (the pooled median per-pair ratio; the ratio of the sides'
  pooled medians) comes from resampling whole units (a cluster bootstrap, seeded): the pooled point
  times ``exp(±t * sd * sqrt(B / (B - 1)))``, ``sd`` the resamples' standard deviation of the log
  figure, ``t`` Student's quantile on ``B - 1`` degrees of freedom
  (``core.statistics.cluster.cluster_interval``). The spread of pairs inside a unit enters only through the
  units' figures.
* **Enough units.** A verdict needs ``MIN_UNITS`` units (``core.compare.verdict``); every
  interval says how many it rests on.
* **Heterogeneity.** Cochran's Q of the units' log median ratios, each weighted by the variance its
  own pairs imply (``pi/2 * var / n``, a median's): how much more the units differ than their
  pairs' noise explains (``I^2``, and the chi-square p-value).
* **Drift.** Runs of units where one side's level moved beyond chance and the per-pair ratios
  followed (``core.compare.drift``). With an episode, each paired interval becomes the union
  of the interval over all units and the one over the units outside every episode (the
  verdict then needs ``MIN_UNITS`` of those).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specproxy.core.compare.drift import DriftEpisode, drift_episodes, flag_drift
from specproxy.core.compare.units import (
    Units,
    unit_groups,
)
from specproxy.core.records.model import Role
from specproxy.core.statistics.cluster import cluster_interval
from specproxy.core.statistics.distributions import chi2_sf
from specproxy.core.statistics.stats import CONFIDENCE, Interval, quantile_sorted

MIN_UNITS = 6


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    values.sort()
    return quantile_sorted(values, 0.5)


def _log(value: float | None) -> float | None:
    if value is None:
        return None
    return -math.inf if value <= 0.0 else math.log(value)


def unit_medians(values: Sequence[float | None], units: Units) -> list[float | None]:
    """The median of each unit's values (None where a unit has none)."""
    return [_median(g) for g in unit_groups(values, units, frozenset())]


@dataclass(frozen=True, slots=True)
class Replicated:
    """A paired figure's point and interval from the spread between units.

    ``units`` is how many units the interval rests on (those with a value); ``clean_units``
    how many of them lie outside every drift episode (``units`` when there is none);
    ``widened`` says why the interval was widened (None when it was not).
    """

    interval: Interval | None
    units: int
    clean_units: int
    widened: str | None = None


def _union(a: Interval | None, b: Interval | None) -> Interval | None:
    if a is None or b is None:
        return a
    low, high = min(a.low, b.low), max(a.high, b.high)
    return Interval(a.point, low, high, a.n, a.confidence, units=a.units, unit=a.unit)


def _replicated(
    num: Sequence[float | None],
    den: Sequence[float | None] | None,
    units: Units,
    flagged: frozenset[int],
    confidence: float,
) -> Replicated:
    def interval(skip: frozenset[int]) -> Interval | None:
        groups = unit_groups(num, units, skip)
        dens = unit_groups(den, units, skip) if den is not None else None
        return cluster_interval(groups, dens, unit=units.kind, confidence=confidence)

    every = interval(frozenset())
    count = every.units or 0 if every is not None else 0
    if not flagged:
        return Replicated(every, count, count)
    clean = interval(flagged)
    clean_units = clean.units or 0 if clean is not None else 0
    return Replicated(_union(every, clean), count, clean_units, None if clean is None else "drift")


def replicate_ratio(
    ratios: Sequence[float | None],
    units: Units,
    flagged: frozenset[int] = frozenset(),
    *,
    confidence: float = CONFIDENCE,
) -> Replicated:
    """The pooled median of the (failure-aware) per-pair ``ratios`` and its interval between
    units (``core.statistics.cluster.cluster_interval``); with ``flagged`` units, widened (module doc)."""
    return _replicated(ratios, None, units, flagged, confidence)


def replicate_medians(
    base: Sequence[float | None],
    cand: Sequence[float | None],
    units: Units,
    flagged: frozenset[int] = frozenset(),
    *,
    confidence: float = CONFIDENCE,
) -> Replicated:
    """The ratio of the sides' medians (each over its completed values in the pairs:
    bench_serving's figure) and its interval between units."""
    return _replicated(cand, base, units, flagged, confidence)


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


@dataclass(frozen=True, slots=True)
class UnitFigures:
    """One unit over time: when each side ran it (Unix s), its pairs, its median per-pair
    E2E ratio and ratio of medians, and each side's level (median TPOT of its completed
    requests in the unit, microseconds; median E2E where none has a TPOT)."""

    index: int
    label: str
    pairs: int
    baseline_span: tuple[float, float]
    candidate_span: tuple[float, float]
    ratio: float | None
    medians_ratio: float | None
    baseline_level_us: float | None
    candidate_level_us: float | None
    drifted: Role | None = None

    @property
    def flagged(self) -> bool:
        """Whether the unit lies in a drift episode (``drifted`` names the side)."""
        return self.drifted is not None

    @property
    def start_s(self) -> float:
        return min(self.baseline_span[0], self.candidate_span[0])

    @property
    def end_s(self) -> float:
        return max(self.baseline_span[1], self.candidate_span[1])


@dataclass(frozen=True, slots=True)
class Heterogeneity:
    """Cochran's Q over the units' log median ratios (module docstring)."""

    q: float
    df: int
    p_value: float
    i2: float

    def describe(self) -> str:
        return (
            f"between-unit heterogeneity Q = {self.q:.1f} on {self.df} df (p = "
            f"{self.p_value:.2g}), I² = {self.i2:.0%} of the spread is between units"
        )


@dataclass(frozen=True, slots=True)
class Replication:
    """The units of one comparison over time, their heterogeneity and drift episodes."""

    unit: str
    units: tuple[UnitFigures, ...]
    heterogeneity: Heterogeneity | None
    episodes: tuple[DriftEpisode, ...]

    @property
    def flagged(self) -> frozenset[int]:
        return frozenset(u.index for u in self.units if u.flagged)

    @property
    def count(self) -> int:
        return len(self.units)


@dataclass(frozen=True, slots=True)
class PairFacts:
    """Per pair, in pair order, what the timeline needs: each side's send and end times
    (Unix s; the end is the send where a request has no E2E), its E2E and its level
    (TPOT), microseconds, None where a side did not complete or has no such figure."""

    base_sent: Sequence[float]
    cand_sent: Sequence[float]
    base_end: Sequence[float]
    cand_end: Sequence[float]
    base_e2e: Sequence[float | None]
    cand_e2e: Sequence[float | None]
    base_level: Sequence[float | None]
    cand_level: Sequence[float | None]


def replication(units: Units, facts: PairFacts, e2e_ratios: Sequence[float | None]) -> Replication:
    """The units' figures in time order, their heterogeneity and drift episodes."""
    spans = _spans(units, facts)
    medians = unit_medians(e2e_ratios, units)
    counts = [0] * units.count
    for r, u in zip(e2e_ratios, units.of, strict=True):
        counts[u] += r is not None
    b_e2e, c_e2e = unit_medians(facts.base_e2e, units), unit_medians(facts.cand_e2e, units)
    b_lvl, c_lvl = unit_medians(facts.base_level, units), unit_medians(facts.cand_level, units)
    if any(v is None for v in (*b_lvl, *c_lvl)):  # no TPOT somewhere: levels from E2E
        b_lvl, c_lvl = b_e2e, c_e2e
    logs = [_log(m) for m in medians]
    drifted = flag_drift(logs, [_log(v) for v in b_lvl], [_log(v) for v in c_lvl])
    figures = tuple(
        UnitFigures(
            index=u,
            label=units.labels[u],
            pairs=counts[u],
            baseline_span=spans[u][0],
            candidate_span=spans[u][1],
            ratio=medians[u],
            medians_ratio=_ratio(c_e2e[u], b_e2e[u]),
            baseline_level_us=b_lvl[u],
            candidate_level_us=c_lvl[u],
            drifted=drifted.get(u),
        )
        for u in range(units.count)
    )
    return Replication(
        unit=units.kind,
        units=figures,
        heterogeneity=_heterogeneity(e2e_ratios, units, logs),
        episodes=drift_episodes(figures, units.kind),
    )


def _spans(units: Units, facts: PairFacts) -> list[tuple[tuple[float, float], tuple[float, float]]]:
    lo_b = [math.inf] * units.count
    hi_b = [-math.inf] * units.count
    lo_c, hi_c = list(lo_b), list(hi_b)
    rows = zip(
        units.of, facts.base_sent, facts.base_end, facts.cand_sent, facts.cand_end, strict=True
    )
    for u, bs, be, cs, ce in rows:  # min(a, b) and max(a, b), without their calls
        lo_b[u], hi_b[u] = bs if bs < lo_b[u] else lo_b[u], be if be > hi_b[u] else hi_b[u]
        lo_c[u], hi_c[u] = cs if cs < lo_c[u] else lo_c[u], ce if ce > hi_c[u] else hi_c[u]
    return [((lo_b[u], hi_b[u]), (lo_c[u], hi_c[u])) for u in range(units.count)]


def _heterogeneity(
    ratios: Sequence[float | None], units: Units, logs: Sequence[float | None]
) -> Heterogeneity | None:
    """Cochran's Q of the units' log median ratios (module docstring); None under 2 units
    with at least 3 completed pairs and some spread."""
    groups: list[list[float]] = [[] for _ in range(units.count)]
    for r, u in zip(ratios, units.of, strict=True):
        if r is not None and 0.0 < r < math.inf:
            groups[u].append(math.log(r))
    points: list[tuple[float, float]] = []  # (log median, variance)
    for y, values in zip(logs, groups, strict=True):
        if y is None or not math.isfinite(y) or len(values) < 3:
            continue
        mean = math.fsum(values) / len(values)
        var = math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1)
        if var > 0:
            points.append((y, math.pi / 2 * var / len(values)))
    if len(points) < 2:
        return None
    weights = [1.0 / v for _, v in points]
    centre = math.fsum(w * y for w, (y, _) in zip(weights, points, strict=True)) / math.fsum(
        weights
    )
    q = math.fsum(w * (y - centre) ** 2 for w, (y, _) in zip(weights, points, strict=True))
    df = len(points) - 1
    i2 = max(0.0, (q - df) / q) if q > 0 else 0.0
    return Heterogeneity(q=q, df=df, p_value=chi2_sf(q, df), i2=i2)
