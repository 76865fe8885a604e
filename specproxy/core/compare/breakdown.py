"""Where the gain goes: the paired ratio and the accept length by input length, output
length and category, and the acceptance per verify step (pure, over ``RecordColumns``).

These figures are defined here only, on the columns (no record twin).

**Length bins.** Power-of-two token bins (``[2^k, 2^(k+1))``, 0 in the first), merged
upward with their neighbours until each holds at least ``MIN_BIN_PAIRS`` completed pairs
(a short last bin joins the one before), so that no bin is a handful of pairs and the
edges are still round numbers. A pair's input length is the candidate's
``prompt_tokens``, else the baseline's (the same prompt); its output length is the
candidate's ``completion_tokens``, else the baseline's. Pairs without one are counted in
``Breakdown.without``. Each bin's E2E and TPOT ratios are the report's paired ratio over
the bin's pairs (``column_acceptance.group_ratio``: units of replication regrouped within
the bin, block pairs in alternate mode, segments in mirror mode), so a bin resting on too
few units shows its point and says so (``report.fmt.ratio``); ``MIN_UNITS`` is the count
below which the verdict would not rule on a bin's interval, kept in the breakdown for the
reader. The accept length of a bin is the median of the candidate's per-request accept
lengths, its interval from the spread between the same units (``cluster.cluster_interval``).

**Acceptance per verify step.** Index k of a step histogram counts the verify steps that
accepted exactly k drafts: SGLang's ``spec_correct_drafts_histogram`` (0.5.16:
``spec_accept_histogram`` too), which counts the drafts the target verified in each step
(a step cut by the end of the output counts whole). The rate of draft position k is the
share of steps that accepted at least k drafts (for tree drafting, the k-th token of the
accepted path). **Exact** histograms are the servers' per-request fields; **estimated**
ones come from stream bursts (``core.measurement.acceptance.burst_histogram``: tokens per chunk
minus one, each request's last step left out), valid at ``stream_interval`` 1. The two
are never added together. The step left out is the one where the output limit fell,
more often a long one, so estimated rates run a little low (on the simulator, 1-2 points
a position at 64-token outputs).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

from specproxy.core.compare.acceptance import GroupRatio
from specproxy.core.compare.blocks import MIN_UNITS
from specproxy.core.compare.column_acceptance import category_members, group_ratio
from specproxy.core.compare.column_figures import PairColumns, PairSeries, completed_mask
from specproxy.core.compare.units import SEGMENT_PAIRS, Units
from specproxy.core.records.columns import NULL, SOURCES, RecordColumns
from specproxy.core.records.model import AcceptanceSource, Role
from specproxy.core.statistics.cluster import cluster_interval
from specproxy.core.statistics.stats import Interval

MIN_BIN_PAIRS = 2 * SEGMENT_PAIRS
"""Completed pairs a length bin holds at least (bins are merged until they do): enough
for two segments, the fewest an interval rests on in mirror mode."""

EXACT, ESTIMATED = "exact", "estimated"
_ESTIMATE = SOURCES.index(AcceptanceSource.CHUNK_ESTIMATE)
_EXACT_SOURCE = "the server's per-request spec_correct_drafts_histogram ({sources})"
_ESTIMATE_SOURCE = (
    "stream bursts: tokens per chunk - 1 per verify step, each request's first chunk "
    "(prefill) and last step (cut where the output ends) left out; valid at "
    "stream_interval 1{caveat}"
)


@dataclass(frozen=True, slots=True)
class Breakdown:
    """The completed pairs grouped by one attribute (``by``: ``input_tokens``,
    ``output_tokens`` or ``category``); ``without`` completed pairs had no value.
    ``accept_length[i]``: the median of the candidate's per-request accept length over
    ``groups[i]``, with its interval between the group's units (``cluster_interval``;
    None where no pair has one)."""

    by: str
    title: str
    groups: tuple[GroupRatio, ...]
    without: int
    min_pairs: int
    accept_length: tuple[Interval | None, ...] = ()
    min_units: int = MIN_UNITS


@dataclass(frozen=True, slots=True)
class StepHistogram:
    """One side's acceptance per verify step, ``label`` exact or estimated (module doc).

    ``counts[k]``: steps that accepted exactly k drafts, summed over ``requests``;
    ``position_rates[k - 1]``: the share of steps in which draft position k was accepted;
    ``mean_accepted``: drafts accepted per step."""

    side: Role
    label: str
    source: str
    requests: int
    steps: int
    counts: tuple[int, ...]
    shares: tuple[float, ...]
    position_rates: tuple[float, ...]
    mean_accepted: float | None


@dataclass(frozen=True, slots=True)
class Breakdowns:
    """The report's "where the gain goes" figures."""

    by_input_tokens: Breakdown
    by_output_tokens: Breakdown
    by_category: Breakdown
    step_acceptance: tuple[StepHistogram, ...]


def _pow2_index(value: int) -> int:
    return value.bit_length()  # 0 -> 0, 1 -> 1, 2-3 -> 2, 4-7 -> 3, ...


def _low(index: int) -> int:
    return 0 if index == 0 else 1 << (index - 1)


def length_bins(values: Sequence[int], min_count: int = MIN_BIN_PAIRS) -> list[tuple[int, int]]:
    """``[(low, high_exclusive)]`` of the power-of-two bins of ``values`` (>= 0), merged
    upward until each holds ``min_count`` values, a short last bin into the one before."""
    counts: dict[int, int] = {}
    for v in values:
        i = _pow2_index(v)
        counts[i] = counts.get(i, 0) + 1
    bins: list[list[int]] = []  # [first index, last index, count]
    open_bin: list[int] | None = None
    for i in sorted(counts):
        if open_bin is None:
            open_bin = [i, i, 0]
        open_bin[1], open_bin[2] = i, open_bin[2] + counts[i]
        if open_bin[2] >= min_count:
            bins.append(open_bin)
            open_bin = None
    if open_bin is not None:
        if bins:
            bins[-1][1], bins[-1][2] = open_bin[1], bins[-1][2] + open_bin[2]
        else:
            bins.append(open_bin)
    return [(_low(first), 1 << last) for first, last, _ in bins]


def _pair_values(pairs: PairColumns, column: Sequence[int]) -> list[int | None]:
    """Per pair: the candidate's value in ``column``, else the baseline's, else None."""
    out: list[int | None] = []
    for b, c in zip(pairs.base, pairs.cand, strict=True):
        value = column[c] if column[c] != NULL else column[b]
        out.append(None if value == NULL or value < 0 else value)
    return out


@dataclass(frozen=True, slots=True)
class _Pass:
    """What every group's figures read: the pairs' series and the candidate's lengths."""

    pairs: PairColumns
    series: PairSeries
    lengths: Sequence[float]

    def accept_interval(self, members: Sequence[int], units: Units) -> Interval | None:
        """The median accept length of ``members`` and its interval between their units
        (``units``: ``series.units(members)``)."""
        per_unit: list[list[float]] = [[] for _ in range(units.count)]
        for k, unit in zip(members, units.of, strict=True):
            if not math.isnan(length := self.lengths[k]):
                per_unit[unit].append(length)
        for values in per_unit:
            values.sort()
        return cluster_interval(per_unit, unit=units.kind)

    def groups(
        self, named: Sequence[tuple[str, float | None, list[int]]]
    ) -> tuple[tuple[GroupRatio, ...], tuple[Interval | None, ...]]:
        """Each ``(label, low, members)``'s paired ratios and accept-length interval (the
        members' units found once for both)."""
        units = [self.series.units(m) for _, _, m in named]
        groups = tuple(
            group_ratio(n, low, m, self.series, self.lengths, units=u)
            for (n, low, m), u in zip(named, units, strict=True)
        )
        accept = tuple(
            self.accept_interval(m, u) for (_, _, m), u in zip(named, units, strict=True)
        )
        return groups, accept


def ratio_by_length(
    by: str, title: str, values: Sequence[int | None], run: _Pass, min_pairs: int = MIN_BIN_PAIRS
) -> Breakdown:
    """The completed pairs binned by ``values`` (one per pair, None: unknown)."""
    ok = run.pairs.both_ok()
    known = [(k, v) for k, (good, v) in enumerate(zip(ok, values, strict=True)) if good]
    with_value = [(k, v) for k, v in known if v is not None]
    edges = length_bins([v for _, v in with_value], min_pairs)
    lows = [low for low, _ in edges]
    members: list[list[int]] = [[] for _ in edges]
    for k, v in with_value:
        members[bisect.bisect_right(lows, v) - 1].append(k)
    named = [
        (f"{low}–{high - 1}", float(low), m) for (low, high), m in zip(edges, members, strict=True)
    ]
    groups, accept = run.groups(named)
    return Breakdown(by, title, groups, len(known) - len(with_value), min_pairs, accept)


def breakdowns(
    cols: RecordColumns,
    pairs: PairColumns,
    series: PairSeries,
    lengths: Sequence[float],
    stream_interval: object = None,
) -> Breakdowns:
    """Input length, output length and category breakdowns, and the candidate's step
    histograms (``stream_interval``: its setting, when its launch is known). The category
    groups are the report's ``by_category``."""
    run = _Pass(pairs, series, lengths)
    members = category_members(cols, pairs)
    named = [(name, None, members[name]) for name in sorted(members)]
    categories, accept = run.groups(named)
    without = sum(pairs.both_ok()) - sum(len(m) for m in members.values())
    return Breakdowns(
        by_input_tokens=ratio_by_length(
            "input_tokens", "By input length (prompt tokens)", _pair_values(pairs, cols.prompt), run
        ),
        by_output_tokens=ratio_by_length(
            "output_tokens", "By output length (completion tokens)",
            _pair_values(pairs, cols.tokens), run,
        ),
        by_category=Breakdown("category", "By prompt category", categories, without, 1, accept),
        step_acceptance=tuple(step_histograms(cols, Role.CANDIDATE, stream_interval)),
    )  # fmt: skip


def step_histograms(
    cols: RecordColumns, side: Role, stream_interval: object = None
) -> list[StepHistogram]:
    """``side``'s exact and estimated step histograms (each only where a completed,
    non-warm-up record carries one)."""
    mask = completed_mask(cols, side)
    parts: dict[bool, tuple[list[int], list[int]]] = {}  # estimated -> (sums, requests)
    sources: dict[str, int] = {}
    for i in sorted(cols.acc_histograms):
        if not mask[i]:
            continue
        estimated = cols.acc_source[i] == _ESTIMATE
        sums, seen = parts.setdefault(estimated, ([], [0]))
        for k, n in enumerate(cols.acc_histograms[i]):
            if k == len(sums):
                sums.append(0)
            sums[k] += n
        seen[0] += 1
        if not estimated:
            name = SOURCES[cols.acc_source[i]].value
            sources[name] = sources.get(name, 0) + 1
    out = []
    for estimated in (False, True):
        if estimated not in parts:
            continue
        if estimated:
            caveat = (
                f" (this server's stream_interval is {stream_interval}: bursts merge steps)"
                if stream_interval not in (None, 1)
                else ""
            )
            source = _ESTIMATE_SOURCE.format(caveat=caveat)
        else:
            source = _EXACT_SOURCE.format(
                sources=", ".join(f"{k} {n}" for k, n in sorted(sources.items()))
            )
        sums, seen = parts[estimated]
        out.append(step_histogram(side, ESTIMATED if estimated else EXACT, source, seen[0], sums))
    return out


def step_histogram(
    side: Role, label: str, source: str, requests: int, counts: Sequence[int]
) -> StepHistogram:
    """Shares, per-position rates and the mean from summed ``counts``."""
    steps = sum(counts)
    tail = 0
    at_least: list[int] = []
    for n in reversed(counts):
        tail += n
        at_least.append(tail)
    at_least.reverse()  # at_least[k]: steps that accepted k drafts or more
    return StepHistogram(
        side=side,
        label=label,
        source=source,
        requests=requests,
        steps=steps,
        counts=tuple(counts),
        shares=tuple(n / steps for n in counts) if steps else (),
        position_rates=tuple(n / steps for n in at_least[1:]) if steps else (),
        mean_accepted=(math.fsum(k * n for k, n in enumerate(counts)) / steps if steps else None),
    )
