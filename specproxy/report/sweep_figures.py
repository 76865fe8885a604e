"""One sweep level's figures, read from the level's ordinary report (pure).

A sweep level is judged by exactly the report ``specproxy report`` draws for its run
directories: the verdict, the paired E2E and TPOT ratios with their intervals, the
candidate's mean accept length and the failures on each side all come from
``report.build.build_report``. Only two figures are added here, because the comparison
report has no SLO: **output tokens/s** per side (the report's own ``SideSummary``
figure) and **goodput** per side, completed requests meeting every bound of the SLO
(``ttft_ms``, ``tpot_ms``) per second of the side's active time (warm-up excluded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import compress
from typing import Any

from specproxy.core.compare.column_figures import completed_mask
from specproxy.core.compare.pairing import Metric, PairedRatio
from specproxy.core.records.columns import NULL, RecordColumns
from specproxy.core.records.model import Role
from specproxy.core.statistics.stats import Interval
from specproxy.report.model import Report

DECIDED = ("faster", "slower", "no_difference")


@dataclass(frozen=True, slots=True)
class SideRates:
    """Output tokens/s and goodput (good requests/s; None without an SLO) of one side."""

    output_tokens_per_s: float | None
    goodput_per_s: float | None
    good: int | None
    completed: int
    active_s: float | None = None  # the side's active time the rates rest on


@dataclass(frozen=True, slots=True)
class LevelFigures:
    """What ``sweep.json`` says about one level (names are the sweep.json contract)."""

    level: float
    kind: str
    run_dir: str
    verdict: str
    verdict_reason: str
    e2e_ratio: float | None
    e2e_ci: tuple[float, float] | None
    tpot_ratio: float | None
    tpot_ci: tuple[float, float] | None
    pairs: int
    accept_length: float | None
    failures: dict[str, int]
    rates: dict[str, SideRates]
    simulated: bool
    recommendation: str | None
    recommendation_reason: str
    missing_conditions: tuple[str, ...]
    scope: tuple[tuple[str, str | None], ...]
    units: int = 0
    clean_units: int = 0
    unit: str = "block pair"
    e2e_medians_ratio: float | None = None
    e2e_medians_ci: tuple[float, float] | None = None
    drift: tuple[str, ...] = ()
    heterogeneity_p: float | None = None
    verdict_short: str = ""  # inconclusive: the first unmet condition (``Verdict.short``)

    @property
    def decided(self) -> bool:
        return self.verdict in DECIDED

    def to_json(self) -> dict[str, Any]:
        """The ``levels[]`` entry of sweep.json."""
        return {
            "level": self.level,
            "kind": self.kind,
            "run_dir": self.run_dir,
            "verdict": self.verdict,
            "verdict_reason": self.verdict_reason,
            "verdict_short": self.verdict_short,
            "e2e_ratio": self.e2e_ratio,
            "e2e_ci": list(self.e2e_ci) if self.e2e_ci else None,
            "tpot_ratio": self.tpot_ratio,
            "tpot_ci": list(self.tpot_ci) if self.tpot_ci else None,
            "pairs": self.pairs,
            "accept_length": self.accept_length,
            "failures": dict(self.failures),
            "output_tokens_per_s": {k: v.output_tokens_per_s for k, v in self.rates.items()},
            "goodput_per_s": {k: v.goodput_per_s for k, v in self.rates.items()},
            "active_s": {k: v.active_s for k, v in self.rates.items()},
            "simulated": self.simulated,
            "recommendation": self.recommendation,
            "recommendation_reason": self.recommendation_reason,
            "missing_conditions": list(self.missing_conditions),
            "scope": dict(self.scope),
            "units": self.units,
            "clean_units": self.clean_units,
            "unit": self.unit,
            "e2e_medians_ratio": self.e2e_medians_ratio,
            "e2e_medians_ci": list(self.e2e_medians_ci) if self.e2e_medians_ci else None,
            "drift": list(self.drift),
            "heterogeneity_p": self.heterogeneity_p,
        }


def _ratio(paired: Sequence[PairedRatio], metric: Metric) -> PairedRatio | None:
    return next((p for p in paired if p.metric is metric), None)


def _point(iv: Interval | None) -> tuple[float | None, tuple[float, float] | None]:
    """The point and, where the interval rests on 2 or more units, its bounds."""
    if iv is None:
        return None, None
    if iv.units is not None and iv.units < 2:
        return iv.point, None
    return iv.point, (iv.low, iv.high)


def good_requests(
    cols: RecordColumns, side: Role, ttft_ms: float | None, tpot_ms: float | None
) -> int:
    """``side``'s completed, non-warm-up requests that meet every bound given (a missing
    figure fails its bound)."""
    done = completed_mask(cols, side)
    ttft_max = None if ttft_ms is None else ttft_ms * 1000
    tpot_max = None if tpot_ms is None else tpot_ms * 1000
    good = 0
    for ttft, tpot in zip(compress(cols.ttft, done), compress(cols.tpot, done), strict=True):
        if ttft_max is not None and (ttft == NULL or ttft > ttft_max):
            continue
        if tpot_max is not None and (tpot == NULL or tpot > tpot_max):
            continue
        good += 1
    return good


def side_rates(
    report: Report,
    cols: RecordColumns,
    side: Role,
    slo: tuple[float | None, float | None] | None,
) -> SideRates:
    """Output tokens/s from the report's side summary; goodput over the same active time."""
    summary = report.side(side)
    if summary is None:
        return SideRates(None, None, None, 0)
    good = None
    goodput = None
    if slo is not None:
        good = good_requests(cols, side, *slo)
        goodput = good / summary.active_s if summary.active_s > 0 else None
    return SideRates(
        summary.output_tokens_per_s, goodput, good, summary.completed, summary.active_s
    )


def level_figures(
    report: Report,
    cols: RecordColumns,
    *,
    level: float,
    kind: str,
    run_dir: str,
    slo: tuple[float | None, float | None] | None = None,
) -> LevelFigures:
    """The level's figures from its report (and its record columns, for goodput)."""
    e2e_ratio = _ratio(report.paired, Metric.E2E)
    tpot_ratio = _ratio(report.paired, Metric.TPOT)
    e2e, e2e_ci = _point(e2e_ratio.interval if e2e_ratio else None)
    tpot, tpot_ci = _point(tpot_ratio.interval if tpot_ratio else None)
    medians, medians_ci = _point(e2e_ratio.medians if e2e_ratio else None)
    het = report.replication.heterogeneity
    cand = next((a for a in report.acceptance if a.side is Role.CANDIDATE), None)
    rec = report.recommendation
    return LevelFigures(
        level=level,
        kind=kind,
        run_dir=run_dir,
        verdict=report.verdict.label.value,
        verdict_reason=report.verdict.reason,
        verdict_short=report.verdict.short,
        e2e_ratio=e2e,
        e2e_ci=e2e_ci,
        tpot_ratio=tpot,
        tpot_ci=tpot_ci,
        pairs=report.pairing.pairs,
        accept_length=cand.request_weighted_mean if cand is not None else None,
        failures={s.side.value: s.failed for s in report.sides},
        rates={r.value: side_rates(report, cols, r, slo) for r in Role},
        simulated=report.simulated,
        recommendation=rec.text,
        recommendation_reason=rec.reason,
        missing_conditions=tuple(c.key for c in rec.missing),
        scope=report.scope,
        units=e2e_ratio.units if e2e_ratio else 0,
        clean_units=e2e_ratio.clean_units if e2e_ratio else 0,
        unit=report.replication.unit,
        e2e_medians_ratio=medians,
        e2e_medians_ci=medians_ci,
        drift=tuple(e.describe() for e in report.replication.episodes),
        heterogeneity_p=het.p_value if het is not None else None,
    )
