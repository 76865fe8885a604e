"""The verdict and the recommendation (SPEC §6), as explicit rules.

Pure. **Verdict rule** (primary metric E2E; ``m`` = margin, default 2%): over the
median per-pair ratio candidate/baseline and its 95% interval [lo, hi]
(``core.stats.quantile_interval``):

* hi < 1 - m → ``faster`` (the whole interval is a speed-up larger than the margin);
* lo > 1 + m → ``slower``;
* 1 - m ≤ lo and hi ≤ 1 + m → ``no_difference`` (equivalence within the margin);
* otherwise → ``inconclusive``; also when fewer than ``min_pairs`` (30) completed pairs
  exist, or the mode has no pairs (split, passthrough).

When an A/A run measured the noise floor, the margin becomes the larger of ``m`` and
the farthest the A/A interval reaches from 1 (a difference the A/A run could not tell
from nothing is not evidence).

**Recommendation**: written only when every condition holds (launch configs complete,
raw measurements saved, failures counted on both sides, greedy outputs compared,
matched baseline, compatibility scope stated) and the verdict is conclusive; a
simulated experiment gets the recommendation ``simulated`` and nothing more; an A/A
run gets none (it measures the noise floor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from specproxy.core.compare import Metric, PairedRatio
from specproxy.core.model import SendMode
from specproxy.core.stats import Interval

DEFAULT_MARGIN = 0.02
MIN_PAIRS = 30
SIMULATED = "simulated"


class VerdictLabel(StrEnum):
    FASTER = "faster"
    SLOWER = "slower"
    NO_DIFFERENCE = "no_difference"
    INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The verdict on the primary metric and why; ``margin`` is the one actually applied."""

    label: VerdictLabel
    metric: Metric
    interval: Interval | None
    margin: float
    n_pairs: int
    reason: str

    def __post_init__(self) -> None:
        if not 0.0 <= self.margin < 1.0:
            raise ValueError("margin must be within [0, 1)")


def rule_text(margin: float, min_pairs: int = MIN_PAIRS) -> str:
    lo, hi = 1.0 - margin, 1.0 + margin
    return (
        f"median per-pair E2E ratio candidate/baseline, 95% order-statistic interval: entirely below "
        f"{lo:.3f} → faster; entirely above {hi:.3f} → slower; entirely within "
        f"[{lo:.3f}, {hi:.3f}] → no_difference; otherwise, or under {min_pairs} completed "
        f"pairs, or no pairs (split/passthrough) → inconclusive"
    )


def noise_margin(margin: float, aa: PairedRatio | None) -> float:
    """The margin widened to the A/A run's reach from 1 (unchanged without an A/A interval)."""
    if aa is None or aa.interval is None:
        return margin
    reach = max(1.0 - aa.interval.low, aa.interval.high - 1.0, 0.0)
    return min(max(margin, reach), 0.99)


def decide(
    ratio: PairedRatio | None,
    *,
    mode: SendMode | None,
    margin: float = DEFAULT_MARGIN,
    min_pairs: int = MIN_PAIRS,
) -> Verdict:
    """Apply the verdict rule (module docstring) to the primary metric's paired ratio."""
    metric = ratio.metric if ratio is not None else Metric.E2E
    n = ratio.n if ratio is not None else 0
    iv = ratio.interval if ratio is not None else None
    if mode in (SendMode.SPLIT, SendMode.PASSTHROUGH):
        why = f"{mode.value} mode has no pairs; a verdict needs paired ratios"
        return Verdict(VerdictLabel.INCONCLUSIVE, metric, iv, margin, n, why)
    if iv is None or n < min_pairs:
        why = f"only {n} completed pairs; the rule needs at least {min_pairs}"
        return Verdict(VerdictLabel.INCONCLUSIVE, metric, iv, margin, n, why)
    lo, hi = 1.0 - margin, 1.0 + margin
    span = f"interval [{iv.low:.3f}, {iv.high:.3f}]"
    if iv.high < lo:
        label, why = VerdictLabel.FASTER, f"{span} lies entirely below {lo:.3f}"
    elif iv.low > hi:
        label, why = VerdictLabel.SLOWER, f"{span} lies entirely above {hi:.3f}"
    elif iv.low >= lo and iv.high <= hi:
        label, why = VerdictLabel.NO_DIFFERENCE, f"{span} lies within [{lo:.3f}, {hi:.3f}]"
    else:
        label, why = (
            VerdictLabel.INCONCLUSIVE,
            f"{span} straddles a margin edge ({lo:.3f}/{hi:.3f})",
        )
    return Verdict(label, metric, iv, margin, n, why)


@dataclass(frozen=True, slots=True)
class Condition:
    """One precondition of a recommendation; ``detail`` says what was found or is missing."""

    key: str
    met: bool
    detail: str

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a condition has a key")


@dataclass(frozen=True, slots=True)
class Recommendation:
    """``text`` is the recommendation, or None with ``reason`` saying why there is none."""

    text: str | None
    reason: str
    conditions: tuple[Condition, ...]

    @property
    def missing(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.conditions if not c.met)


def recommend(
    verdict: Verdict,
    conditions: Sequence[Condition],
    *,
    simulated: bool,
    aa: bool,
    algorithm: str | None,
    scope: Mapping[str, str | None],
) -> Recommendation:
    """The recommendation text when every condition holds (module docstring)."""
    conds = tuple(conditions)
    if simulated:
        return Recommendation(SIMULATED, "the servers were simulated", conds)
    if aa:
        return Recommendation(None, "A/A run: it measures the noise floor, not a candidate", conds)
    missing = [c for c in conds if not c.met]
    if missing:
        names = ", ".join(c.key for c in missing)
        return Recommendation(None, f"conditions not met: {names}", conds)
    if verdict.label is VerdictLabel.INCONCLUSIVE or verdict.interval is None:
        return Recommendation(None, f"verdict inconclusive: {verdict.reason}", conds)
    return Recommendation(_advice(verdict, algorithm, scope), "every condition holds", conds)


def _advice(verdict: Verdict, algorithm: str | None, scope: Mapping[str, str | None]) -> str:
    assert verdict.interval is not None  # checked by the caller
    iv = verdict.interval
    where = "; ".join(f"{k}: {v}" for k, v in scope.items() if v)
    algo = algorithm or "the candidate's speculative configuration"
    change = f"median E2E ratio {iv.point:.3f} [95% CI {iv.low:.3f}, {iv.high:.3f}]"
    if verdict.label is VerdictLabel.FASTER:
        head = f"Use {algo}: it made this traffic faster ({change})"
    elif verdict.label is VerdictLabel.SLOWER:
        head = f"Keep the baseline: {algo} made this traffic slower ({change})"
    else:
        head = (
            f"Keep the baseline: {algo} made no difference beyond ±{verdict.margin:.1%} "
            f"({change}) while costing GPU memory"
        )
    return f"{head}. Holds only within this scope: {where}."
