"""The best setting at one load level, and how two settings compare (pure: figures in).

A setting sweep pairs every setting value with the same kept baseline, at different times.
Two values ``a`` and ``b`` are therefore compared through their baseline-normalised figures:
the median per-pair ratio candidate/baseline at the level (``core.compare.blocks``), each
with its 95% interval from the spread between block pairs.

**Contrast of two values** (``contrast``). The figure is ``R_a / R_b``. Each value's
interval is ``R * exp(±t_(B-1) * se)`` (``core.statistics.cluster.cluster_interval``: ``B`` block pairs,
``se`` the cluster bootstrap's standard error of ``log R``, already widened for neighbouring
units that share a server state), so each ``se`` is read back as the interval's wider log
half-width over ``t_(B-1)`` (a drift-widened, lopsided interval gives its wider side). The
two values ran on disjoint block pairs, so their log figures are independent estimates:
``log(R_a / R_b) ± t_df * sqrt(se_a² + se_b²)`` with Welch-Satterthwaite's ``df``. A value
whose interval is open (under 2 block pairs, or a figure of 0 or inf from failures) gives
no contrast. Coverage on constructed block data: ``bench/setting_contrast_coverage.py``
(and ``tests/sweep/test_setting_choice.py``).

**The choice at a level** (``choose``). A value is *eligible* where its verdict at the level
is ``faster``: the 95% interval of its median per-pair E2E ratio lies wholly below
``1 - margin`` (2% unless an A/A run widened it), on at least 6 block pairs, with failures
no more frequent than the baseline's (``core.compare.verdict``). The *best* is the eligible
value with the smallest median per-pair ratio; with none eligible the level is ``off``
(speculation off: the baseline). The *runner-up* is the next smallest ratio among the other
fixed values (eligible or not). ``vs_runner_up`` says whether the best is told apart:
``faster`` when the contrast's interval lies wholly below ``1 - margin``; otherwise the two
cannot be told apart (``no_difference`` when it lies within the margin, else
``inconclusive``). The same contrast says whether SGLang's adaptive mode matches the best
fixed value (``adaptive / best``; at a level that is off, ``adaptive / nearest``, the fixed
value with the smallest ratio): ``matches`` when its interval lies within the margin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specproxy.core.statistics.distributions import student_t_quantile
from specproxy.core.statistics.stats import CONFIDENCE

MARGIN = 0.02


@dataclass(frozen=True, slots=True)
class RatioEstimate:
    """One value's figure at one level: the point, its 95% interval and its block pairs."""

    point: float
    low: float
    high: float
    units: int
    confidence: float = CONFIDENCE

    @property
    def log_se(self) -> float | None:
        """The standard error of ``log point`` the interval implies (None: open interval)."""
        if self.units < 2 or not (0.0 < self.low <= self.point <= self.high < math.inf):
            return None
        t = student_t_quantile(1.0 - (1.0 - self.confidence) / 2.0, self.units - 1)
        return max(math.log(self.high / self.point), math.log(self.point / self.low)) / t


@dataclass(frozen=True, slots=True)
class Contrast:
    """``a / b`` of two independent estimates, its interval and Welch's degrees of freedom."""

    point: float
    low: float
    high: float
    df: float

    def label(self, margin: float = MARGIN) -> str:
        """``faster`` / ``slower`` / ``no_difference`` / ``inconclusive`` (module docstring)."""
        if self.high < 1.0 - margin:
            return "faster"
        if self.low > 1.0 + margin:
            return "slower"
        if 1.0 - margin <= self.low and self.high <= 1.0 + margin:
            return "no_difference"
        return "inconclusive"


def contrast(a: RatioEstimate, b: RatioEstimate, confidence: float = CONFIDENCE) -> Contrast | None:
    """``a / b`` with its Welch interval (module docstring); None when either is open."""
    sa, sb = a.log_se, b.log_se
    if sa is None or sb is None:
        return None
    var = sa * sa + sb * sb
    point = a.point / b.point
    if var == 0.0:
        return Contrast(point, point, point, math.inf)
    parts = (sa**4 / (a.units - 1)) + (sb**4 / (b.units - 1))
    df = var * var / parts if parts > 0 else math.inf
    t = student_t_quantile(1.0 - (1.0 - confidence) / 2.0, min(df, 1e6))
    half = t * math.sqrt(var)
    return Contrast(point, point * math.exp(-half), point * math.exp(half), df)


@dataclass(frozen=True, slots=True)
class Option:
    """One setting value at one level: its label, verdict there, and figure (None: no ratio)."""

    label: str
    verdict: str
    estimate: RatioEstimate | None
    adaptive: bool = False


@dataclass(frozen=True, slots=True)
class LevelChoice:
    """What ``choose`` found at one level (module docstring); ``best`` None means off."""

    level: float
    best: Option | None
    runner_up: Option | None
    vs_runner_up: Contrast | None
    nearest: Option | None  # the smallest ratio among fixed values (the best when one is)
    adaptive: Option | None
    adaptive_vs_best: Contrast | None

    @property
    def chosen(self) -> str:
        return self.best.label if self.best is not None else "off"


def _ranked(options: Sequence[Option]) -> list[Option]:
    fixed = [o for o in options if not o.adaptive and o.estimate is not None]
    return sorted(fixed, key=lambda o: o.estimate.point if o.estimate else math.inf)


def _contrast(a: Option | None, b: Option | None) -> Contrast | None:
    if a is None or b is None or a.estimate is None or b.estimate is None:
        return None
    return contrast(a.estimate, b.estimate)


def choose(level: float, options: Sequence[Option]) -> LevelChoice:
    """The best value at ``level``, or off, with its runner-up and the adaptive value."""
    ranked = _ranked(options)
    best = next((o for o in ranked if o.verdict == "faster"), None)
    nearest = ranked[0] if ranked else None
    runner = next((o for o in ranked if o is not best), None) if best is not None else None
    adaptive = next((o for o in options if o.adaptive and o.estimate is not None), None)
    vs_runner = _contrast(best, runner)
    vs_best = _contrast(adaptive, best or nearest)
    return LevelChoice(level, best, runner, vs_runner, nearest, adaptive, vs_best)


def apart_text(c: Contrast | None, margin: float = MARGIN) -> str:
    """How the best stands against the runner-up, in words."""
    if c is None:
        return "no interval (a value's interval is open)"
    if c.label(margin) == "faster":
        return "the best is faster"
    return "cannot be told apart"


def adaptive_text(c: Contrast | None, margin: float = MARGIN) -> str:
    """Whether the adaptive value matches the best fixed one, in words."""
    if c is None:
        return "no interval"
    return {
        "faster": "adaptive is faster",
        "slower": "adaptive is slower",
        "no_difference": "matches (within the margin)",
    }.get(c.label(margin), "cannot tell")
