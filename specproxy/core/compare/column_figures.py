"""The report's figures over ``core.records.columns.RecordColumns``: the code the report runs.

Pure; the product's definition of each figure. ``tests/report/test_scale_equivalence.py``
holds each equal (``==``, same ``int``/``float`` types) to a record-by-record counterpart
that applies the same rule through the same primitives:

========================  ==================================================
here (runs)               record counterpart (held equal)
========================  ==================================================
``side_summary``          ``tests/oracles/sides.py``
``pairing_counts``        ``core.compare.pairing.find_pairs(...).counts``
``paired_ratios``         ``tests/oracles/pairing.py``
``PairSeries.units``      ``core.compare.pairing.pair_units``
``PairSeries.ratio``      ``core.compare.pairing.paired_ratio``
``pair_replication``      ``tests/oracles/pairing.py``
``unpaired_ratios``       ``tests/oracles/pairing.py``
``dominant_mode``         ``tests/oracles/pairing.py``
========================  ==================================================

``side_summary`` only reduces the columns: ``core.records.tally.build_side_summary`` builds the
summary from them, as it does from the recorder's ``SideTally``. Acceptance and agreement
are ``core.compare.column_acceptance``. Values are gathered with C-level
``itertools.compress`` over masks, sorted once per side and metric (``CompletedValues``),
and each order statistic is picked from the sorted list as the record path picks it.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress

from specproxy.core.compare.blocks import PairFacts, Replication, replication
from specproxy.core.compare.pairing import (
    UNPAIRED_QUANTILES,
    Metric,
    PairedRatio,
    PairingCounts,
    QuantileRatio,
    quantile_ratios,
    summarise_ratios,
)
from specproxy.core.compare.units import Units, assign_units
from specproxy.core.records.bounded import SortedSample
from specproxy.core.records.columns import ERRORS, MODES, NULL, SIDES, RecordColumns
from specproxy.core.records.model import Role, SendMode
from specproxy.core.records.tally import DEFAULT_MAX_SEND_LAG_MS, SideSummary, build_side_summary
from specproxy.core.statistics.stats import DEFAULT_RESAMPLES, DEFAULT_SEED


def metric_column(cols: RecordColumns, metric: Metric) -> Sequence[int]:
    """The column holding ``metric`` (``NULL`` where a record has none)."""
    if metric is Metric.E2E:
        return cols.e2e
    return cols.ttft if metric is Metric.TTFT else cols.tpot


def _flags(column: array[int], true: Sequence[int]) -> int:
    """``column`` (one signed byte per record) as a big integer holding one byte per record:
    1 where the value is in ``true``, else 0 (C speed: ``bytes.translate``)."""
    table = bytes(1 if (b if b < 128 else b - 256) in true else 0 for b in range(256))
    return int.from_bytes(column.tobytes().translate(table), "little")


def _mask(flags: int, n: int) -> bytes:
    return flags.to_bytes(n, "little")


def warmup_mask(cols: RecordColumns, side: Role) -> bytes:
    """Per record (one byte, 0 or 1): a warm-up of ``side``."""
    code = SIDES.index(side)
    return _mask(_flags(cols.side, (code,)) & _flags(cols.warmup, (1,)), len(cols))


def live_mask(cols: RecordColumns, side: Role) -> bytes:
    """Per record (one byte, 0 or 1): of ``side`` and not a warm-up."""
    code = SIDES.index(side)
    return _mask(_flags(cols.side, (code,)) & _flags(cols.warmup, (0,)), len(cols))


def completed_mask(cols: RecordColumns, side: Role) -> bytes:
    """Per record (one byte, 0 or 1): of ``side``, completed, not a warm-up."""
    code = SIDES.index(side)
    flags = _flags(cols.side, (code,)) & _flags(cols.warmup, (0,)) & _flags(cols.error, (-1,))
    return _mask(flags, len(cols))


@dataclass(frozen=True, slots=True)
class CompletedValues:
    """Each metric's values over one side's ``count`` completed non-warm-up records,
    ascending (``ints``, as the tally keeps them; ``floats``, as the comparisons and CDFs
    take them)."""

    side: Role
    count: int
    ints: dict[Metric, list[int]]
    floats: dict[Metric, list[float]]

    @classmethod
    def of(cls, cols: RecordColumns, side: Role) -> CompletedValues:
        mask = completed_mask(cols, side)
        ints: dict[Metric, list[int]] = {}
        for metric in Metric:
            values = list(compress(metric_column(cols, metric), mask))
            values.sort()
            del values[: bisect.bisect_right(values, NULL)]  # NULL sorts first: the missing
            ints[metric] = values
        floats = {m: list(map(float, ints[m])) for m in Metric}
        return cls(side, mask.count(1), ints, floats)


def side_summary(
    cols: RecordColumns,
    values: CompletedValues,
    max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS,
) -> SideSummary:
    """One side's summary over ``cols``: its records reduced (warm-ups apart, failed where
    there is an error code) to what ``core.records.tally.build_side_summary`` builds it from."""
    side = values.side
    warm, live = warmup_mask(cols, side), live_mask(cols, side)
    errors = list(compress(cols.error, live))
    ok_tokens = list(compress(cols.tokens, completed_mask(cols, side)))
    span, active = _span_and_active(cols, live)
    loads = list(compress(cols.load, live))
    return build_side_summary(
        side,
        requests=len(errors),
        failures=Counter(ERRORS[e].value for e in errors if e >= 0),
        warmup_excluded=warm.count(1),
        warmup_failed=sum(e >= 0 for e in compress(cols.error, warm)),
        latency={m: SortedSample(values.ints[m]) for m in Metric},
        output_tokens=sum(ok_tokens) - NULL * ok_tokens.count(NULL),
        span_s=span,
        active_s=active,
        load_min=min(loads) if loads else None,
        load_max=max(loads) if loads else None,
        lags=SortedSample(sorted(v for v in compress(cols.lag, live) if v != NULL)),
        max_send_lag_ms=max_send_lag_ms,
    )


def ends(cols: RecordColumns, mask: bytes) -> list[float]:
    """Each masked record's end (Unix s): its send plus its E2E (plus 0 without one)."""
    return [
        start + (e2e / 1e6 if e2e != NULL else 0.0)
        for start, e2e in zip(compress(cols.sent, mask), compress(cols.e2e, mask), strict=True)
    ]


def _span_and_active(cols: RecordColumns, live: bytes) -> tuple[float, float]:
    """The side's span (first send to last end) and active time (the union of its request
    intervals), in seconds: what ``core.records.bounded.Coverage`` (the tally's) gives for them,
    added in any order, by one sort and sweep. The union of closed intervals is one set
    of disjoint intervals with the same endpoints however it is built, and ``Coverage``
    sums their lengths left to right, as the sweep does."""
    starts = list(compress(cols.sent, live))
    if not starts:
        return 0.0, 0.0
    finish = ends(cols, live)
    intervals = sorted(zip(starts, finish, strict=True))
    total = 0.0
    low, high = intervals[0]
    for start, end in intervals:
        if start > high:  # touching intervals merge: they are closed
            total += high - low
            low, high = start, end
        elif end > high:
            high = end
    total += high - low
    return max(finish) - min(starts), total


@dataclass(frozen=True, slots=True)
class PairColumns:
    """The complete pairs' record indices, in ``find_pairs`` order, and whether each side
    completed."""

    base: Sequence[int]
    cand: Sequence[int]
    base_ok: list[bool]
    cand_ok: list[bool]

    @classmethod
    def of(cls, cols: RecordColumns) -> PairColumns:
        base, cand = cols.pairs()
        error = cols.error
        return cls(base, cand, [error[i] < 0 for i in base], [error[i] < 0 for i in cand])

    def __len__(self) -> int:
        return len(self.base)

    def both_ok(self) -> list[bool]:
        return [b and c for b, c in zip(self.base_ok, self.cand_ok, strict=True)]


def pairing_counts(cols: RecordColumns, pairs: PairColumns) -> PairingCounts:
    """How the records in ``cols`` paired: both completed, one side failed, one missing."""
    both = sum(pairs.both_ok())
    base_only = sum(not b and c for b, c in zip(pairs.base_ok, pairs.cand_ok, strict=True))
    cand_only = sum(b and not c for b, c in zip(pairs.base_ok, pairs.cand_ok, strict=True))
    missing_b, missing_c = cols.missing()
    return PairingCounts(
        pairs=len(pairs),
        both_ok=both,
        baseline_failed_only=base_only,
        candidate_failed_only=cand_only,
        both_failed=len(pairs) - both - base_only - cand_only,
        missing_candidate=missing_c,
        missing_baseline=missing_b,
        duplicates=cols.duplicates,
        without_pair_id=cols.without_pair_id,
    )


def pair_ratios(cols: RecordColumns, pairs: PairColumns, metric: Metric) -> list[float | None]:
    """Each pair's failure-aware ratio of ``metric`` (``Pair.failure_aware_ratio``'s rule)."""
    column = metric_column(cols, metric)
    out: list[float | None] = []
    append = out.append
    for b, c, b_ok, c_ok in zip(pairs.base, pairs.cand, pairs.base_ok, pairs.cand_ok, strict=True):
        if b_ok and c_ok:
            base, cand = column[b], column[c]
            append(None if base <= 0 or cand == NULL else cand / base)  # NULL < 0
        elif b_ok:
            append(math.inf)
        else:
            append(0.0 if c_ok else None)
    return out


@dataclass(frozen=True, slots=True)
class PairSeries:
    """Per pair, in pair order, everything the paired figures take: where the pair's unit
    of replication comes from (experiment id, block label or -1, earliest send in Unix s),
    each metric's failure-aware ratio and each side's completed value (None where the side
    failed or has none), and whether both sides failed."""

    experiments: list[str]
    blocks: list[int]
    sent: list[float]
    ratios: dict[Metric, list[float | None]]
    values: dict[Metric, tuple[list[float | None], list[float | None]]]
    both_failed: list[bool]

    @classmethod
    def of(cls, cols: RecordColumns, pairs: PairColumns) -> PairSeries:
        ids, experiment, block, sent = cols.experiment_ids, cols.experiment, cols.block, cols.sent
        return cls(
            experiments=[ids[experiment[b]] for b in pairs.base],
            blocks=[v if (v := block[b]) >= 0 else -1 for b in pairs.base],
            sent=[min(sent[b], sent[c]) for b, c in zip(pairs.base, pairs.cand, strict=True)],
            ratios={m: pair_ratios(cols, pairs, m) for m in Metric},
            values={m: _side_values(cols, pairs, m) for m in Metric},
            both_failed=[
                not b and not c for b, c in zip(pairs.base_ok, pairs.cand_ok, strict=True)
            ],
        )

    def units(self, members: Sequence[int] | None = None) -> Units:
        """The units of replication (``assign_units``) of the pairs or of the ``members``."""
        if members is None:
            return assign_units(self.experiments, self.blocks, self.sent)
        return assign_units(
            [self.experiments[i] for i in members],
            [self.blocks[i] for i in members],
            [self.sent[i] for i in members],
        )

    def ratio(
        self,
        metric: Metric,
        members: Sequence[int] | None = None,
        *,
        units: Units | None = None,
        flagged: frozenset[int] = frozenset(),
        medians: bool = True,
    ) -> PairedRatio:
        """The paired statistic of ``metric`` (``summarise_ratios``), pairs or ``members``."""
        units = units if units is not None else self.units(members)
        ratios, (base, cand), both = self.ratios[metric], self.values[metric], self.both_failed
        if members is not None:
            ratios = [ratios[i] for i in members]
            base, cand = [base[i] for i in members], [cand[i] for i in members]
            both = [both[i] for i in members]
        return summarise_ratios(
            metric, ratios, (base, cand), units, both_failed=sum(both), flagged=flagged,
            medians=medians,
        )  # fmt: skip


def _side_values(
    cols: RecordColumns, pairs: PairColumns, metric: Metric
) -> tuple[list[float | None], list[float | None]]:
    column = metric_column(cols, metric)

    def side(indices: Sequence[int], ok: Sequence[bool]) -> list[float | None]:
        return [
            float(v) if good and (v := column[i]) != NULL else None
            for i, good in zip(indices, ok, strict=True)
        ]

    return side(pairs.base, pairs.base_ok), side(pairs.cand, pairs.cand_ok)


def pair_replication(
    cols: RecordColumns, pairs: PairColumns, series: PairSeries, units: Units
) -> Replication:
    """The units over time, their heterogeneity and drift (``core.compare.blocks``)."""
    sent, e2e = cols.sent, cols.e2e

    def ends(indices: Sequence[int]) -> list[float]:
        return [sent[i] + (e2e[i] / 1e6 if e2e[i] != NULL else 0.0) for i in indices]

    facts = PairFacts(
        base_sent=[sent[b] for b in pairs.base],
        cand_sent=[sent[c] for c in pairs.cand],
        base_end=ends(pairs.base),
        cand_end=ends(pairs.cand),
        base_e2e=series.values[Metric.E2E][0],
        cand_e2e=series.values[Metric.E2E][1],
        base_level=series.values[Metric.TPOT][0],
        cand_level=series.values[Metric.TPOT][1],
    )
    return replication(units, facts, series.ratios[Metric.E2E])


def paired_ratios(
    series: PairSeries, units: Units, flagged: frozenset[int] = frozenset()
) -> tuple[PairedRatio, ...]:
    """Every metric's paired statistic (``PairSeries.ratio``), the intervals widened for
    the units in a drift episode (``flagged``)."""
    return tuple(series.ratio(m, units=units, flagged=flagged) for m in Metric)


def unpaired_ratios(
    base: CompletedValues,
    cand: CompletedValues,
    *,
    quantiles: Sequence[float] = UNPAIRED_QUANTILES,
    min_per_side: int = 2,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> tuple[QuantileRatio, ...]:
    """Each metric's quantile ratios (``quantile_ratios``) from the sides' sorted values."""
    out: list[QuantileRatio] = []
    for metric in Metric:
        b, c = base.floats[metric], cand.floats[metric]
        out += quantile_ratios(
            metric, b, c, quantiles=quantiles, min_per_side=min_per_side,
            resamples=resamples, seed=seed,
        )  # fmt: skip
    return tuple(out)


def dominant_mode(cols: RecordColumns) -> SendMode | None:
    """The send mode most records carry, ties to the first seen (``dominant_mode``)."""
    seen = sorted((cols.mode.index(code), code) for code in set(cols.mode) if code >= 0)
    if not seen:
        return None
    counts = {code: cols.mode.count(code) for _, code in seen}
    return MODES[max(counts, key=lambda code: counts[code])]
