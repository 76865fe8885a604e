"""Lossless or not under sampling: the output-distribution check (pure).

Under sampling two outputs differ even from one server, so exact match says nothing. What
can be compared is how likely the target model finds each side's outputs. Every scored
output was sent back to the baseline as a teacher-forced request (``replay.scoring``), which
gives its **mean log-probability per token** under the target (nats). Per prompt (a pair),
``d = mean_logprob(candidate output) - mean_logprob(baseline output)``. A candidate that
samples from the target's distribution has E[d] = 0; one that accepts draft tokens the
target would reject (``--speculative-accept-threshold-*`` below 1.0, a sampling bug) moves
it.

* **The interval.** Pairs are not independent draws: requests of one block (alternate mode)
  or one stretch of a run (mirror mode) share the servers' state. The units are
  ``core.compare.blocks.assign_units``'s (block pairs, or segments of consecutive pairs),
  and the 95% interval of the mean of ``d`` is the cluster-robust one: the mean of all
  ``d``, variance ``B/(B-1) * sum_u (S_u - n_u * mean)^2 / n^2`` over the B units (``S_u``
  the sum of ``d`` in unit u, ``n_u`` its pairs), Student's t on B - 1 degrees of freedom.
  The output lengths (completion tokens) get the same interval for the mean per-pair
  difference, relative to the baseline's mean length.
* **The margin.** ``d``'s margin is ``DEFAULT_MARGIN_NATS`` nats/token, the lengths'
  ``DEFAULT_LENGTH_MARGIN`` of the baseline's mean; an A/A run's own interval (both sides
  the baseline) widens each to the farthest its interval reaches from 0, as the verdict's
  margin is widened for speed.
* **The verdict.** ``same distribution within ±m`` when both intervals lie inside their
  margins; ``shifted by x [a, b] nats/token`` when either lies entirely beyond its margin
  (the text names which); ``not settled`` otherwise, or under ``MIN_SCORED_PAIRS`` scored
  pairs or ``MIN_UNITS`` units; ``not checked`` with the reason when nothing was scored.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from specproxy.core.compare.blocks import MIN_UNITS
from specproxy.core.compare.units import assign_units
from specproxy.core.statistics.distributions import student_t_quantile
from specproxy.core.statistics.stats import CONFIDENCE, Interval

THRESHOLD_KEYS = ("speculative_accept_threshold_single", "speculative_accept_threshold_acc")
DEFAULT_MARGIN_NATS = 0.05
DEFAULT_LENGTH_MARGIN = 0.10
MIN_SCORED_PAIRS = 30


class DistributionLabel(StrEnum):
    SAME = "same_distribution"
    SHIFTED = "shifted"
    NOT_SETTLED = "not_settled"
    NOT_CHECKED = "not_checked"


@dataclass(frozen=True, slots=True)
class ScoredPair:
    """One prompt's two scored outputs: mean log-probability per token (nats) under the
    target and completion tokens, and the pair's unit (index into the units' labels)."""

    unit: int
    base_logprob: float
    cand_logprob: float
    base_tokens: int
    cand_tokens: int


@dataclass(frozen=True, slots=True)
class DistributionCheck:
    """The check's verdict. ``logprob`` is the mean of candidate - baseline (nats/token);
    ``length`` the mean per-pair length difference over the baseline's mean length;
    ``margin``/``length_margin`` the ones applied (widened by an A/A run)."""

    label: DistributionLabel
    text: str
    logprob: Interval | None = None
    length: Interval | None = None
    margin: float = DEFAULT_MARGIN_NATS
    length_margin: float = DEFAULT_LENGTH_MARGIN
    pairs: int = 0
    scoring: Mapping[str, Any] | None = None
    lossy: tuple[tuple[str, float], ...] = ()  # the candidate's accept thresholds below 1.0

    @property
    def same(self) -> bool:
        return self.label is DistributionLabel.SAME


def lossy_settings(server_args: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    """The accept thresholds below 1.0 in a server's arguments: SGLang then accepts draft
    tokens the target would reject, so the candidate is lossy by configuration."""
    found = []
    for key in THRESHOLD_KEYS:
        value = server_args.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value < 1.0:
            found.append((key, float(value)))
    return tuple(found)


def describe_lossy(settings: Sequence[tuple[str, float]]) -> str:
    """``--speculative-accept-threshold-single 0.3, ...``: the lossy settings as flags."""
    return ", ".join(f"--{k.replace('_', '-')} {v:g}" for k, v in settings)


def not_checked(reason: str, scoring: Mapping[str, Any] | None = None) -> DistributionCheck:
    return DistributionCheck(
        DistributionLabel.NOT_CHECKED, f"not checked: {reason}", scoring=scoring
    )


def cluster_mean_interval(
    values: Sequence[float],
    units: Sequence[int],
    confidence: float = CONFIDENCE,
    unit: str = "unit",
) -> Interval:
    """The mean of ``values`` with its cluster-robust interval over the ``units`` they belong
    to (module docstring); under 2 units the interval is infinite."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = sum(values) / n
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    for v, u in zip(values, units, strict=True):
        sums[u] = sums.get(u, 0.0) + v
        counts[u] = counts.get(u, 0) + 1
    b = len(sums)
    if b < 2:
        return Interval(mean, -math.inf, math.inf, n, confidence, b, unit)
    spread = sum((sums[u] - counts[u] * mean) ** 2 for u in sums)
    se = math.sqrt(b / (b - 1) * spread) / n
    t = student_t_quantile(0.5 + confidence / 2, b - 1)
    return Interval(mean, mean - t * se, mean + t * se, n, confidence, b, unit)


def widened(margin: float, aa: Interval | None) -> float:
    """``margin`` widened to the farthest an A/A interval reaches from 0."""
    if aa is None or not math.isfinite(aa.low) or not math.isfinite(aa.high):
        return margin
    return max(margin, abs(aa.low), abs(aa.high))


def _place(iv: Interval, margin: float) -> int:
    """-1 inside ±margin, 1 entirely beyond it, 0 neither."""
    if -margin <= iv.low and iv.high <= margin:
        return -1
    if iv.low > margin or iv.high < -margin:
        return 1
    return 0


def _span(iv: Interval, fmt: str) -> str:
    return f"{iv.point:{fmt}} [{iv.low:{fmt}}, {iv.high:{fmt}}]"


def _intervals(pairs: Sequence[ScoredPair], unit: str) -> tuple[Interval, Interval]:
    units = [p.unit for p in pairs]
    diffs = [p.cand_logprob - p.base_logprob for p in pairs]
    logprob = cluster_mean_interval(diffs, units, unit=unit)
    base_mean = sum(p.base_tokens for p in pairs) / len(pairs)
    scale = 1.0 / base_mean if base_mean > 0 else 0.0
    lengths = [(p.cand_tokens - p.base_tokens) * scale for p in pairs]
    return logprob, cluster_mean_interval(lengths, units, unit=unit)


def check(
    pairs: Sequence[ScoredPair],
    *,
    margin: float = DEFAULT_MARGIN_NATS,
    length_margin: float = DEFAULT_LENGTH_MARGIN,
    aa: DistributionCheck | None = None,
    scoring: Mapping[str, Any] | None = None,
    unit: str = "unit",
) -> DistributionCheck:
    """The verdict (module docstring) over the scored ``pairs``; ``aa`` is an A/A run's check."""
    if not pairs:
        return not_checked("no pair had both outputs scored", scoring)
    if aa is not None:
        margin, length_margin = widened(margin, aa.logprob), widened(length_margin, aa.length)
    lp, ln = _intervals(pairs, unit)
    logprob, length = f"{_span(lp, '+.3f')} nats/token", f"output length {_span(ln, '+.1%')}"
    where = f"candidate - baseline over {len(pairs)} pairs in {lp.units} {unit}s"
    facts = f"{logprob} {where}; {length}"
    found = DistributionCheck(
        DistributionLabel.NOT_SETTLED, "", lp, ln, margin, length_margin, len(pairs), scoring
    )
    if len(pairs) < MIN_SCORED_PAIRS or (lp.units or 0) < MIN_UNITS:
        why = f"needs {MIN_SCORED_PAIRS} scored pairs in {MIN_UNITS} units"
        return _with(found, DistributionLabel.NOT_SETTLED, f"not settled ({why}): {facts}")
    where_lp, where_ln = _place(lp, margin), _place(ln, length_margin)
    margins = f"margins ±{margin:.3f} nats/token, ±{length_margin:.0%} length"
    if where_lp == 1:
        text = f"shifted by {logprob} ({where}; {length}; {margins})"
        return _with(found, DistributionLabel.SHIFTED, text)
    if where_ln == 1:
        text = f"shifted: {length} ({where}; log-prob {logprob}; {margins})"
        return _with(found, DistributionLabel.SHIFTED, text)
    if where_lp == -1 and where_ln == -1:
        text = f"same distribution within ±{margin:.3f} nats/token ({facts}; {margins})"
        return _with(found, DistributionLabel.SAME, text)
    return _with(found, DistributionLabel.NOT_SETTLED, f"not settled: {facts}; {margins}")


def _with(found: DistributionCheck, label: DistributionLabel, text: str) -> DistributionCheck:
    return DistributionCheck(
        label,
        text,
        found.logprob,
        found.length,
        found.margin,
        found.length_margin,
        found.pairs,
        found.scoring,
    )


def scored_pairs(lines: Sequence[Mapping[str, Any]]) -> tuple[list[ScoredPair], str]:
    """The pairs of ``scores.jsonl`` lines (``replay.scoring``) whose two outputs were both
    scored, with their units from experiment, block label and send time, and the units' name
    (``block pair``, ``segment``)."""
    kept: list[tuple[Mapping[str, Any], tuple[float, int], tuple[float, int]]] = []
    for line in lines:
        b, c = _side(line, "baseline"), _side(line, "candidate")
        if b is not None and c is not None:
            kept.append((line, b, c))
    if not kept:
        return [], "unit"
    units = assign_units(
        [str(line.get("experiment_id") or "") for line, _, _ in kept],
        [_int(line.get("block"), -1) for line, _, _ in kept],
        [float(line.get("sent_at_unix_s") or 0.0) for line, _, _ in kept],
    )
    pairs = [
        ScoredPair(unit, b[0], c[0], b[1], c[1])
        for (_, b, c), unit in zip(kept, units.of, strict=True)
    ]
    return pairs, units.kind


def _side(line: Mapping[str, Any], side: str) -> tuple[float, int] | None:
    found = line.get(side)
    if not isinstance(found, Mapping):
        return None
    lp, tokens = found.get("mean_logprob"), found.get("completion_tokens")
    if not isinstance(lp, int | float) or not math.isfinite(lp):
        return None
    return float(lp), _int(tokens, 0)


def _int(value: Any, default: int) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default
