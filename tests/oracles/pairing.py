"""Pairing figures computed record by record: the oracle the column pass
(``specproxy.core.compare.column_figures``) is held equal to."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from specproxy.core.compare.blocks import PairFacts, Replication, replication
from specproxy.core.compare.pairing import (
    UNPAIRED_QUANTILES,
    Metric,
    Pair,
    PairedRatio,
    QuantileRatio,
    metric_value,
    pair_units,
    paired_ratio,
    quantile_ratios,
)
from specproxy.core.compare.units import Units
from specproxy.core.records.model import RequestRecord, Role, SendMode
from specproxy.core.statistics.stats import DEFAULT_RESAMPLES, DEFAULT_SEED


def _completed(record: RequestRecord, metric: Metric) -> float | None:
    value = metric_value(record, metric) if record.ok else None
    return None if value is None else float(value)


def _end(record: RequestRecord) -> float:
    e2e = record.measurement.e2e_us
    return record.sent_at_unix_s + (e2e / 1e6 if e2e is not None else 0.0)


def pair_replication(pairs: Sequence[Pair], units: Units) -> Replication:
    """The units over time, their heterogeneity and drift (``core.compare.blocks``)."""
    facts = PairFacts(
        base_sent=[p.baseline.sent_at_unix_s for p in pairs],
        cand_sent=[p.candidate.sent_at_unix_s for p in pairs],
        base_end=[_end(p.baseline) for p in pairs],
        cand_end=[_end(p.candidate) for p in pairs],
        base_e2e=[_completed(p.baseline, Metric.E2E) for p in pairs],
        cand_e2e=[_completed(p.candidate, Metric.E2E) for p in pairs],
        base_level=[_completed(p.baseline, Metric.TPOT) for p in pairs],
        cand_level=[_completed(p.candidate, Metric.TPOT) for p in pairs],
    )
    return replication(units, facts, [p.failure_aware_ratio(Metric.E2E) for p in pairs])


def paired_ratios(pairs: Sequence[Pair]) -> tuple[PairedRatio, ...]:
    """Every metric's paired statistic, the intervals widened for any drift episode."""
    units = pair_units(pairs)
    flagged = pair_replication(pairs, units).flagged
    return tuple(paired_ratio(pairs, m, units=units, flagged=flagged) for m in Metric)


def side_values(records: Iterable[RequestRecord], side: Role, metric: Metric) -> list[float]:
    """The metric over one side's completed, non-warm-up records (microseconds)."""
    out: list[float] = []
    for rec in records:
        if rec.side is side and rec.ok and not rec.warmup:
            value = metric_value(rec, metric)
            if value is not None:
                out.append(float(value))
    return out


def unpaired_ratios(
    records: Sequence[RequestRecord],
    *,
    quantiles: Sequence[float] = UNPAIRED_QUANTILES,
    min_per_side: int = 2,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> tuple[QuantileRatio, ...]:
    """Quantile ratios for every metric with at least ``min_per_side`` values on each side."""
    out: list[QuantileRatio] = []
    for metric in Metric:
        base = sorted(side_values(records, Role.BASELINE, metric))
        cand = sorted(side_values(records, Role.CANDIDATE, metric))
        out += quantile_ratios(
            metric, base, cand, quantiles=quantiles, min_per_side=min_per_side,
            resamples=resamples, seed=seed,
        )  # fmt: skip
    return tuple(out)


def dominant_mode(records: Iterable[RequestRecord]) -> SendMode | None:
    """The send mode most records carry (None when none says)."""
    counts: dict[SendMode, int] = {}
    for rec in records:
        if rec.mode is not None:
            counts[rec.mode] = counts.get(rec.mode, 0) + 1
    if not counts:
        return None
    return max(counts, key=lambda m: counts[m])
