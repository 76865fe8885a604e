"""The report as a renderer-neutral document: sections of paragraphs and tables.

``render_text``, ``render_md`` and ``render_html`` all lay out the same document, so the
three formats never disagree about a figure. Sections carry a ``key`` the HTML renderer
uses to place its figures. The first section is the answer at a glance
(``document.glance``). Simulated reports say SIMULATED in the title, in a banner and in
the verdict lines.
"""

from __future__ import annotations

from collections.abc import Callable

from specproxy.core.compare.failures import FailureComparison
from specproxy.core.compare.pairing import Metric
from specproxy.core.measurement.histogram import PERCENTILE_RULE, SUMMARY_PERCENTILES
from specproxy.core.records.model import Role
from specproxy.core.records.tally import SideSummary, excluded_name
from specproxy.core.statistics.stats import Interval
from specproxy.report import fmt
from specproxy.report.document.blocks import Badge, Section, Table
from specproxy.report.document.breakdown import breakdown_section
from specproxy.report.document.detail import (
    acceptance_section,
    agreement_section,
    histogram_section,
    launch_section,
)
from specproxy.report.document.glance import glance_section
from specproxy.report.document.replication import replication_section
from specproxy.report.model import SIMULATED_LABEL, Report

__all__ = ["Badge", "Section", "Table", "document"]


def banner(report: Report) -> tuple[str, ...]:
    lines = []
    if report.simulated:
        lines.append(
            f"{SIMULATED_LABEL}: every number below comes from simulated servers; "
            "no recommendation is made from it."
        )
    if report.aa_reason:
        lines.append(f"A/A run ({report.aa_reason}): both sides are the baseline.")
    return tuple(lines)


def verdict_section(report: Report) -> Section:
    v = report.verdict
    tag = f" ({SIMULATED_LABEL})" if report.simulated else ""
    head = f"Verdict{tag}: {v.label.value.upper()}"
    detail = (
        f"{v.metric.label} median per-pair ratio {fmt.ratio(v.interval)} over {v.n_pairs} pairs"
        f"{_in_units(v.interval)}"
    )
    rec = report.recommendation
    rec_line = f"Recommendation: {rec.text}" if rec.text else f"Recommendation: none ({rec.reason})"
    rows = tuple(("met" if c.met else "MISSING", c.key, c.detail) for c in rec.conditions)
    blocks: list[str | Table] = [
        f"{head}: {detail}; {v.reason}.",
        _failures_line(v.failures),
        f"Rule: {report.rule}.",
        f"Mode: {report.mode_caveat}.",
        rec_line,
        Table(("", "condition", "detail"), rows, "Conditions for a recommendation"),
    ]
    return Section("verdict", "Verdict and recommendation", tuple(blocks))


def _in_units(iv: Interval | None) -> str:
    """`` in 8 block pairs`` (empty when the interval does not rest on units)."""
    what = fmt.units(iv)
    return f" in {what}" if what else ""


def _failures_line(failures: FailureComparison | None) -> str:
    """The failure-rate comparison (already in the verdict's reason when it blocks)."""
    if failures is None:
        return "Failures: not compared."
    if failures.candidate_fails_more:
        return "Failures: the candidate fails measurably more often (see the verdict above)."
    return f"Failures: {failures.describe()}; not measurably more often on the candidate."


def paired_section(report: Report) -> Section:
    p = report.pairing
    rows = tuple(
        (
            r.metric.label,
            fmt.ratio(r.interval),
            fmt.ratio(r.medians),
            fmt.level(r.interval) if r.interval and fmt.shows_interval(r.interval) else fmt.DASH,
            fmt.units(r.interval) or fmt.DASH,
            fmt.change(r.interval),
            f"{r.n} ({r.candidate_failed} +inf, {r.baseline_failed} zero)",
            fmt.pct(r.candidate_faster_share, 0),
        )
        for r in report.paired
    )
    counts = (
        f"{p.pairs} pairs ({p.both_ok} both completed, {p.baseline_failed_only} baseline-only "
        f"failures, {p.candidate_failed_only} candidate-only failures, {p.both_failed} both "
        f"failed); {p.incomplete} pair ids with one side missing; "
        f"{p.without_pair_id} records without a pair id; {p.duplicates} duplicates ignored. "
        "Ratios are failure-aware: a candidate-only failure ranks as +inf, a baseline-only "
        "failure as 0, a pair where both failed is not ranked. Intervals come from the spread "
        "between units of replication (next section), shown only where at least two units "
        "have a value; the ratio of the sides' medians is each side's median over the same "
        "pairs, completed requests only."
    )
    headers = (
        "metric", "median per-pair ratio [95% CI]", "ratio of medians [95% CI]", "level",
        "rests on", "change", "ranked pairs", "candidate faster in",
    )  # fmt: skip
    blocks: list[str | Table] = [counts, Table(headers, rows, "Paired ratios (candidate/baseline)")]
    if report.unpaired:
        urows = tuple(
            (
                q.metric.label,
                f"p{q.q * 100:g}",
                fmt.ms(q.baseline_value),
                fmt.ms(q.candidate_value),
                fmt.ratio(q.interval) if q.interval else f"{q.ratio:.3f} (too few for an interval)",
            )
            for q in report.unpaired
        )
        uhead = ("metric", "quantile", "baseline", "candidate", "ratio [95% CI]")
        caption = (
            "Unpaired quantile ratios (each side resampled alone; completed requests; these"
            " quantiles interpolate between values, the bootstrap's definition, so they can"
            " differ from the nearest-rank percentiles of the per-side table)"
        )
        blocks.append(Table(uhead, urows, caption))
    return Section("paired", "Paired comparison", tuple(blocks))


_Getter = Callable[[SideSummary], str]


def _lat(metric_idx: int, q_idx: int, *, ok: bool) -> _Getter:
    def get(s: SideSummary) -> str:
        lat = s.latency[metric_idx]
        values = lat.ok if ok else lat.with_failures
        return fmt.ms(values[q_idx]) if values is not None else fmt.DASH

    return get


def _warmup(s: SideSummary) -> str:
    failed = f" ({s.warmup_failed} failed)" if s.warmup_failed else ""
    return fmt.count(s.warmup_excluded) + failed


def _lag(s: SideSummary) -> str:
    return fmt.ms(s.send_lag_p99_us) + (" LAGGED" if s.lagged else "")


def _excluded(report: Report) -> str:
    """``warm-up``, ``cool-down`` or both, from the runs' recorded workload."""
    counts = dict.fromkeys(("warmup", "cooldown"), 0)
    for key, value in report.workload:
        if key in counts and value.isdigit():
            counts[key] += int(value)
    return excluded_name(counts["warmup"], counts["cooldown"])


def _side_getters(excluded: str = "warm-up") -> list[tuple[str, _Getter]]:
    getters: list[tuple[str, _Getter]] = [
        (f"requests ({excluded} excluded)", lambda s: fmt.count(s.requests)),
        ("completed", lambda s: fmt.count(s.completed)),
        ("failed", lambda s: ", ".join(f"{k} {n}" for k, n in s.failures) or "0"),
        (f"{excluded} (not counted above or below)", _warmup),
    ]
    for i, metric in enumerate(Metric):
        for j, q in enumerate(SUMMARY_PERCENTILES):
            getters.append((f"{metric.label} p{q:g}", _lat(i, j, ok=True)))
        getters.append((f"{metric.label} p99, failures as worst", _lat(i, 2, ok=False)))
    getters += [
        (
            "output tokens/s (while active)",
            lambda s: fmt.num(s.output_tokens_per_s, 1) + fmt.activity(s.active_s),
        ),
        (
            "requests/s (while active)",
            lambda s: fmt.num(s.requests_per_s, 2) + fmt.activity(s.active_s),
        ),
        ("active / span s", lambda s: f"{s.active_s:.1f} / {s.span_s:.1f}"),
        ("in flight at send", lambda s: f"{s.load_min}-{s.load_max}"),
        ("send lag p99 (warm-up excluded)", _lag),
    ]
    return getters


def sides_section(report: Report) -> Section:
    sides = (report.side(Role.BASELINE), report.side(Role.CANDIDATE))
    rows = tuple(
        (label, *(get(s) if s is not None and s.requests else fmt.DASH for s in sides))
        for label, get in _side_getters(_excluded(report))
    )
    lagged = [s.side.value for s in report.sides if s.lagged]
    limit = max((s.max_send_lag_us for s in report.sides), default=0.0)
    blocks: list[str | Table] = [
        Table(("", "baseline", "candidate"), rows, "Per side"),
        f"Latencies: {PERCENTILE_RULE}. Load met: p99 send lag at most "
        f"{fmt.ms(limit)} on every side.",
    ]
    if lagged:
        blocks.insert(
            0,
            f"Sending lagged on {', '.join(lagged)} (p99 send lag over {fmt.ms(limit)}):"
            " the intended load was not met.",
        )
    return Section("sides", "Latency, failures and throughput per side", tuple(blocks))


def notes_section(report: Report) -> Section:
    lines = [f"Run directories: {', '.join(report.run_dirs)}"]
    if report.experiment_ids:
        lines.append(f"Experiment ids: {', '.join(report.experiment_ids)}")
    lines += [f"Note: {n}" for n in report.notes]
    return Section("notes", "Provenance and notes", tuple(lines))


def document(report: Report) -> tuple[str, tuple[str, ...], tuple[Section, ...]]:
    """``(title, banner lines, sections)`` of ``report``."""
    sections = (
        glance_section(report),
        verdict_section(report),
        paired_section(report),
        replication_section(report),
        sides_section(report),
        acceptance_section(report),
        *filter(None, (breakdown_section(report),)),
        agreement_section(report),
        launch_section(report),
        histogram_section(report),
        notes_section(report),
    )
    return report.title, banner(report), sections
