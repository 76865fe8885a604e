"""The HTML report: one self-contained page (inline CSS and SVG, no script, no address).

Figures: latency CDFs per side (TTFT, E2E, TPOT, per-token ITL), TPOT versus load,
throughput over time, the candidate's acceptance histogram and the E2E speed ratio
versus acceptance. They sit under the document section they illustrate.
"""

from __future__ import annotations

import html

from specproxy.core.model import Role
from specproxy.report import svg
from specproxy.report.document import document
from specproxy.report.model import SIMULATED_LABEL, Report
from specproxy.report.parts import Table

_CSS = """
body{font-family:sans-serif;max-width:1100px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:left;font-size:13px}caption{text-align:left;font-style:italic;padding:2px 0}
.banner{background:#fff3cd;border:2px solid #c98a14;padding:.5em 1em;font-weight:bold}
.figs{display:flex;flex-wrap:wrap;gap:8px}svg{border:1px solid #eee;max-width:100%;height:auto}
"""
_METRIC_TITLES = {
    "ttft_us": "TTFT",
    "e2e_us": "E2E latency",
    "tpot_us": "TPOT (per request)",
    "itl_us": "per-token latency (chunk gap / tokens)",
}


def _table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    caption = f"<caption>{html.escape(table.caption)}</caption>" if table.caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cdf_figures(report: Report, tag: str) -> list[str]:
    figs = []
    for metric, title in _METRIC_TITLES.items():
        series = [
            svg.Series(c.side.value, tuple((x / 1000.0, y) for x, y in c.points), "step")
            for c in report.plots.cdfs
            if c.metric == metric
        ]
        if series:
            figs.append(
                svg.chart(
                    f"{tag}CDF: {title}",
                    series,
                    x_label="ms (log scale)",
                    y_label="fraction",
                    log_x=True,
                )
            )
    return figs


def _load_figure(report: Report, tag: str) -> str:
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


def _timeline_figure(report: Report, tag: str) -> str:
    tl = report.plots.timeline
    series = [
        svg.Series(side.value, tuple((w.start_s, w.output_tokens / tl.window_s) for w in windows))
        for side, windows in tl.sides
    ]
    return svg.chart(
        f"{tag}Output tokens/s over time ({tl.window_s:g} s windows)",
        series,
        x_label="seconds since first send",
        y_label="tokens/s",
    )


def _acceptance_figures(report: Report, tag: str) -> list[str]:
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
    return figs


def _figures(report: Report) -> dict[str, list[str]]:
    tag = f"{SIMULATED_LABEL} " if report.simulated else ""
    return {
        "sides": [
            *_cdf_figures(report, tag),
            _load_figure(report, tag),
            _timeline_figure(report, tag),
        ],
        "acceptance": _acceptance_figures(report, tag),
    }


def render_html(report: Report) -> str:
    """The whole report as one HTML page."""
    title, banner, sections = document(report)
    figures = _figures(report)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    out += [f'<p class="banner">{html.escape(b)}</p>' for b in banner]
    for section in sections:
        out.append(f'<h2 id="{section.key}">{html.escape(section.title)}</h2>')
        for block in section.blocks:
            out.append(
                _table(block) if isinstance(block, Table) else f"<p>{html.escape(block)}</p>"
            )
        if figures.get(section.key):
            out.append('<div class="figs">' + "".join(figures[section.key]) + "</div>")
    if report.simulated:
        out.append(f'<p class="banner">{SIMULATED_LABEL}</p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
