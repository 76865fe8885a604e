"""The HTML report's figures, built from the report model (SVG strings, by section key).

Latency CDFs per side (TTFT, E2E, TPOT, per-token ITL) with a per-token latency
histogram beside the ITL CDF, TPOT versus load, throughput over time (alternate-mode
blocks shaded), the paired E2E ratio against load with interval bars, the candidate's
accept-length histogram, the E2E ratio versus acceptance and the ratio per prompt
category. A per-token latency figure whose tokens per chunk were partly estimated
says "estimated" in its title.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from specproxy.core.compare.acceptance import GroupRatio
from specproxy.core.records.model import Role
from specproxy.report import fmt, svg
from specproxy.report.model import SIMULATED_LABEL, Cdf, Report

ITL = "itl_us"
_METRIC_TITLES = {
    "ttft_us": "TTFT",
    "e2e_us": "E2E latency",
    "tpot_us": "TPOT (per request)",
    ITL: "per-token latency (chunk gap / tokens)",
}
HISTOGRAM_BINS = 30


def estimated_note(report: Report) -> str:
    """`` (estimated: ...)`` when some ITL samples rest on estimated tokens per chunk."""
    parts = [
        f"{c.side.value} {c.estimated / c.n:.0%}"
        for c in report.plots.cdfs
        if c.metric == ITL and c.estimated and c.n
    ]
    return f" (estimated tokens per chunk: {', '.join(parts)})" if parts else ""


def _series(cdfs: Sequence[Cdf], metric: str) -> list[svg.Series]:
    return [
        svg.Series(c.side.value, tuple((x / 1000.0, y) for x, y in c.points), "step")
        for c in cdfs
        if c.metric == metric
    ]


def itl_histogram(cdf: Cdf, bins: int = HISTOGRAM_BINS) -> tuple[tuple[float, float], ...]:
    """``(bin centre ms, share of tokens)`` over log-spaced bins, read off the CDF's steps."""
    pts = [(x, y) for x, y in cdf.points if x > 0]
    if len(pts) < 2 or pts[0][0] == pts[-1][0]:
        return ()
    xs, ys = [x for x, _ in pts], [y for _, y in pts]
    lo, hi = math.log10(xs[0]), math.log10(xs[-1])
    edges = [10 ** (lo + (hi - lo) * i / bins) for i in range(bins + 1)]

    def share_at(edge: float) -> float:
        i = bisect.bisect_right(xs, edge * (1 + 1e-12)) - 1
        return ys[i] if i >= 0 else 0.0

    below = [share_at(e) for e in edges]
    below[0] = 0.0
    return tuple(
        (math.sqrt(edges[i] * edges[i + 1]) / 1000.0, below[i + 1] - below[i]) for i in range(bins)
    )


CUT_QUANTILE = 0.99
CUT_FACTOR = 3.0


def fit_cdf(series: Sequence[svg.Series]) -> tuple[list[svg.Series], str]:
    """CDF curves fitted to where the data are, and what the x label must add.

    Drawn on a log axis when every value is > 0 (the chart does that); with a value of 0
    (a per-token latency of tokens that arrived together) the axis is linear, and when
    the largest value lies more than ``CUT_FACTOR`` times past the 99th percentile the
    axis is cut there, which the label says with the largest value."""
    xs = [x for s in series for x, _ in s.points]
    if not xs or min(xs) > 0:
        return list(series), ""
    cut = max(next((x for x, y in s.points if y >= CUT_QUANTILE), 0.0) for s in series)
    top = max(xs)
    if cut <= 0 or top <= CUT_FACTOR * cut:
        return list(series), ""
    fitted = [
        svg.Series(s.name, tuple((x, y) for x, y in s.points if x <= cut), s.kind) for s in series
    ]
    return fitted, f" (axis cut at the 99th percentile, {cut:.3g} ms; the largest is {top:.3g} ms)"


def latency_figures(report: Report, tag: str) -> list[str]:
    figs = []
    note = estimated_note(report)
    for metric, title in _METRIC_TITLES.items():
        series, cut = fit_cdf(_series(report.plots.cdfs, metric))
        if not series:
            continue
        extra = note if metric == ITL else ""
        figs.append(
            svg.chart(
                f"{tag}CDF: {title}{extra}",
                series,
                x_label=f"ms{cut}",
                y_label="fraction",
                log_x=True,
            )
        )
        if metric == ITL:
            hist = [
                svg.Series(c.side.value, itl_histogram(c), "line")
                for c in report.plots.cdfs
                if c.metric == ITL
            ]
            figs.append(
                svg.chart(
                    f"{tag}Histogram: per-token latency{note}",
                    hist,
                    x_label="ms",
                    y_label="share of tokens",
                    log_x=True,
                )
            )
    return figs


def load_figure(report: Report, tag: str) -> str:
    series = [
        svg.Series(
            side.value,
            tuple(
                (float(p.load_low), p.tpot_median_us / 1000.0)
                for p in report.plots.tpot_by_load
                if p.side is side
            ),
        )
        for side in Role
    ]
    return svg.chart(
        f"{tag}Median TPOT versus load",
        series,
        x_label="requests in flight at send (bin low edge)",
        y_label="ms",
    )


def timeline_figure(report: Report, tag: str) -> str:
    tl = report.plots.timeline
    series = [
        svg.Series(side.value, tuple((w.start_s, w.output_tokens / tl.window_s) for w in windows))
        for side, windows in tl.sides
    ]
    spans = [(lo, hi, side.value) for lo, hi, side in report.plots.blocks]
    shaded = "; shaded: alternate blocks by side" if spans else ""
    return svg.chart(
        f"{tag}Output tokens/s over time ({tl.window_s:g} s windows{shaded})",
        series,
        x_label="seconds since first send",
        y_label="tokens/s",
        spans=spans,
    )


def ratio_rows(groups: Sequence[GroupRatio]) -> list[tuple[str, float, float, float]]:
    """``(label, point, low, high)`` of each group's E2E ratio; no bar below 95% reach."""
    rows = []
    for g in groups:
        if g.e2e is None:
            continue
        iv = g.e2e
        low, high = (iv.low, iv.high) if fmt.shows_interval(iv) else (iv.point, iv.point)
        rows.append((g.label, iv.point, low, high))
    return rows


def paired_figures(report: Report, tag: str) -> list[str]:
    if not report.by_load:
        return []
    return [
        svg.intervals(
            f"{tag}Paired E2E ratio against load (95% interval bars)",
            ratio_rows(report.by_load),
            x_label="candidate's requests in flight at send",
            y_label="E2E ratio (candidate/baseline)",
        )
    ]


def acceptance_figures(report: Report, tag: str) -> list[str]:
    cand = next((a for a in report.acceptance if a.side is Role.CANDIDATE), None)
    figs = []
    if cand is not None and cand.distribution:
        values = [(f"{low:g}", float(n)) for low, n in cand.distribution]
        figs.append(
            svg.bars(
                f"{tag}Candidate accept length", values, x_label="accept length", y_label="requests"
            )
        )
    if report.plots.ratio_vs_acceptance:
        medians = tuple(
            (g.mean_accept_length, g.e2e.point)
            for g in report.by_acceptance
            if g.e2e is not None and g.mean_accept_length is not None
        )
        series = [
            svg.Series("pairs", report.plots.ratio_vs_acceptance, "scatter"),
            svg.Series("bin median", medians, "line"),
        ]
        figs.append(
            svg.chart(
                f"{tag}E2E ratio (candidate/baseline) versus accept length",
                series,
                x_label="candidate accept length",
                y_label="E2E ratio",
                hline=1.0,
            )
        )
    if report.by_category:
        figs.append(
            svg.intervals(
                f"{tag}E2E ratio by prompt category (95% interval bars)",
                ratio_rows(report.by_category),
                x_label="prompt category",
                y_label="E2E ratio (candidate/baseline)",
            )
        )
    return figs


def replication_figures(report: Report, tag: str) -> list[str]:
    """Each unit's E2E ratio, and each side's level, over time; drift episodes shaded."""
    units = report.replication.units
    if len(units) < 2:
        return []
    t0 = min(u.start_s for u in units)
    ratio = [svg.Series("E2E ratio", tuple((u.start_s - t0, u.ratio) for u in units if u.ratio))]
    levels = [
        svg.Series(
            "baseline",
            tuple((u.baseline_span[0] - t0, u.baseline_level_us / 1000.0)
                  for u in units if u.baseline_level_us),
        ),
        svg.Series(
            "candidate",
            tuple((u.candidate_span[0] - t0, u.candidate_level_us / 1000.0)
                  for u in units if u.candidate_level_us),
        ),
    ]  # fmt: skip
    spans = [(e.start_s - t0, e.end_s - t0, e.side.value) for e in report.replication.episodes]
    shaded = "; shaded: drift episodes" if spans else ""
    kind = report.replication.unit
    return [
        svg.chart(
            f"{tag}Median per-pair E2E ratio of each {kind} over time{shaded}",
            ratio,
            x_label=f"seconds since the first {kind} started",
            y_label="E2E ratio (candidate/baseline)",
            hline=1.0,
            spans=[(a, b, "E2E ratio") for a, b, _ in spans],
        ),
        svg.chart(
            f"{tag}Median TPOT per {kind}{shaded}",
            levels,
            x_label=f"seconds since the first {kind} started",
            y_label="ms",
            spans=spans,
        ),
    ]


def figures(report: Report) -> dict[str, list[str]]:
    """SVG figures by the key of the section they illustrate."""
    tag = f"{SIMULATED_LABEL} " if report.simulated else ""
    return {
        "paired": paired_figures(report, tag),
        "sides": [
            *latency_figures(report, tag),
            load_figure(report, tag),
            timeline_figure(report, tag),
        ],
        "acceptance": acceptance_figures(report, tag),
        "replication": replication_figures(report, tag),
    }
