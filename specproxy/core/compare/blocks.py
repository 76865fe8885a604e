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
  (``core.cluster.cluster_interval``). The spread of pairs inside a unit enters only through the
  units' figures.
* **Enough units.** A verdict needs ``MIN_UNITS`` units (``core.compare.verdict``); every
  interval says how many it rests on.
* **Heterogeneity.** Cochran's Q of the units' log median ratios, each weighted by the variance its
  own pairs imply (``pi/2 * var / n``, a median's): how much more the units differ than their
  pairs' noise explains (``I^2``, and the chi-square p-value).
* **Drift.** Each side's *level* in a unit is the median TPOT of its completed requests
  there (median E2E where there is no TPOT). On each side's log levels in time order, the
  contiguous run of at most half the units that differs most from the rest (its mean shift
  over that shift's standard error) is an *episode* when all three hold:

  - the shift is at least ``log(1 + DRIFT_MIN_CHANGE)``;
  - it lies beyond chance: more than ``DRIFT_Z`` robust standard deviations of the other
    units' levels (1.4826 x their median absolute deviation, at least ``MIN_SCALE``), or,
    for a run whose place in time matters, a permutation test of the largest statistic
    over ``DRIFT_PERMUTATIONS`` seeded shuffles of the units gives p <= ``DRIFT_P``;
  - the units' median per-pair ratios moved the same way by at least half as much (a
    slower candidate raises the ratio, a slower baseline lowers it), so a change both
    sides shared is not drift.

  The search repeats on the units left, up to ``MAX_EPISODES``: "the candidate slowed by
  80% for 40 s from 12:03:05 UTC". With an episode, each paired interval becomes the union
  of the interval over all units and the one over the units outside every episode (the
  verdict then needs ``MIN_UNITS`` of those).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from specproxy.core.cluster import cluster_interval
from specproxy.core.compare.units import (
    Units,
    unit_groups,
)
from specproxy.core.distributions import chi2_sf
from specproxy.core.model import Role
from specproxy.core.stats import CONFIDENCE, Interval, quantile_sorted

MIN_UNITS = 6
DRIFT_MIN_CHANGE = 0.3
DRIFT_Z = 3.0
MIN_SCALE = 0.02
DRIFT_P = 0.01
DRIFT_PERMUTATIONS = 199
DRIFT_SEED = 20240601
MAX_EPISODES = 3
MIN_DRIFT_UNITS = 5


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
    units (``core.cluster.cluster_interval``); with ``flagged`` units, widened (module doc)."""
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
class DriftEpisode:
    """A run of consecutive flagged units on one side (module docstring); ``change`` is the
    relative change of the affected side (+0.8: 80% slower), ``start_s``/``end_s`` Unix s
    of that side's windows in the episode, ``first``/``last`` unit indices."""

    side: Role
    change: float
    start_s: float
    end_s: float
    first: int
    last: int
    of_units: int
    unit_kind: str

    def describe(self) -> str:
        verb = "slowed by" if self.change > 0 else "sped up, its times down by"
        size = abs(self.change)
        clock = time.strftime("%H:%M:%S", time.gmtime(self.start_s))
        where = f"{self.unit_kind}s {self.first + 1}–{self.last + 1}"
        if self.first == self.last:
            where = f"{self.unit_kind} {self.first + 1}"
        return (
            f"the {self.side.value} {verb} {size:.0%} for {self.end_s - self.start_s:.0f} s "
            f"from {clock} UTC ({where} of {self.of_units})"
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
    drifted = _flag(logs, b_lvl, c_lvl)
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
        episodes=_episodes(figures, units.kind),
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


def _segments(values: Sequence[float]) -> tuple[float, int, int, float]:
    """The contiguous run of ``values`` that differs most from the rest: ``(T, first, last,
    shift)`` with ``shift`` the run's mean minus the rest's and ``T`` that difference over its
    standard error (pooled residual variance). A run holds at most half the values (an
    episode is the minority of a run: of a prefix and its complement, the shorter one) and
    leaves at least 2 outside."""
    n = len(values)
    s1, s2 = [0.0], [0.0]
    for v in values:
        s1.append(s1[-1] + v)
        s2.append(s2[-1] + v * v)
    best = (-1.0, 0, 0, 0.0)
    for a in range(n):
        for b in range(a, n):
            n_in = b - a + 1
            n_out = n - n_in
            if n_out < 2 or 2 * n_in > n:
                break
            sum_in, sq_in = s1[b + 1] - s1[a], s2[b + 1] - s2[a]
            sum_out, sq_out = s1[n] - sum_in, s2[n] - sq_in
            mean_in, mean_out = sum_in / n_in, sum_out / n_out
            sse = max(0.0, sq_in - sum_in * mean_in + sq_out - sum_out * mean_out)
            shift = mean_in - mean_out
            scale = math.sqrt(sse / (n - 2) * (1.0 / n_in + 1.0 / n_out))
            t = abs(shift) / scale if scale > 0 else (math.inf if shift else 0.0)
            if t > best[0]:
                best = (t, a, b, shift)
    return best


def _segment_p(values: Sequence[float], observed: float, seed: int) -> float:
    """The permutation p-value of the largest segment statistic (``DRIFT_PERMUTATIONS``
    seeded shuffles: the units' order carries no drift under the null)."""
    rng = random.Random(seed)
    shuffled = list(values)
    beaten = 0
    for _ in range(DRIFT_PERMUTATIONS):
        rng.shuffle(shuffled)
        beaten += _segments(shuffled)[0] >= observed
    return (1 + beaten) / (1 + DRIFT_PERMUTATIONS)


def _flag(
    ratio_logs: Sequence[float | None],
    base_levels: Sequence[float | None],
    cand_levels: Sequence[float | None],
) -> dict[int, Role]:
    """The units in a drift episode and the side that drifted there (module docstring)."""
    sides = ((Role.BASELINE, [_log(v) for v in base_levels], -1.0),
             (Role.CANDIDATE, [_log(v) for v in cand_levels], 1.0))  # fmt: skip
    usable = [
        u
        for u, r in enumerate(ratio_logs)
        if r is not None
        and math.isfinite(r)
        and all((y := logs[u]) is not None and math.isfinite(y) for _, logs, _ in sides)
    ]
    out: dict[int, Role] = {}
    floor = math.log1p(DRIFT_MIN_CHANGE)
    for round_index in range(MAX_EPISODES):
        left = [u for u in usable if u not in out]
        if len(left) < MIN_DRIFT_UNITS:
            break
        found = []
        for side, logs, sign in sides:
            values = [float(logs[u] or 0.0) for u in left]
            t, a, b, shift = _segments(values)
            if abs(shift) >= floor:
                found.append((t, side, sign, values, a, b, shift))
        if not found:
            break
        t, side, sign, values, a, b, shift = max(found, key=lambda f: f[0])
        members = left[a : b + 1]
        inside = [float(ratio_logs[u] or 0.0) for u in members]
        outside = [float(ratio_logs[u] or 0.0) for u in left if u not in members]
        moved = sign * (sum(inside) / len(inside) - sum(outside) / len(outside))
        if moved * math.copysign(1.0, shift) < abs(shift) / 2:
            break  # the ratio did not follow: both sides moved, or noise
        rest = sorted(v for k, v in enumerate(values) if not a <= k <= b)
        centre = quantile_sorted(rest, 0.5)
        spread = 1.4826 * quantile_sorted(sorted(abs(v - centre) for v in rest), 0.5)
        beyond = abs(shift) > DRIFT_Z * max(spread, MIN_SCALE)
        if not beyond and _segment_p(values, t, DRIFT_SEED + round_index) > DRIFT_P:
            break
        for u in members:
            out[u] = side
    return out


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


def _episodes(figures: Sequence[UnitFigures], kind: str) -> tuple[DriftEpisode, ...]:
    """Runs of consecutive units drifted on one side the same way (module docstring); the
    change is the side's own: its mean log level over the run against its mean over the
    units outside every episode (the shift the search tested)."""
    clean = [f for f in figures if not f.flagged]

    def level(f: UnitFigures, side: Role) -> float | None:
        value = f.candidate_level_us if side is Role.CANDIDATE else f.baseline_level_us
        return math.log(value) if value else None

    def mean(values: list[float]) -> float | None:
        return math.fsum(values) / len(values) if values else None

    typical = {side: mean([y for f in clean if (y := level(f, side)) is not None]) for side in Role}
    runs: list[tuple[Role, bool, list[int]]] = []
    for f in figures:
        if f.drifted is None:
            continue
        y, centre = level(f, f.drifted), typical[f.drifted]
        up = y is not None and centre is not None and y > centre
        last = runs[-1] if runs else None
        if last and last[0] is f.drifted and last[1] == up and last[2][-1] == f.index - 1:
            last[2].append(f.index)
        else:
            runs.append((f.drifted, up, [f.index]))
    out = []
    for side, _, run in runs:
        centre = typical[side]
        ys = [y for i in run if (y := level(figures[i], side)) is not None]
        change = math.expm1(math.fsum(ys) / len(ys) - centre) if ys and centre is not None else 0.0
        windows = [
            figures[i].candidate_span if side is Role.CANDIDATE else figures[i].baseline_span
            for i in run
        ]
        out.append(
            DriftEpisode(
                side=side,
                change=change,
                start_s=min(w[0] for w in windows),
                end_s=max(w[1] for w in windows),
                first=run[0],
                last=run[-1],
                of_units=len(figures),
                unit_kind=kind,
            )
        )
    return tuple(out)
