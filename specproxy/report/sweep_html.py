"""The sweep's report as one self-contained HTML page (inline CSS and SVG, no script).

Figures, each with one curve per setting value: the E2E and the TPOT ratio against load
with the per-level 95% interval bars, the line ratio = 1 and each value's crossover
estimate marked; the candidate's accept length against load; output tokens/s and
goodput against load for both sides. Then the per-level tables and the recommendation.
"""

from __future__ import annotations

import html
from typing import Any

from specproxy.report import svg
from specproxy.report.model import SIMULATED_LABEL
from specproxy.report.sweep_capacity import capacity_figures, capacity_lines
from specproxy.report.sweep_report import (
    HEADERS,
    crossover_text,
    header_lines,
    level_row,
    recommendation_line,
    setting_head,
    title,
)
from specproxy.report.sweep_schedule import schedule_html

_CSS = """
body{font-family:sans-serif;max-width:1100px;margin:1em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:left;font-size:13px}.banner{background:#fff3cd;border:2px solid #c98a14;
padding:.5em 1em;font-weight:bold}.figs{display:flex;flex-wrap:wrap;gap:8px}
svg{border:1px solid #eee;max-width:100%;height:auto}
"""
_X = {"concurrency": "concurrency (requests in flight)", "rate": "arrival rate (requests/s)"}


def _entries(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in doc["settings"] if e.get("levels")]


def _ratio_figure(doc: dict[str, Any], metric: str) -> str:
    series, bands, marks = [], [], []
    for entry in _entries(doc):
        name = str(entry["label"])
        levels = entry["levels"]
        pts = tuple((lv["level"], lv[f"{metric}_ratio"]) for lv in levels if lv[f"{metric}_ratio"])
        series.append(svg.Series(name, pts))
        bars = tuple((lv["level"], *lv[f"{metric}_ci"]) for lv in levels if lv[f"{metric}_ci"])
        bands.append(svg.Band(name, bars))
        cross = (entry.get("crossovers") or {}).get(metric) or {}
        if cross.get("estimate") is not None:
            marks.append((cross["estimate"], f"{cross['estimate']:.3g}"))
    return svg.chart(
        f"{metric.upper()} ratio candidate/baseline vs load (95% intervals)", series,
        x_label=_X[doc.get("kind", "concurrency")], y_label="ratio (< 1: candidate faster)",
        log_x=True, hline=1.0, bands=bands, vlines=marks,
    )  # fmt: skip


def _per_side(doc: dict[str, Any], field: str, heading: str, y_label: str) -> str:
    series = []
    single = len(_entries(doc)) == 1
    for entry in _entries(doc):
        for side in ("baseline", "candidate"):
            if side == "baseline" and not single and entry is not _entries(doc)[0]:
                continue  # one baseline curve: the baseline does not change between values
            pts = tuple(
                (lv["level"], v)
                for lv in entry["levels"]
                if (v := (lv.get(field) or {}).get(side)) is not None
            )
            name = side if single or side == "baseline" else f"{entry['label']}"
            series.append(svg.Series(name, pts))
    x_label = _X[doc.get("kind", "concurrency")]
    return svg.chart(heading, series, x_label=x_label, y_label=y_label, log_x=True)


def _acceptance_figure(doc: dict[str, Any]) -> str:
    series = [
        svg.Series(
            str(e["label"]),
            tuple((lv["level"], lv["accept_length"]) for lv in e["levels"] if lv["accept_length"]),
        )
        for e in _entries(doc)
    ]
    return svg.chart(
        "candidate accept length vs load", series, x_label=_X[doc.get("kind", "concurrency")],
        y_label="tokens per verify step", log_x=True,
    )  # fmt: skip


def _table(rows: list[tuple[str, ...]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figures(doc: dict[str, Any]) -> list[str]:
    figs = [*capacity_figures(doc, _X[doc.get("kind", "concurrency")])]
    figs += [_ratio_figure(doc, "e2e"), _ratio_figure(doc, "tpot"), _acceptance_figure(doc)]
    figs.append(_per_side(doc, "output_tokens_per_s", "output tokens/s vs load", "tokens/s"))
    if doc.get("slo"):
        figs.append(_per_side(doc, "goodput_per_s", "goodput vs load (requests/s within the SLO)",
                              "good requests/s"))  # fmt: skip
    return figs


def _crossover_lines(doc: dict[str, Any]) -> list[str]:
    """Per setting value: its E2E and TPOT crossover, one paragraph each."""
    kind = doc.get("kind", "concurrency")
    out = []
    for entry in doc["settings"]:
        cross = entry.get("crossovers") or {}
        for metric in ("e2e", "tpot"):
            line = f"{metric.upper()} crossover: {crossover_text(cross.get(metric), kind)}"
            who = f"{entry.get('label')}: " if len(doc["settings"]) > 1 else ""
            out.append(f'<p class="crossover">{html.escape(who + line)}</p>')
    return out


def render_sweep_html(doc: dict[str, Any]) -> str:
    """The whole sweep report as one HTML page."""
    heading = title(doc)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(heading)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(heading)}</h1>",
    ]
    if doc.get("simulated"):
        out.append(f'<p class="banner">{SIMULATED_LABEL}: simulated servers, not measurements</p>')
    out += [f'<p class="capacity"><b>{html.escape(line)}</b></p>' for line in capacity_lines(doc)]
    out.append(f'<p class="banner">{html.escape(recommendation_line(doc))}</p>')
    out += [f"<p>{html.escape(line)}</p>" for line in header_lines(doc)]
    out += _crossover_lines(doc)  # the answer before the figures that show it
    out.append('<div class="figs">' + "".join(_figures(doc)) + "</div>")
    out.append(schedule_html(doc))
    for entry in doc["settings"]:
        out.append(f"<h2>{html.escape(setting_head(entry))}</h2>")
        if entry.get("levels"):
            out.append(_table([level_row(lv) for lv in entry["levels"]]))
    if doc.get("simulated"):
        out.append(f'<p class="banner">{SIMULATED_LABEL}</p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
