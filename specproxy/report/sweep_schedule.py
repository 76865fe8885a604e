"""The sweep report's "best setting at each load" section (text, Markdown, HTML with a plot).

Rendered from ``sweep.json``'s ``best_settings`` and ``schedule`` (written by a setting sweep,
``sweep.schedule``); a load sweep has neither and gets no section. One table per metric
(E2E decides the schedule; TPOT is shown beside it), the schedule files and what SGLang's
adaptive config cannot express, and the adaptive run's outcome.
"""

from __future__ import annotations

import html
from typing import Any

from specproxy.report import svg

HEADERS = ("level", "best", "ratio vs baseline [95% CI]", "runner-up",
           "runner-up ratio [95% CI]", "best / runner-up [95% CI]", "told apart")  # fmt: skip
ADAPTIVE_HEADERS = ("adaptive ratio [95% CI]", "adaptive / best [95% CI]", "adaptive vs best")


def _ci(fig: dict[str, Any] | None) -> str:
    if fig is None:
        return "-"
    ci = fig.get("ci") or [None, None]
    high = "inf" if ci[1] is None else f"{ci[1]:.3f}"
    low = "-" if ci[0] is None else f"{ci[0]:.3f}"
    return f"{fig['ratio']:.3f} [{low}, {high}]"


def _says(c: dict[str, Any] | None) -> str:
    return "-" if c is None else str(c["says"])


def _with_adaptive(doc: dict[str, Any]) -> bool:
    return bool((doc.get("best_settings") or {}).get("adaptive_run"))


def row(r: dict[str, Any], adaptive: bool) -> tuple[str, ...]:
    shown = r["best"] or r["nearest"]
    best = r["chosen"] if r["best"] else (
        f"off (nearest: {r['nearest']['label']})" if r["nearest"] else "off"
    )  # fmt: skip
    out: tuple[str, ...] = (f"{r['level']:g}", best, _ci(shown), r["runner_up"]["label"] if r["runner_up"] else "-",
           _ci(r["runner_up"]), _ci(r["vs_runner_up"]), _says(r["vs_runner_up"]))  # fmt: skip
    if adaptive:
        out += (_ci(r["adaptive"]), _ci(r["adaptive_vs_best"]), _says(r["adaptive_vs_best"]))
    return out


def tables(doc: dict[str, Any]) -> list[tuple[str, list[tuple[str, ...]]]]:
    """``(heading, rows)`` per metric, header row first; empty without ``best_settings``."""
    best = doc.get("best_settings")
    if not best:
        return []
    adaptive = _with_adaptive(doc)
    head = HEADERS + (ADAPTIVE_HEADERS if adaptive else ())
    out = []
    for metric in ("e2e", "tpot"):
        decides = " (decides the schedule)" if metric == best.get("decides") else ""
        heading = f"best setting by the median per-pair {metric.upper()} ratio{decides}"
        out.append((heading, [head, *(row(r, adaptive) for r in best[metric]["levels"])]))
    return out


def notes(doc: dict[str, Any]) -> list[str]:
    """The rule, the comparison, the files written and what they cannot express."""
    best, sched = doc.get("best_settings") or {}, doc.get("schedule") or {}
    if not best:
        return []
    out = [f"rule: {best['e2e']['rule']}", f"comparison: {best['compare']}"]
    plan = sched.get("schedule") or {}
    if plan:
        steps = "; ".join(
            f"{level}: {v if isinstance(v, str) else ','.join(f'{k}={x}' for k, x in v.items())}"
            for level, v in sorted(plan.items(), key=lambda kv: float(kv[0]))
        )
        out.append(f"schedule ({sched.get('file')}): {steps}")
    config = sched.get("adaptive_config") or {}
    if config:
        ranges = "; ".join(f"batch {k}+: steps {v['candidate_steps']}"
                           for k, v in sorted(config.items(), key=lambda kv: int(kv[0])))  # fmt: skip
        out.append(f"as --speculative-adaptive-config ({sched['adaptive_config_file']}, for"
                   f" {sched.get('adaptive_config_applies_to')}): {ranges}")  # fmt: skip
    out += [f"not expressed in the adaptive config: {m}" for m in sched.get("not_expressed", [])]
    run = best.get("adaptive_run")
    if run and run.get("status") != "completed":
        error = (run.get("error") or "").strip().splitlines()
        out.append(f"adaptive ({run['label']}): {run.get('status')}"
                   + (f": {error[-1]}" if error else ""))  # fmt: skip
    return out


def _text_table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def schedule_text(doc: dict[str, Any]) -> list[str]:
    """The section as text lines (empty for a load sweep)."""
    out: list[str] = []
    for heading, rows in tables(doc):
        out += [heading, *("  " + line for line in _text_table(rows)), ""]
    if out:
        out += [*notes(doc), ""]
    return out


def schedule_md(doc: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for heading, rows in tables(doc):
        out += [f"## {heading}", "", "| " + " | ".join(rows[0]) + " |",
                "|" + "---|" * len(rows[0])]  # fmt: skip
        out += ["| " + " | ".join(r) + " |" for r in rows[1:]] + [""]
    if out:
        out += [*(f"- {line}" for line in notes(doc)), ""]
    return out


def schedule_figure(doc: dict[str, Any]) -> str:
    """Each level's chosen value (or, where off, the nearest) against the baseline."""
    rows = []
    for r in (doc.get("best_settings") or {}).get("e2e", {}).get("levels", []):
        shown = r["best"] or r["nearest"]
        if shown is None or not shown.get("ci") or shown["ci"][1] is None:
            continue
        name = shown["label"].split("=", 1)[-1] if r["best"] else "off"
        rows.append((f"{r['level']:g}: {name}", shown["ratio"], shown["ci"][0], shown["ci"][1]))
    return svg.intervals(
        "best setting per load: its E2E ratio vs the baseline (95% CI; off: the nearest)",
        rows, x_label="load level: chosen value", y_label="E2E ratio (< 1: faster)",
    )  # fmt: skip


def schedule_html(doc: dict[str, Any]) -> str:
    parts = []
    for heading, rows in tables(doc):
        head = "".join(f"<th>{html.escape(h)}</th>" for h in rows[0])
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>"
                       for r in rows[1:])  # fmt: skip
        parts.append(f"<h2>{html.escape(heading)}</h2><table><thead><tr>{head}</tr></thead>"
                     f"<tbody>{body}</tbody></table>")  # fmt: skip
    if not parts:
        return ""
    parts.insert(0, f'<div class="figs">{schedule_figure(doc)}</div>')
    parts += [f"<p>{html.escape(line)}</p>" for line in notes(doc)]
    return "\n".join(parts)


def _plural(level: float, kind: str) -> str:
    if kind == "rate":
        return f"{level:g} req/s"
    return f"{level:g} stream" + ("" if level == 1 else "s")


def schedule_glance(doc: dict[str, Any]) -> list[str]:
    """A few lines: the best setting per level with its interval, or off (the demo's view)."""
    best = doc.get("best_settings")
    if not best:
        return []
    sim = "SIMULATED; " if doc.get("simulated") else ""
    out = [f"best setting per load ({sim}by the median per-pair E2E ratio, 95% intervals):"]
    kind = str(doc.get("kind", "concurrency"))
    for r in best["e2e"]["levels"]:
        where = _plural(r["level"], kind)
        if r["best"] is None:
            near = r["nearest"]
            tail = f" (nearest {near['label']}: {_ci(near)})" if near else ""
            out.append(f"  {where}: off{tail}")
            continue
        vs = r["vs_runner_up"]
        runner = f"; vs runner-up {_ci(vs)}: {vs['says']}" if vs else ""
        out.append(f"  {where}: {r['chosen']} {_ci(r['best'])}{runner}")
    sched = doc.get("schedule") or {}
    files = [f for f in (sched.get("file"), sched.get("adaptive_config_file")) if f]
    if files:
        out.append(f"  written: {', '.join(files)}")
    return out
