"""Records -> report model (pure: takes loaded ``RunData``; reads no file but the chunk
arrays the timeline asks back, through ``report.load.ChunkReader``).

Every figure comes from the runs' record columns (``core.records.columns``) through
``core.compare.column_figures``, ``core.compare.column_acceptance`` and ``report.plots``;
``tests/report/test_scale_equivalence.py`` holds them equal to record-by-record versions
(``tests/oracles/``, ``core.records.tally``) over the same records.

Several run directories merge: their records are concatenated (pairs stay inside their
own experiment), their histograms are merged exactly and their server-side counter
deltas are summed. Run directories that are A/A runs are not merged into the comparison
when other run directories are given: they become its **noise floor**
(``report.noise_floor``). Given only A/A runs, the report is an A/A report and carries no
recommendation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specproxy.core.compare import column_acceptance as acc
from specproxy.core.compare.acceptance import GroupRatio, break_even_accept_length
from specproxy.core.compare.agreement import OutputAgreement, aa_reason
from specproxy.core.compare.blocks import Replication
from specproxy.core.compare.breakdown import Breakdowns, breakdowns
from specproxy.core.compare.column_figures import (
    CompletedValues,
    PairColumns,
    PairSeries,
    dominant_mode,
    pair_replication,
    paired_ratios,
    pairing_counts,
    side_summary,
    unpaired_ratios,
)
from specproxy.core.compare.conditions import evaluate
from specproxy.core.compare.distribution import DistributionCheck, lossy_settings
from specproxy.core.compare.failures import compare_failures
from specproxy.core.compare.launch_checks import (
    SideLaunch,
    algorithm,
    other_differences,
    read_side,
    scope,
)
from specproxy.core.compare.pairing import (
    MODE_CAVEATS,
    Metric,
    PairedRatio,
    PairingCounts,
    QuantileRatio,
)
from specproxy.core.compare.sides import Timeline
from specproxy.core.compare.verdict import (
    DEFAULT_MARGIN,
    MIN_PAIRS,
    Recommendation,
    Verdict,
    VerdictLabel,
    decide,
    recommend,
    rule_text,
)
from specproxy.core.measurement.histogram import LatencyHistogram
from specproxy.core.records.column_concat import concat
from specproxy.core.records.columns import RecordColumns
from specproxy.core.records.model import Role, SendMode
from specproxy.core.records.tally import DEFAULT_MAX_SEND_LAG_MS, SideSummary
from specproxy.core.statistics.stats import DEFAULT_RESAMPLES, DEFAULT_SEED
from specproxy.report.beside import beside
from specproxy.report.build_parts import (
    histogram_views,
    merge_experiments,
    merged_histograms,
    saturation_notes,
    server_acceptance_merged,
)
from specproxy.report.distribution import distribution_check
from specproxy.report.launch_rows import launch_rows, speculative_rows, workload_rows
from specproxy.report.load import ChunkReader, RunData
from specproxy.report.model import NoiseFloor, Plots, Report
from specproxy.report.noise_floor import noise_floor, split_aa
from specproxy.report.plots import build_plots
from specproxy.report.timeline import streamed_timeline


@dataclass(frozen=True, slots=True)
class BuildOptions:
    """Statistics settings: verdict margin (fraction), minimum pairs, the unpaired bootstrap's
    resamples and seed, throughput window (seconds; None picks a round size giving about
    60 windows)."""

    margin: float = DEFAULT_MARGIN
    min_pairs: int = MIN_PAIRS
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    window_s: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.margin < 0.5:
            raise ValueError(f"margin must be within [0, 0.5), got {self.margin}")
        if self.min_pairs < 2:
            raise ValueError("min_pairs must be >= 2")
        if self.resamples < 100:
            raise ValueError("resamples must be >= 100")
        if self.window_s is not None and self.window_s <= 0:
            raise ValueError("window_s must be > 0")


def _mode(experiment: dict[str, Any], cols: RecordColumns) -> SendMode | None:
    try:
        return SendMode(str(experiment.get("mode")))
    except ValueError:
        return dominant_mode(cols)


def _max_lag_ms(experiment: Mapping[str, Any]) -> float:
    """The run's load-met limit (``--max-lag-ms``, kept in experiment.json's workload)."""
    workload = experiment.get("workload")
    value = workload.get("max_lag_ms") if isinstance(workload, Mapping) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return DEFAULT_MAX_SEND_LAG_MS


def load_range(sides: Sequence[SideSummary]) -> str | None:
    """The load the comparison saw: in-flight requests at send, and completed requests/s."""
    parts = []
    for s in sides:
        if s.load_min is None:
            continue
        rate = f", {s.requests_per_s:.2f} req/s" if s.requests_per_s is not None else ""
        parts.append(f"{s.side.value} {s.load_min}-{s.load_max} in flight{rate}")
    return "; ".join(parts) or None


@dataclass(frozen=True, slots=True)
class _Compared:
    """The comparison of the merged main runs, before it is laid out as a Report."""

    experiment: dict[str, Any]
    cols: RecordColumns
    values: dict[Role, CompletedValues]
    mode: SendMode | None
    pairs: PairColumns
    pairing: PairingCounts
    paired: tuple[PairedRatio, ...]
    series: PairSeries
    replication: Replication
    lengths: list[float]
    base: SideLaunch
    cand: SideLaunch
    sides: tuple[SideSummary, ...]
    scope: dict[str, str | None]
    agreement: OutputAgreement
    simulated: bool
    aa_why: str | None
    beside: Callable[[], _Beside]  # report.beside: wait for them
    distribution: DistributionCheck | None = None  # set once the A/A runs are known


_Beside = tuple[Breakdowns, tuple[GroupRatio, ...], tuple[GroupRatio, ...]]  # by accept, load


def _compare(main: Sequence[RunData], experiment: dict[str, Any], cols: RecordColumns) -> _Compared:
    base, cand = read_side(experiment, Role.BASELINE), read_side(experiment, Role.CANDIDATE)
    max_lag_ms = _max_lag_ms(experiment)
    values = {side: CompletedValues.of(cols, side) for side in Role}
    sides = tuple(side_summary(cols, values[side], max_lag_ms) for side in Role)
    sampling = experiment.get("sampling")
    pairs = PairColumns.of(cols)
    series = PairSeries.of(cols, pairs)
    lengths = acc.candidate_lengths(cols, pairs)
    later = beside(
        lambda: (
            breakdowns(cols, pairs, series, lengths, stream_interval=_stream_interval(cand)),
            acc.ratio_by_acceptance(pairs, series, lengths),
            acc.ratio_by_load(cols, pairs, series, lengths),
        ),
        len(pairs.base),
    )
    units = series.units()
    replication = pair_replication(cols, pairs, series, units)
    paired = paired_ratios(series, units, replication.flagged)
    return _Compared(
        experiment=experiment,
        cols=cols,
        values=values,
        mode=_mode(experiment, cols),
        pairs=pairs,
        pairing=pairing_counts(cols, pairs),
        paired=paired,
        series=series,
        replication=replication,
        lengths=lengths,
        base=base,
        cand=cand,
        sides=sides,
        scope=scope(experiment, base, load_range(sides)),
        agreement=acc.output_agreement(
            cols, pairs, sampling if isinstance(sampling, dict) else None
        ),
        simulated=_simulated(experiment, base, cand),
        aa_why=aa_reason(experiment),
        beside=later,
    )


def _recommend(c: _Compared, verdict: Verdict, main: Sequence[RunData]) -> Recommendation:
    conditions = evaluate(
        experiment=c.experiment,
        base=c.base,
        cand=c.cand,
        requests_file_found=all(r.requests_file_found for r in main),
        per_side={s.side: s.requests for s in c.sides},
        mode=c.mode,
        pairing=c.pairing,
        agreement=c.agreement,
        scope=c.scope,
        distribution=c.distribution,
    )
    return recommend(
        verdict,
        conditions,
        simulated=c.simulated,
        aa=c.aa_why is not None,
        algorithm=algorithm(c.cand),
        scope=c.scope,
    )


def build_report(runs: Sequence[RunData], options: BuildOptions | None = None) -> Report:
    """The report over ``runs`` (at least one)."""
    if not runs:
        raise ValueError("a report needs at least one run directory")
    opts = options or BuildOptions()
    main, aa_runs = split_aa(runs)
    experiment, notes = merge_experiments(main)
    notes += [p for run in runs for p in run.problems]
    notes += saturation_notes(runs)
    cols = concat([run.columns for run in main])
    timeline = beside(lambda: _timeline(cols, opts.window_s), len(cols) // 2)  # from now on
    c = _compare(main, experiment, cols)
    noise = noise_floor(aa_runs, opts.margin)
    margin = noise.margin if noise is not None else opts.margin
    failures = compare_failures(c.pairing)
    verdict = decide(
        c.paired[0],
        mode=c.mode,
        margin=margin,
        min_pairs=opts.min_pairs,
        failures=failures,
        drift=[e.describe() for e in c.replication.episodes],
    )
    if c.aa_why is not None and verdict.label in (VerdictLabel.FASTER, VerdictLabel.SLOWER):
        notes.append(
            f"A/A run called {verdict.label.value}: the two sides are not interchangeable "
            "(contention, ordering or placement bias); judge comparisons against this"
        )
    lossy = lossy_settings(c.cand.config.server_args) if c.cand.config else ()
    aa_check = noise.distribution if noise is not None else None
    found = distribution_check(main, experiment, c.cols, c.mode, aa=aa_check, lossy=lossy)
    c = dataclasses.replace(c, distribution=found)
    report = _layout(
        c, main=main, opts=opts, notes=notes, noise=noise, verdict=verdict, timeline=timeline
    )
    return dataclasses.replace(report, distribution=c.distribution)


def _layout(
    c: _Compared,
    *,
    main: Sequence[RunData],
    opts: BuildOptions,
    notes: list[str],
    noise: NoiseFloor | None,
    verdict: Verdict,
    timeline: Callable[[], Timeline],
) -> Report:
    """The Report fields; ``verdict.margin`` is the margin applied (widened by any A/A run)."""
    cols = c.cols
    diffs = other_differences(c.experiment, c.base, c.cand) or []
    histograms = merged_histograms(main)
    return Report(  # what the process beside computes last (c.beside waits for it)
        title=_title(algorithm(c.cand), c.simulated, c.aa_why),
        run_dirs=tuple(r.path for r in main),
        experiment_ids=tuple(sorted(set(cols.experiment_ids))),
        simulated=c.simulated,
        aa_reason=c.aa_why,
        mode=c.mode,
        mode_caveat=MODE_CAVEATS[c.mode] if c.mode is not None else "send mode not recorded",
        notes=tuple(notes),
        algorithm=algorithm(c.cand),
        fingerprints=_fingerprints(c),
        launch_differences=tuple(d.text for d in diffs),
        scope=tuple(c.scope.items()),
        sides=c.sides,
        pairing=c.pairing,
        paired=c.paired,
        replication=c.replication,
        unpaired=_unpaired(c, opts),
        acceptance=tuple(acc.acceptance_summary(cols, side) for side in Role),
        server_acceptance=tuple(server_acceptance_merged(main, side) for side in Role),
        agreement=c.agreement,
        noise_floor=noise,
        verdict=verdict,
        rule=rule_text(verdict.margin, opts.min_pairs),
        recommendation=_recommend(c, verdict, main),
        histograms=histogram_views(histograms, main),
        plots=_plots(c, main, histograms, timeline()),
        speculative=speculative_rows(c.cand.config),
        launch_table=launch_rows(c.base.config, c.cand.config),
        workload=workload_rows(c.experiment),
        breakdown=(later := c.beside())[0],
        by_category=later[0].by_category.groups,
        by_acceptance=later[1],
        break_even_accept_length=break_even_accept_length(later[1]),
        by_load=later[2],
    )


def _stream_interval(cand: SideLaunch) -> object:
    """The candidate's ``stream_interval`` server argument (None where unknown)."""
    return cand.config.server_args.get("stream_interval") if cand.config is not None else None


def _fingerprints(c: _Compared) -> tuple[tuple[str, str | None], ...]:
    """Each side's launch fingerprint (None where its launch config is unknown)."""
    return tuple(
        (s.side.value, s.config.fingerprint if s.config else None) for s in (c.base, c.cand)
    )


def _unpaired(c: _Compared, opts: BuildOptions) -> tuple[QuantileRatio, ...]:
    """The unpaired quantile ratios of the two sides' completed values."""
    base, cand = c.values[Role.BASELINE], c.values[Role.CANDIDATE]
    return unpaired_ratios(base, cand, resamples=opts.resamples, seed=opts.seed)


def _plots(
    c: _Compared,
    main: Sequence[RunData],
    histograms: Mapping[tuple[Role, str], LatencyHistogram],
    timeline: Timeline,
) -> Plots:
    """The report's plot data (``report.plots``)."""
    return build_plots(
        c.cols,
        values=c.values,
        pairs=c.pairs,
        e2e=c.series.ratios[Metric.E2E],
        lengths=c.lengths,
        timeline=timeline,
        itl_histograms=_itl_logs(histograms, main),
    )


def _timeline(cols: RecordColumns, window_s: float | None) -> Timeline:
    """The throughput timeline (``report.timeline``: exact, chunk arrays read back only for
    requests that straddle a window edge)."""
    with ChunkReader() as chunks_of:
        return streamed_timeline(cols, window_s, chunks_of)


def _itl_logs(
    merged: Mapping[tuple[Role, str], LatencyHistogram], runs: Sequence[RunData]
) -> dict[Role, LatencyHistogram]:
    """Merged ``itl_us`` logs per side, only where every run dir has one (else records)."""
    return {
        side: merged[(side, "itl_us")]
        for side in Role
        if (side, "itl_us") in merged and all((side, "itl_us") in r.histograms for r in runs)
    }


def _simulated(experiment: dict[str, Any], *sides: Any) -> bool:
    launches = [s.config.simulated for s in sides if s.config is not None]
    return bool(experiment.get("simulated")) or any(launches)


def _title(algo: str | None, simulated: bool, aa_why: str | None) -> str:
    what = "A/A noise-floor run" if aa_why else f"{algo or 'candidate'} vs baseline"
    return f"{'[SIMULATED] ' if simulated else ''}specproxy report: {what}"
