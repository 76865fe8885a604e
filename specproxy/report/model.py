"""The report model: every figure a rendered report shows, as frozen values.

Built by ``report.build`` from saved records only; rendered by ``render_text``,
``render_md`` and ``render_html``; serialised for machines by ``to_jsonable`` (the
``--format json`` output). Latencies are microseconds, ratios candidate/baseline.
In JSON an infinite quantile or ratio-interval end (one that lands on a failed request
counted as the worst case: a candidate-only failure is a per-pair ratio of +inf) is
written as ``null``; every interval carries ``confidence``, the level it really reaches.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum
from pathlib import PurePath
from typing import Any

from specproxy.core.compare.acceptance import AcceptanceSummary, GroupRatio
from specproxy.core.compare.agreement import OutputAgreement
from specproxy.core.compare.blocks import Replication
from specproxy.core.compare.breakdown import Breakdowns
from specproxy.core.compare.distribution import DistributionCheck
from specproxy.core.compare.pairing import PairedRatio, PairingCounts, QuantileRatio
from specproxy.core.compare.sides import Timeline
from specproxy.core.compare.verdict import Recommendation, Verdict
from specproxy.core.measurement.acceptance_window import ServerAcceptance
from specproxy.core.records.model import Role, SendMode
from specproxy.core.records.tally import SideSummary

SIMULATED_LABEL = "SIMULATED"


@dataclass(frozen=True, slots=True)
class NoiseFloor:
    """What the A/A run dirs measured: the ratio spread and output agreement when nothing
    differs. ``margin`` is the verdict margin after widening to the A/A reach."""

    run_dirs: tuple[str, ...]
    e2e: PairedRatio
    agreement: OutputAgreement
    margin: float
    distribution: DistributionCheck | None = None  # the A/A run's own output-distribution check


@dataclass(frozen=True, slots=True)
class HistogramView:
    """Percentiles (microseconds) of one merged ``.hlog`` metric of one side."""

    side: Role
    metric: str
    count: int
    p50_us: int | None
    p90_us: int | None
    p99_us: int | None
    p999_us: int | None
    max_us: int | None
    runs_merged: int


@dataclass(frozen=True, slots=True)
class Cdf:
    """``(value_us, cumulative fraction)`` points of one metric on one side (≤ 200 points).

    ``estimated``: how many of the ``n`` samples rest on estimated tokens per chunk (ITL
    only; show "estimated" next to the curve when it is not 0).
    """

    side: Role
    metric: str
    points: tuple[tuple[float, float], ...]
    n: int
    estimated: int = 0


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """Median TPOT of one side's completed requests sent at one load (in-flight) bin."""

    side: Role
    label: str
    load_low: int
    n: int
    tpot_median_us: float


@dataclass(frozen=True, slots=True)
class Plots:
    """Data behind the HTML figures."""

    cdfs: tuple[Cdf, ...]
    tpot_by_load: tuple[LoadPoint, ...]
    ratio_vs_acceptance: tuple[tuple[float, float], ...]
    timeline: Timeline
    #: alternate mode's blocks: (start s, end s since the timeline origin, side sent to)
    blocks: tuple[tuple[float, float, Role], ...] = ()


@dataclass(frozen=True, slots=True)
class Report:
    """One report over one or more run directories (records merged)."""

    title: str
    run_dirs: tuple[str, ...]
    experiment_ids: tuple[str, ...]
    simulated: bool
    aa_reason: str | None
    mode: SendMode | None
    mode_caveat: str
    notes: tuple[str, ...]
    algorithm: str | None
    fingerprints: tuple[tuple[str, str | None], ...]
    launch_differences: tuple[str, ...]
    scope: tuple[tuple[str, str | None], ...]
    sides: tuple[SideSummary, ...]
    pairing: PairingCounts
    paired: tuple[PairedRatio, ...]
    replication: Replication
    unpaired: tuple[QuantileRatio, ...]
    acceptance: tuple[AcceptanceSummary, ...]
    server_acceptance: tuple[ServerAcceptance, ...]
    by_acceptance: tuple[GroupRatio, ...]
    break_even_accept_length: float | None
    by_category: tuple[GroupRatio, ...]
    by_load: tuple[GroupRatio, ...]
    agreement: OutputAgreement
    noise_floor: NoiseFloor | None
    verdict: Verdict
    rule: str
    recommendation: Recommendation
    histograms: tuple[HistogramView, ...]
    plots: Plots
    speculative: tuple[tuple[str, str], ...] = ()  # the candidate's (setting, value)
    launch_table: tuple[tuple[str, str, str], ...] = ()  # (setting, baseline, candidate)
    workload: tuple[tuple[str, str], ...] = ()  # (key, value) of experiment.json's workload
    breakdown: Breakdowns | None = None  # where the gain goes (core.compare.breakdown)
    distribution: DistributionCheck | None = None  # the output-distribution check (sampling)

    def side(self, role: Role) -> SideSummary | None:
        return next((s for s in self.sides if s.side is role), None)


def to_jsonable(value: Any) -> Any:
    """Plain JSON data from the model: dataclasses as dicts, enums as values, inf/NaN as None."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(to_jsonable(k)): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    return value
