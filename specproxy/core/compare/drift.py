"""Drift episodes (pure): runs of consecutive units of replication (``core.compare.blocks``)
where one side's speed moved beyond chance and the units' per-pair ratios followed.

Why: servers drift (a candidate's verify step once went from 6 to 11 ms for tens of seconds
while the baseline held steady), and a comparison that spans such an episode measures the
episode along with the configurations. How: each side's *level* in a unit is the median TPOT
of its completed requests there (median E2E where there is no TPOT). On each side's log
levels in time order, the contiguous run of at most half the units that differs most from
the rest (its mean shift over that shift's standard error) is an *episode* when all three
hold:

- the shift is at least ``log(1 + DRIFT_MIN_CHANGE)``;
- it lies beyond chance: more than ``DRIFT_Z`` robust standard deviations of the other
  units' levels (1.4826 x their median absolute deviation, at least ``MIN_SCALE``), or,
  for a run whose place in time matters, a permutation test of the largest statistic
  over ``DRIFT_PERMUTATIONS`` seeded shuffles of the units gives p <= ``DRIFT_P``;
- the units' median per-pair ratios moved the same way by at least half as much (a
  slower candidate raises the ratio, a slower baseline lowers it), so a change both
  sides shared is not drift.

The search repeats on the units left, up to ``MAX_EPISODES``: "the candidate slowed by
80% for 40 s from 12:03:05 UTC". How the episodes widen the paired intervals is
``core.compare.blocks``'.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from specproxy.core.records.model import Role
from specproxy.core.statistics.stats import quantile_sorted

if TYPE_CHECKING:
    from specproxy.core.compare.blocks import UnitFigures

DRIFT_MIN_CHANGE = 0.3
DRIFT_Z = 3.0
MIN_SCALE = 0.02
DRIFT_P = 0.01
DRIFT_PERMUTATIONS = 199
DRIFT_SEED = 20240601
MAX_EPISODES = 3
MIN_DRIFT_UNITS = 5


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


def flag_drift(
    ratio_logs: Sequence[float | None],
    base_logs: Sequence[float | None],
    cand_logs: Sequence[float | None],
) -> dict[int, Role]:
    """The units in a drift episode and the side that drifted there (module docstring):
    ``ratio_logs`` the units' log median per-pair ratios, ``base_logs`` and ``cand_logs``
    the sides' log levels, in time order."""
    sides = ((Role.BASELINE, base_logs, -1.0), (Role.CANDIDATE, cand_logs, 1.0))
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


def drift_episodes(figures: Sequence[UnitFigures], kind: str) -> tuple[DriftEpisode, ...]:
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
