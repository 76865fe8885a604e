"""The verdict and the recommendation (``docs/contract.md``), as explicit rules.

Pure. **Verdict rule** (primary metric E2E; ``m`` = margin, default 2%): over the
median of the failure-aware per-pair ratios candidate/baseline
(``core.compare.column_figures.paired_ratios``, by ``Pair.failure_aware_ratio``'s rule in
``core.compare.pairing``: a pair where only the candidate failed counts as ``+inf``, only
the baseline as ``0``, both as not ranked) and its 95% interval [lo, hi] from the spread *between units of replication*
(block pairs in alternate mode, segments in mirror mode: ``core.compare.blocks``):

* hi < 1 - m → ``faster`` (the whole interval is a speed-up larger than the margin);
* lo > 1 + m → ``slower``;
* 1 - m ≤ lo and hi ≤ 1 + m → ``no_difference`` (equivalence within the margin);
* otherwise → ``inconclusive``; also when fewer than ``min_pairs`` (30) ratios were
  ranked, when the interval rests on fewer than ``min_units`` (6) units, however large
  the effect (requests in one block share the server's state: they are not independent
  draws), when the interval does not reach 95%, or the mode has no pairs (split,
  passthrough);
* **drift**: when units in a drift episode were found (``core.compare.drift``), the
  interval is the union of the one over all units and the one over the units outside
  every episode, the reason names each episode, and fewer than ``min_units`` units
  outside them give ``inconclusive``;
* and **failures**: while the candidate fails measurably more often than the baseline
  (the 95% interval of the failure-rate difference candidate - baseline,
  ``core.compare.failures``, lies entirely above 0), a ``faster`` becomes
  ``inconclusive`` and the reason names the difference with its interval. The
  recommendation then fails the ``candidate_fails_no_more_often`` condition
  (``core.compare.conditions``), whatever the verdict.

When an A/A run measured the noise floor, the margin becomes the larger of ``m`` and
the farthest the A/A interval reaches from 1 (a difference the A/A run could not tell
from nothing is not evidence).

**Recommendation**: written only when every condition holds (launch configs complete,
raw measurements saved, failures counted on both sides, the candidate fails no more
often than the baseline, greedy outputs compared, matched baseline, acceptance not faked by
the environment (the launch record), compatibility scope
stated) and the verdict is conclusive; a simulated experiment gets the recommendation
``simulated`` and nothing more; an A/A run gets none (it measures the noise floor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from specproxy.core.compare.blocks import MIN_UNITS
from specproxy.core.compare.conditions import Condition
from specproxy.core.compare.failures import FailureComparison
from specproxy.core.compare.pairing import Metric, PairedRatio
from specproxy.core.records.model import SendMode
from specproxy.core.statistics.stats import CONFIDENCE, Interval

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
    """The verdict on the primary metric and why; ``margin`` is the one actually applied.

    ``failures`` is the failure-rate comparison the verdict took into account (None when
    none was given).
    """

    label: VerdictLabel
    metric: Metric
    interval: Interval | None
    margin: float
    n_pairs: int
    reason: str
    failures: FailureComparison | None = None
    short: str = ""  # inconclusive: the first unmet condition in a few plain words

    def __post_init__(self) -> None:
        if not 0.0 <= self.margin < 1.0:
            raise ValueError("margin must be within [0, 1)")


def rule_text(margin: float, min_pairs: int = MIN_PAIRS, min_units: int = MIN_UNITS) -> str:
    lo, hi = 1.0 - margin, 1.0 + margin
    return (
        "median per-pair E2E ratio candidate/baseline, failures included (only the candidate "
        "failed → ratio +inf, only the baseline failed → 0, both failed → counted, not "
        "ranked), 95% interval from the spread between units of replication (block pairs in "
        "alternate mode, segments of consecutive pairs in mirror mode; whole units resampled, "
        f"Student's t): entirely below {lo:.3f} → faster; entirely above "
        f"{hi:.3f} → slower; entirely within [{lo:.3f}, {hi:.3f}] → no_difference; "
        f"otherwise, or under {min_pairs} ranked pairs, or under {min_units} units (outside "
        "any drift episode, when one was found; with one, the interval also holds the one "
        "over the units outside it), or no pairs (split/passthrough) → inconclusive; and "
        "while the candidate fails measurably more often than the baseline (95% Tango score "
        "interval of the paired failure-rate difference entirely above 0) there is no faster "
        "and no recommendation"
    )


def noise_margin(margin: float, aa: PairedRatio | None) -> float:
    """The margin widened to the A/A run's reach from 1 (unchanged without an A/A interval)."""
    if aa is None or aa.interval is None:
        return margin
    reach = max(1.0 - aa.interval.low, aa.interval.high - 1.0, 0.0)
    return min(max(margin, reach), 0.99)


def span(iv: Interval, ratio: PairedRatio | None = None) -> str:
    """``interval [lo, hi] (95.0%)``, and ``over 8 block pairs`` when ``ratio`` is given; a
    failure-aware end can be ``inf``."""
    text = f"interval [{iv.low:.3f}, {iv.high:.3f}] ({iv.confidence:.1%})"
    return f"{text} {ratio.units_text()}" if ratio is not None else text


def decide(
    ratio: PairedRatio | None,
    *,
    mode: SendMode | None,
    margin: float = DEFAULT_MARGIN,
    min_pairs: int = MIN_PAIRS,
    min_units: int = MIN_UNITS,
    failures: FailureComparison | None = None,
    drift: Sequence[str] = (),
) -> Verdict:
    """Apply the verdict rule (module docstring) to the primary metric's paired ratio and,
    when given, the failure-rate comparison of the same pairs; ``drift`` describes the
    drift episodes found (``core.compare.drift.DriftEpisode.describe``)."""
    label, why, short = _label(
        ratio, mode=mode, margin=margin, min_pairs=min_pairs, min_units=min_units
    )
    if drift and ratio is not None and ratio.widened:
        why = f"{why}; drift: {'; '.join(drift)}"
    if failures is not None and failures.candidate_fails_more:
        worse = (
            f"the candidate fails measurably more often than the baseline: {failures.describe()}"
        )
        if label is VerdictLabel.FASTER:
            label, why = VerdictLabel.INCONCLUSIVE, f"{why}, but {worse}; no speed-up can stand"
            short = "the candidate fails measurably more often"
        else:
            why = f"{why}; also {worse}"
    metric = ratio.metric if ratio is not None else Metric.E2E
    n = ratio.n if ratio is not None else 0
    iv = ratio.interval if ratio is not None else None
    return Verdict(label, metric, iv, margin, n, why, failures, short)


def _label(
    ratio: PairedRatio | None,
    *,
    mode: SendMode | None,
    margin: float,
    min_pairs: int,
    min_units: int,
) -> tuple[VerdictLabel, str, str]:
    """The label, reason and (inconclusive) short reason from the ratio alone."""
    missing = _too_little(ratio, mode=mode, min_pairs=min_pairs, min_units=min_units)
    if missing is not None:
        return VerdictLabel.INCONCLUSIVE, *missing
    assert ratio is not None
    assert ratio.interval is not None
    iv, text = ratio.interval, span(ratio.interval, ratio)
    lo, hi = 1.0 - margin, 1.0 + margin
    if iv.high < lo:
        return VerdictLabel.FASTER, f"{text} lies entirely below {lo:.3f}", ""
    if iv.low > hi:
        return VerdictLabel.SLOWER, f"{text} lies entirely above {hi:.3f}", ""
    if iv.low >= lo and iv.high <= hi:
        return VerdictLabel.NO_DIFFERENCE, f"{text} lies within [{lo:.3f}, {hi:.3f}]", ""
    straddles = f"straddles a margin edge ({lo:.3f}/{hi:.3f})"
    return VerdictLabel.INCONCLUSIVE, f"{text} {straddles}", f"the interval {straddles}"


def _too_little(
    ratio: PairedRatio | None, *, mode: SendMode | None, min_pairs: int, min_units: int
) -> tuple[str, str] | None:
    """(reason, short reason) when the evidence is too little for any verdict, else None."""
    n = ratio.n if ratio is not None else 0
    if mode in (SendMode.SPLIT, SendMode.PASSTHROUGH):
        why = f"{mode.value} mode has no pairs; a verdict needs paired ratios"
        return why, f"no pairs ({mode.value} mode)"
    if ratio is None or ratio.interval is None or n < min_pairs:
        why = f"only {n} ranked pairs; the rule needs at least {min_pairs}"
        return why, f"fewer than {min_pairs} pairs ({n})"
    iv, text, unit = ratio.interval, span(ratio.interval, ratio), ratio.unit
    if ratio.units < min_units:
        why = (
            f"{text}: a verdict needs at least {min_units} {unit}s (requests in one block"
            f" share the server's state, so the {unit}, not the request, is the unit of"
            " replication)"
        )
        return why, f"fewer than {min_units} {unit}s ({ratio.units})"
    if ratio.widened and ratio.clean_units < min_units:
        why = (
            f"{text}: only {ratio.clean_units} {unit}s lie outside the drift episodes;"
            f" a verdict needs at least {min_units}"
        )
        return why, f"fewer than {min_units} {unit}s outside drift ({ratio.clean_units})"
    if iv.confidence < CONFIDENCE - 1e-9:
        why = f"{text} does not reach {CONFIDENCE:.0%}"
        return why, f"interval short of {CONFIDENCE:.0%} ({iv.confidence:.1%})"
    return None


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
    level = f"{iv.confidence:.1%}"
    change = f"median E2E ratio {iv.point:.3f} [{level} CI {iv.low:.3f}, {iv.high:.3f}]"
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
