"""The capacity answer that heads the sweep report (text, Markdown, HTML and the demo),
rendered from ``sweep.json``'s ``capacity`` object alone (``sweep.capacity``)."""

from __future__ import annotations

from typing import Any

from specproxy.report import svg

SIDE_NAMES = {"candidate": "with speculation", "baseline": "without"}


def _bound(value: float | None, low: bool) -> str:
    if value is None and not low:
        return "beyond the top level"
    if value == 0.0 and low:
        return "below the lowest level"
    return "-" if value is None else f"{value:.3g}"


def _edge(levels: list[dict[str, Any]], side: str, key: str, top: bool) -> float | None:
    if not levels:
        return None
    lv = levels[-1] if top else levels[0]
    return lv["load"] if key == "load" else (lv.get("requests_per_s") or {}).get(side)


def estimate_text(
    est: dict[str, Any] | None, levels: list[dict[str, Any]], side: str, key: str
) -> str:
    """``"4.8 [4.6, 5.0]"``; an open end says which end of the ladder it passed."""
    if not est or est.get("status") == "unknown":
        return "unknown"
    status, ci = est.get("status"), est.get("ci")
    span = ""
    if ci:
        span = f" [{_bound(ci[0], True)}, {_bound(ci[1], False)}]"
    if status == "above_top":
        edge = _edge(levels, side, key, top=True)
        return (
            f">= {edge:.3g} (holds at the top level){span}"
            if edge
            else f"above the top level{span}"
        )
    if status == "below_lowest":
        edge = _edge(levels, side, key, top=False)
        return (
            f"< {edge:.3g} (fails at the lowest level){span}" if edge else "below the lowest level"
        )
    return f"{est['estimate']:.3g}{span}"


def _ratio_text(est: dict[str, Any] | None) -> str:
    if not est or est.get("estimate") is None:
        return "ratio undefined: both capacities lie past the same end of the ladder"
    ci = est.get("ci")
    span = ""
    if ci:
        high = "inf" if ci[1] is None else f"{ci[1]:.3f}"
        span = f" [{ci[0]:.3f}, {high}]"
    return f"ratio {est['estimate']:.3f}{span}"


def capacity_lines(doc: dict[str, Any]) -> list[str]:
    """The headline (and, on a concurrency ladder, the capacity in streams); empty when the
    sweep had no percentile bound."""
    cap = doc.get("capacity")
    if not cap:
        return []
    levels = cap.get("levels") or []
    slo = cap.get("slo_text") or "?"
    if cap.get("candidate") is None or cap.get("baseline") is None:
        return [f"capacity within your SLO ({slo}): not estimated (no level finished)"]
    served = {s: estimate_text(cap[s]["requests_per_s"], levels, s, "rate") for s in SIDE_NAMES}
    out = [
        f"within your SLO ({slo}), one GPU serves {served['candidate']} requests/s with"
        f" speculation and {served['baseline']} without ({_ratio_text(cap.get('ratio'))};"
        " 95% intervals)"
    ]
    if cap.get("kind") == "concurrency":
        load = {s: estimate_text(cap[s]["load"], levels, s, "load") for s in SIDE_NAMES}
        out.append(
            f"highest concurrency within the SLO: {load['candidate']} streams with speculation,"
            f" {load['baseline']} without ({_ratio_text(cap.get('load_ratio'))})"
        )
    return out


def capacity_figures(doc: dict[str, Any], x_label: str) -> list[str]:
    """Per bound: each side's percentile against load, the bound as a line and each side's
    capacity estimate marked (HTML)."""
    cap = doc.get("capacity") or {}
    levels = cap.get("levels") or []
    out = []
    for bound in cap.get("slo") or []:
        series = []
        for side in SIDE_NAMES:
            pts = tuple(
                (lv["load"], v)
                for lv in levels
                if (v := ((lv.get("percentiles_ms") or {}).get(side) or {}).get(bound["key"]))
                is not None
            )
            series.append(svg.Series(side, pts))
        marks = []
        for side in SIDE_NAMES:
            est = ((cap.get(side) or {}).get("load") or {}).get("estimate")
            if est is not None and est > 0:
                marks.append((est, f"{side} {est:.3g}"))
        out.append(svg.chart(
            f"p{bound['percentile']:g} {bound['metric'].upper()} vs load; the SLO's bound and"
            " each side's capacity", series, x_label=x_label, y_label="ms", log_x=True,
            hline=bound["limit_ms"], vlines=marks,
        ))  # fmt: skip
    return out
