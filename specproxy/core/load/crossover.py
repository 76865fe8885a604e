"""Where speculation stops paying: the crossover of a paired ratio against load.

Two parts, both pure (stdlib ``math`` only):

``estimate_crossover`` reads one load sweep, a ``LevelRatio`` per level (the median
per-pair ratio candidate/baseline and its interval), and says at which load the
ratio crosses 1. The rules:

- *Abscissa.* Loads (concurrency or rate) are compared in ``log(load)``: ladders are
  geometric, and a step-cost curve of the form ``(a + b n) / (c + d n)`` is close to
  linear in ``log n`` around its crossing. Between two levels the ratio is interpolated
  linearly in its own value.
- *Estimate.* The point ratios are first made non-decreasing in load by isotonic
  regression (pool-adjacent-violators, equal weights), so a noisy, non-monotone curve
  still has exactly one upward crossing; the estimate is where the fitted curve reaches
  1. An infinite ratio (every candidate request failed) pools as infinite; a crossing
  into an infinite value sits at the geometric midpoint of the two loads.
- *Interval.* From the band of per-level intervals (levels without one are left out):
  the lower bound is where the band's *upper* edge first reaches 1 (below it, every
  level is surely faster), the upper bound where the band's *lower* edge last rises
  through 1 (above it, every level is surely slower). Taking the first and the last
  crossing keeps the interval conservative on a non-monotone band; a crossing into or
  out of an infinite or zero edge takes the outer load of the two. When the band
  reaches 1 before the lowest level the bound is open, ``0.0``; when it never gets
  there, ``math.inf``. With per-level 95% intervals the true crossing lies outside only
  when a bracketing level's interval misses on the one side that matters, so the
  interval covers a monotone truth at least ~90% of the time, less the interpolation
  bias between two levels (small on a geometric ladder). The interval is widened to
  hold the estimate when the isotonic fit puts it outside.
- *Status.* ``crossed`` (the fitted curve starts below 1 and ends at or above it),
  ``pays_everywhere`` (every point below 1: the interval, if any, is ``(low, inf)``),
  ``pays_nowhere`` (every point at or above 1: ``(0.0, high)``), ``undetermined`` (no
  level, or points on both sides of 1 but a ratio that falls with load).

``closed_form_crossover`` is the crossover the simulator's latency model implies
(``specproxy sim --help``): a step over ``n`` running requests costs
``step_us * (1 + contention * (n - 1)) + per_token_us * tokens_per_request * n +
draft_us``, and produces ``tokens_per_step`` tokens per request on average, ``1`` on a
baseline and ``1 + p + p^2 + ... + p^m`` on a speculative server whose acceptance model
keeps each of at most ``m`` drafts with probability ``p`` until the first rejection.
Per-token time is step time over tokens per step; both sides are linear in ``n``, so
they meet at one concurrency.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

METRICS = ("e2e", "tpot")
STATUSES = ("crossed", "pays_everywhere", "pays_nowhere", "undetermined")


@dataclass(frozen=True, slots=True)
class LevelRatio:
    """One load level's paired ratio candidate/baseline."""

    load: float  # concurrency or rate (> 0)
    point: float  # median per-pair ratio candidate/baseline (may be inf)
    low: float | None  # interval bounds (None: no interval at this level)
    high: float | None


@dataclass(frozen=True, slots=True)
class Crossover:
    """Where the ratio crosses 1, with an interval; see the module docstring."""

    metric: str  # "e2e" or "tpot"
    estimate: float | None  # load where the ratio crosses 1
    ci: tuple[float, float] | None
    status: str  # "crossed", "pays_everywhere", "pays_nowhere", "undetermined"
    detail: str  # one sentence for the report


def _checked(levels: Sequence[LevelRatio], metric: str) -> list[LevelRatio]:
    """``levels`` sorted by load; ValueError naming the first bad field."""
    if metric not in METRICS:
        raise ValueError(f"metric: expected one of {', '.join(METRICS)}, got {metric!r}")
    for level in levels:
        if not (math.isfinite(level.load) and level.load > 0):
            raise ValueError(f"load: must be a positive finite number, got {level.load}")
        if math.isnan(level.point) or level.point < 0:
            raise ValueError(
                f"point: must be >= 0 (inf allowed), got {level.point} at load {level.load}"
            )
        if (level.low is None) != (level.high is None):
            raise ValueError(f"low/high: give both or neither (load {level.load})")
        if level.low is not None and level.high is not None:
            if math.isnan(level.low) or math.isnan(level.high) or level.low < 0:
                raise ValueError(f"low/high: must be >= 0 and not NaN (load {level.load})")
            if level.low > level.high:
                raise ValueError(f"low: {level.low} is above high {level.high} (load {level.load})")
    ordered = sorted(levels, key=lambda lv: lv.load)
    for a, b in itertools.pairwise(ordered):
        if a.load == b.load:
            raise ValueError(f"load: {a.load} appears twice")
    return ordered


def isotonic(values: Sequence[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in least squares (``inf`` pools as inf)."""
    blocks: list[tuple[float, int]] = []  # (mean, size)
    for value in values:
        mean, size = value, 1
        while blocks and blocks[-1][0] > mean:
            prev_mean, prev_size = blocks.pop()
            total = size + prev_size
            if math.isinf(prev_mean) or math.isinf(mean):
                mean = math.inf
            else:
                mean = (mean * size + prev_mean * prev_size) / total
            size = total
        blocks.append((mean, size))
    return [mean for mean, size in blocks for _ in range(size)]


def _between(x0: float, y0: float, x1: float, y1: float, *, infinite: str) -> float:
    """Load where the segment (log x0, y0)-(log x1, y1) reaches 1; ``y0 < 1 <= y1``.

    ``infinite`` says what an infinite or zero end gives: ``"low"`` (x0), ``"high"``
    (x1) or ``"mid"`` (the geometric midpoint).
    """
    if math.isinf(y1) or y0 <= 0.0:
        return {"low": x0, "high": x1}.get(infinite, math.sqrt(x0 * x1))
    frac = (1.0 - y0) / (y1 - y0)
    return math.exp(math.log(x0) + frac * (math.log(x1) - math.log(x0)))


def _point_crossing(loads: Sequence[float], fitted: Sequence[float]) -> float | None:
    """Where the non-decreasing ``fitted`` first reaches 1 (None: it starts there, or never)."""
    for i in range(1, len(fitted)):
        if fitted[i - 1] < 1.0 <= fitted[i]:
            return _between(loads[i - 1], fitted[i - 1], loads[i], fitted[i], infinite="mid")
    return None


def _band(ordered: Sequence[LevelRatio]) -> tuple[float, float] | None:
    """(lower, upper) bound of the crossing from the interval band; see the module docstring."""
    banded = [lv for lv in ordered if lv.low is not None and lv.high is not None]
    if not banded:
        return None
    loads = [float(lv.load) for lv in banded]
    highs = [lv.high for lv in banded if lv.high is not None]
    lows = [lv.low for lv in banded if lv.low is not None]
    first = next((i for i, h in enumerate(highs) if h >= 1.0), None)
    if first is None:
        lower = loads[-1]
    elif first == 0:
        lower = 0.0
    else:
        lower = _between(
            loads[first - 1], highs[first - 1], loads[first], highs[first], infinite="low"
        )
    last = next((i for i in range(len(lows) - 1, -1, -1) if lows[i] < 1.0), None)
    if last is None:
        upper = loads[0]
    elif last == len(lows) - 1:
        upper = math.inf
    else:
        upper = _between(loads[last], lows[last], loads[last + 1], lows[last + 1], infinite="high")
    return lower, upper


def _bound(value: float) -> str:
    if value == 0.0:
        return "below the lowest level"
    return "above the highest level" if math.isinf(value) else f"{value:.3g}"


def _span(ci: tuple[float, float] | None) -> str:
    """The interval in words, for a crossing inside the tested range."""
    if ci is None:
        return "no level has an interval"
    return f"interval {_bound(ci[0])} to {_bound(ci[1])}"


def _no_crossing(metric: str, ci: tuple[float, float] | None, tested: str, *, pays: bool) -> str:
    """The detail sentence of ``pays_everywhere`` (``pays``) or ``pays_nowhere``."""
    side = "below 1" if pays else "at or above 1"
    head = f"the {metric.upper()} ratio is {side} at every tested load ({tested})"
    if ci is None:
        return f"{head}; no level has an interval."
    edge = ci[0] if pays else ci[1]
    if edge == 0.0 or math.isinf(edge):
        return f"{head}, but the intervals do not rule out a crossing anywhere in that range."
    where = "above" if pays else "below"
    return f"{head}; by the intervals a crossing, if any, lies {where} {edge:.3g}."


def estimate_crossover(levels: Sequence[LevelRatio], metric: str) -> Crossover:
    """The load at which the ``metric`` ratio crosses 1; see the module docstring."""
    ordered = _checked(levels, metric)
    name = metric.upper()
    if not ordered:
        return Crossover(metric, None, None, "undetermined", f"no {name} level to read.")
    loads = [float(lv.load) for lv in ordered]
    points = [float(lv.point) for lv in ordered]
    ci = _band(ordered)
    tested = f"loads {loads[0]:.3g} to {loads[-1]:.3g}"
    if all(p < 1.0 for p in points):
        ci = None if ci is None else (ci[0], math.inf)
        text = _no_crossing(metric, ci, tested, pays=True)
        return Crossover(metric, None, ci, "pays_everywhere", text)
    if all(p >= 1.0 for p in points):
        ci = None if ci is None else (0.0, ci[1])
        text = _no_crossing(metric, ci, tested, pays=False)
        return Crossover(metric, None, ci, "pays_nowhere", text)
    fitted = isotonic(points)
    estimate = _point_crossing(loads, fitted)
    if estimate is None:
        text = f"the {name} ratio is on both sides of 1 but does not rise with load ({tested})."
        return Crossover(metric, None, ci, "undetermined", text)
    if ci is not None:
        ci = (min(ci[0], estimate), max(ci[1], estimate))
    pooled = sum(1 for p, f in zip(points, fitted, strict=True) if p != f)
    shape = f"; {pooled} levels pooled where the ratio fell with load" if pooled else ""
    text = f"the {name} ratio crosses 1 near load {estimate:.3g} ({_span(ci)}){shape}."
    return Crossover(metric, estimate, ci, "crossed", text)


@dataclass(frozen=True, slots=True)
class SideCost:
    """One simulated server's step cost (see the module docstring); times in microseconds."""

    step_us: float
    per_token_us: float = 0.0
    contention: float = 0.0
    tokens_per_request: int = 1
    draft_us: float = 0.0
    tokens_per_step: float = 1.0

    def __post_init__(self) -> None:
        if min(self.step_us, self.per_token_us, self.contention, self.draft_us) < 0:
            raise ValueError("step costs and contention must not be negative")
        if self.tokens_per_request < 1 or self.tokens_per_step < 1:
            raise ValueError("tokens_per_request and tokens_per_step must be >= 1")

    @classmethod
    def baseline(
        cls, *, decode_step_ms: float, per_token_us: float = 0.0, contention: float = 0.0
    ) -> SideCost:
        """A baseline server: one token per running request per step."""
        return cls(step_us=decode_step_ms * 1000, per_token_us=per_token_us, contention=contention)

    @classmethod
    def speculative(
        cls,
        *,
        verify_step_ms: float,
        num_steps: int,
        num_draft_tokens: int,
        accept_prob: float,
        max_accepted: int,
        draft_step_ms: float = 0.0,
        per_token_us: float = 0.0,
        contention: float = 0.0,
    ) -> SideCost:
        """A speculative server: ``num_draft_tokens`` verified per request, drafts chained."""
        return cls(
            step_us=verify_step_ms * 1000,
            per_token_us=per_token_us,
            contention=contention,
            tokens_per_request=num_draft_tokens,
            draft_us=num_steps * draft_step_ms * 1000,
            tokens_per_step=expected_tokens_per_step(accept_prob, max_accepted),
        )

    def step_time_us(self, running: float) -> float:
        """One step's duration with ``running`` requests in the batch."""
        fixed = self.step_us * (1.0 + self.contention * max(0.0, running - 1))
        return fixed + self.per_token_us * self.tokens_per_request * running + self.draft_us

    def per_token_time_us(self, running: float) -> float:
        """Mean time per output token of one stream with ``running`` requests in the batch."""
        return self.step_time_us(running) / self.tokens_per_step


def expected_tokens_per_step(accept_prob: float, max_accepted: int) -> float:
    """``1 + p + ... + p^m``: accepted drafts of a chain cut at the first rejection, plus one."""
    if not 0.0 <= accept_prob <= 1.0:
        raise ValueError(f"accept_prob: must be in [0, 1], got {accept_prob}")
    if max_accepted < 0:
        raise ValueError(f"max_accepted: must be >= 0, got {max_accepted}")
    return sum(accept_prob**k for k in range(max_accepted + 1))


def closed_form_crossover(baseline: SideCost, candidate: SideCost) -> float | None:
    """Concurrency (>= 1) where both per-token times are equal; None when they never meet there.

    Each side's per-token time is ``(a + b n) / t`` with ``a = step (1 - contention) +
    draft`` and ``b = step * contention + per_token * tokens_per_request``; equal times
    give ``n = (a_c / t_c - a_b / t_b) / (b_b / t_b - b_c / t_c)``.
    """

    def line(side: SideCost) -> tuple[float, float]:
        intercept = side.step_us * (1.0 - side.contention) + side.draft_us
        slope = side.step_us * side.contention + side.per_token_us * side.tokens_per_request
        return intercept / side.tokens_per_step, slope / side.tokens_per_step

    base_a, base_b = line(baseline)
    cand_a, cand_b = line(candidate)
    if base_b == cand_b:
        return None
    running = (cand_a - base_a) / (base_b - cand_b)
    return running if running >= 1.0 else None
