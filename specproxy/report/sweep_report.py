"""The sweep's one-page report (text, Markdown), rendered from ``DIR/sweep.json`` alone.

Reads one file (``sweep.json``, written by ``specproxy sweep``); everything shown is in
it: per setting value, the per-level table (verdict, paired E2E and TPOT ratios with
their 95% intervals, pairs, accept length, failures, throughput and goodput per side),
the E2E and TPOT crossovers, and the recommendation with the reason it is or is not
given. ``render_sweep_html`` (``report.sweep_html``) draws the same page with figures.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specproxy.errors import ConfigError
from specproxy.report import fmt
from specproxy.report.model import SIMULATED_LABEL
from specproxy.report.sweep_capacity import capacity_lines
from specproxy.report.sweep_schedule import schedule_md, schedule_text

SWEEP_FILE = "sweep.json"
UNITS = {"concurrency": "concurrent streams", "rate": "requests/s"}
HEADERS = ("level", "verdict", "pairs", "block pairs", "E2E ratio [95% CI]",
           "ratio of medians [95% CI]", "TPOT ratio [95% CI]", "accept len", "failed b/c",
           "tok/s b/c", "goodput/s b/c", "drift")  # fmt: skip


def is_sweep_dir(path: str | Path) -> bool:
    return (Path(path) / SWEEP_FILE).is_file()


def load_sweep(path: str | Path) -> dict[str, Any]:
    """``DIR/sweep.json``; ConfigError naming the file when it is missing or unreadable."""
    file = Path(path) / SWEEP_FILE
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read: {exc.strerror}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file}:{exc.lineno}: not valid JSON: {exc.msg}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("settings"), list):
        raise ConfigError(f"{file}: not a sweep log (no settings list)")
    return doc


def _num(value: Any, fmt: str = ".3f") -> str:
    return "-" if value is None else format(value, fmt)


def _ratio(point: Any, ci: Any) -> str:
    if point is None:
        return "-"
    return f"{point:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else f"{point:.3f}"


def _pair(values: Any, fmt: str = ".1f") -> str:
    values = values or {}
    return f"{_num(values.get('baseline'), fmt)} / {_num(values.get('candidate'), fmt)}"


def _verdict(lv: dict[str, Any]) -> str:
    """``inconclusive (fewer than 6 block pairs (4))``: an inconclusive level says why."""
    short = lv.get("verdict_short")
    return f"{lv['verdict']} ({short})" if short else str(lv["verdict"])


def _activity(lv: dict[str, Any]) -> str:
    """The tok/s cell's note when a side's rate rests on little activity (``fmt.activity``)."""
    active = [v for v in (lv.get("active_s") or {}).values() if v is not None]
    return fmt.activity(min(active)) if active else ""


def level_row(lv: dict[str, Any]) -> tuple[str, ...]:
    return (
        f"{lv['level']:g}", _verdict(lv), str(lv["pairs"]), str(lv.get("units", "-")),
        _ratio(lv.get("e2e_ratio"), lv.get("e2e_ci")),
        _ratio(lv.get("e2e_medians_ratio"), lv.get("e2e_medians_ci")),
        _ratio(lv.get("tpot_ratio"), lv.get("tpot_ci")),
        _num(lv.get("accept_length"), ".2f"), _pair(lv.get("failures"), "d"),
        _pair(lv.get("output_tokens_per_s")) + _activity(lv),
        _pair(lv.get("goodput_per_s"), ".2f"),
        "; ".join(lv.get("drift") or ()) or "-",
    )  # fmt: skip


def crossover_text(c: dict[str, Any] | None, kind: str) -> str:
    """One line: the estimate with its interval, or what was found instead of a crossing."""
    if c is None:
        return "none (no level finished)"
    status, ci, unit = c.get("status"), c.get("ci"), UNITS.get(kind, "")
    span = ""
    if ci:
        low = "below the ladder" if ci[0] == 0 else f"{ci[0]:.3g}"
        high = "beyond the ladder" if ci[1] is None or math.isinf(ci[1]) else f"{ci[1]:.3g}"
        span = f" (95% interval {low} to {high})"
    if status == "crossed":
        return f"~{c['estimate']:.3g} {unit}{span}"
    label = {"pays_everywhere": "pays everywhere tested", "pays_nowhere": "pays nowhere tested"}
    return f"{label.get(str(status), 'undetermined')}{span}"


def header_lines(doc: dict[str, Any]) -> list[str]:
    kind = doc.get("kind", "concurrency")
    ladder = ", ".join(f"{v:g}" for v in doc.get("ladder", []))
    slo = doc.get("slo") or {}
    slo_text = ", ".join(f"{k}={v:g}" for k, v in slo.items() if v) or "none given"
    return [
        f"status: {doc.get('status')}; {kind} ladder: {ladder}",
        f"order: {doc.get('order')}",
        f"stopping rule: {doc.get('stopping_rule')}; at most {doc.get('pairs_max')} pairs a level",
        f"goodput SLO: {slo_text}",
        "ratios are candidate/baseline medians of per-pair ratios (< 1: the candidate is faster)",
    ]


def recommendation_line(doc: dict[str, Any]) -> str:
    text = doc.get("recommendation")
    if text:
        return f"recommendation: {text}"
    return f"recommendation: none ({doc.get('recommendation_reason')})"


def title(doc: dict[str, Any]) -> str:
    sim = "[SIMULATED] " if doc.get("simulated") else ""
    return f"{sim}specproxy sweep: where speculation stops paying"


def setting_head(entry: dict[str, Any]) -> str:
    head = f"{entry.get('label')}: {entry.get('status')}"
    return head + (f" - {entry['error']}" if entry.get("error") else "")


def _table_text(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def render_sweep_text(doc: dict[str, Any]) -> str:
    kind = doc.get("kind", "concurrency")
    capacity = capacity_lines(doc)
    out = [title(doc), "", *capacity, *([""] if capacity else []), *header_lines(doc), ""]
    out += schedule_text(doc)
    for entry in doc["settings"]:
        out.append(setting_head(entry))
        cross = entry.get("crossovers") or {}
        out.extend(
            f"  {m.upper()} crossover: {crossover_text(cross.get(m), kind)}"
            for m in ("e2e", "tpot")
        )
        if entry.get("levels"):
            rows = [HEADERS, *(level_row(lv) for lv in entry["levels"])]
            out += ["  " + line for line in _table_text(rows)]
        out.append("")
    out.append(recommendation_line(doc))
    if doc.get("simulated"):
        out.append(SIMULATED_LABEL)
    return "\n".join(out) + "\n"


def render_sweep_md(doc: dict[str, Any]) -> str:
    kind = doc.get("kind", "concurrency")
    out = [f"# {title(doc)}", ""]
    out += [*(f"**{line}**  " for line in capacity_lines(doc)), ""] if doc.get("capacity") else []
    out += [*(f"- {line}" for line in header_lines(doc)), ""]
    out += schedule_md(doc)
    for entry in doc["settings"]:
        out += [f"## {setting_head(entry)}", ""]
        cross = entry.get("crossovers") or {}
        for metric in ("e2e", "tpot"):
            out.append(f"- {metric.upper()} crossover: {crossover_text(cross.get(metric), kind)}")
        out.append("")
        if entry.get("levels"):
            out.append("| " + " | ".join(HEADERS) + " |")
            out.append("|" + "---|" * len(HEADERS))
            out += ["| " + " | ".join(level_row(lv)) + " |" for lv in entry["levels"]]
            out.append("")
    out += [f"**{recommendation_line(doc)}**", ""]
    if doc.get("simulated"):
        out.append(f"**{SIMULATED_LABEL}**")
    return "\n".join(out) + "\n"
