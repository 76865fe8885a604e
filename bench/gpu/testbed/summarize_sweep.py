"""Summarise a run with `specproxy sweep`: the sweep against bench_serving, level by level.

usage: python3 summarize_sweep.py SWEEP_RUN_DIR [BENCH_RUN_DIR ...] [--sweep sweep-standalone]
           [--candidate standalone] [--key sweep] [--marker sweep]
           [--summary summary.json] [--readme README.md] [--margin 0.02]

SWEEP_RUN_DIR holds what a run_testbed.sh call returned (the sweep in records.tar.gz under
--sweep, bench_serving lines in results.jsonl); each BENCH_RUN_DIR another run's bench_serving
lines, used for the levels the first folders lack (the second run: `results-2026-12-01-run2
results-2026-12-01`, bench_serving at 2, 8 and 32 streams from run 2, at 1, 4, 16 and 64 from
run 1). Per level: the sweep's verdict,
paired E2E and TPOT ratios with their 95% intervals, pairs and accept length; bench_serving's
per-rep ratio of median E2E (candidate / baseline), each rep's direction under the same margin,
whether the reps agree, and whether the sweep's verdict agrees with them. Then the crossover the
sweep found (E2E and TPOT, with interval) next to bench_serving's (mean of reps, levels whose
reps agree; the same rule, ``summarize.crossover``), and the proxy overhead when SWEEP_RUN_DIR measured it. Writes the --key entry of
summary.json (other keys are kept) and the README section between the --marker markers, and
copies the sweep's report.html and its E2E plot into SWEEP_RUN_DIR (sweep-report.html,
sweep-e2e-ratio.svg). Whether the sweep sent fresh prompts (--fresh-prompts) is read from its
batches' experiment.json (a batch that skipped trace requests).
"""

import argparse
import json
import re
import shutil
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, under python -P too
from summarize import agreement, bench_facts, crossover, proxy, proxy_table

# the testbed's results, summary.json and README
HERE = Path(__file__).resolve().parents[3] / "docs" / "validation" / "testbed"


def run_label(folder: str) -> str:
    """``results-2026-12-01-run3`` -> ``run 3``; a folder without ``-runN`` is run 1."""
    m = re.search(r"-run(\d+)$", folder)
    return f"run {m.group(1)}" if m else "run 1"


def bench_rows(results_dir: Path, candidate: str) -> dict[int, list[dict[str, Any]]]:
    with (results_dir / "results.jsonl").open() as f:
        rows = [json.loads(x) for x in f if x.strip()]
    out: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("kind") == "bench" and r.get("candidate") == candidate:
            out.setdefault(int(r["level"]), []).append(r)
    return out


def _round(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def sweep_level(lv: dict[str, Any]) -> dict[str, Any]:
    row = {
        "verdict": lv["verdict"],
        "pairs": lv["pairs"],
        "e2e_ratio": _round(lv["e2e_ratio"]),
        "e2e_ratio_95": [_round(x) for x in lv["e2e_ci"]],
        "tpot_ratio": _round(lv["tpot_ratio"]),
        "tpot_ratio_95": [_round(x) for x in lv["tpot_ci"]],
        "accept_length": _round(lv["accept_length"], 3),
    }
    if "units" in lv:  # sweeps whose intervals rest on block pairs
        row["block_pairs"] = lv["units"]
        row["e2e_medians_ratio"] = _round(lv.get("e2e_medians_ratio"))
        ci = lv.get("e2e_medians_ci")
        row["e2e_medians_ratio_95"] = [_round(x) for x in ci] if ci else None
        row["drift"] = lv.get("drift") or []
    return row


def levels(
    sweep: dict[str, Any], runs: list[tuple[str, dict[int, list[dict[str, Any]]]]], margin: float
) -> list[dict[str, Any]]:
    out = []
    for lv in sweep["settings"][0]["levels"]:
        c = int(lv["level"])
        row = {"level": c, **sweep_level(lv)}
        source = next(((name, rows[c]) for name, rows in runs if c in rows), None)
        if source is not None:
            facts = bench_facts(source[1], margin)
            row["bench_run"] = source[0]
            row.update(
                {k: facts[k] for k in ("bench_ratios", "bench_directions", "bench_reps_agree")}
            )
            row["bench_mean"] = (
                round(statistics.fmean(facts["bench_ratios"]), 4) if facts["bench_ratios"] else None
            )
            row["bench_accept_length_server_info"] = facts["bench_accept_length_server_info"]
            dirs = facts["bench_directions"]
            row["agreement"] = agreement(lv["verdict"], dirs, facts["bench_reps_agree"])
            medians = row.get("e2e_medians_ratio_95")
            if medians and row["bench_mean"] is not None:
                row["medians_interval_holds_bench_mean"] = (
                    medians[0] <= row["bench_mean"] <= medians[1]
                )
        out.append(row)
    return out


def _crossing(x: dict[str, Any]) -> dict[str, Any]:
    ci = x.get("ci")
    return {
        "status": x["status"],
        "estimate": _round(x.get("estimate"), 2),
        "ci": [None if v is None else round(v, 2) for v in ci] if ci else None,
        "detail": x.get("detail"),
    }


def fresh_prompts(folder: Path) -> bool:
    """True when a batch of the sweep skipped trace requests (``--fresh-prompts``)."""
    for exp in folder.glob("*/batch-*/experiment.json"):
        if (json.loads(exp.read_text()).get("workload") or {}).get("skip"):
            return True
    return False


def save_report(folder: Path, dest: Path) -> None:
    """The sweep's report.html and its first plot (E2E ratio against load) into ``dest``."""
    shutil.copy(folder / "report.html", dest / "sweep-report.html")
    page = (folder / "report.html").read_text()
    svg = re.search(r"<svg .*?</svg>", page, re.S)
    if svg:
        plot = svg.group(0).replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)
        (dest / "sweep-e2e-ratio.svg").write_text(plot + "\n")


def still_skipped(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The skipped steps no later call finished (a resumed run appends its ``level_done``)."""
    done = {(r.get("candidate"), r.get("level")) for r in results if r.get("kind") == "level_done"}
    return [
        r
        for r in results
        if r.get("kind") == "skipped" and (r.get("candidate"), r.get("level")) not in done
    ]


def summarize(a: argparse.Namespace) -> dict[str, Any]:
    run = a.sweep_run_dir
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(run / "records.tar.gz") as t:
        t.extractall(tmp, filter="data")
        folder = Path(tmp) / a.sweep
        sweep = json.loads((folder / "sweep.json").read_text())
        fresh = fresh_prompts(folder)
        save_report(folder, run)
    runs = [(d.name, bench_rows(d, a.candidate)) for d in (run, *a.bench_run_dirs)]
    rows = levels(sweep, runs, a.margin)
    xo = sweep["settings"][0]["crossovers"]
    with (run / "results.jsonl").open() as f:
        results = [json.loads(x) for x in f if x.strip()]
    return {
        "results_dir": run.name,
        "candidate": a.candidate,
        "fresh_prompts": fresh,
        "traces": [Path(x).name for x in sweep.get("traces", [])],
        "status": sweep["status"],
        "ladder": [int(x) for x in sweep["ladder"]],
        "pairs_max": sweep["pairs_max"],
        "block_size": sweep["block_size"],
        "margin": a.margin,
        "levels": rows,
        "crossover_sweep": {"e2e": _crossing(xo["e2e"]), "tpot": _crossing(xo["tpot"])},
        "crossover_bench_serving": crossover(rows, "bench_mean", consistent_only=True),
        "proxy_overhead": proxy(results),
        "skipped": still_skipped(results),
    }


def _iv(x: float, iv: list[float]) -> str:
    return f"{x:.3f} [{iv[0]:.3f}, {iv[1]:.3f}]"


def table(s: dict[str, Any]) -> list[str]:
    units = any("block_pairs" in x for x in s["levels"])
    extra_head = " block pairs | ratio of medians [95%] |" if units else ""
    lines = [
        "| streams | sweep verdict | pairs |"
        + extra_head
        + " E2E ratio [95%] | TPOT ratio [95%] | accept length "
        "| bench_serving ratio per rep (ABAB) | from | reps agree | agreement |",
        "|---:|---|---:|" + ("---:|---|" if units else "") + "---|---|---:|---|---|---|---|",
    ]
    for x in s["levels"]:
        reps = " / ".join(f"{r:.3f}" for r in x.get("bench_ratios", [])) or "–"
        agree = {True: "yes", False: "no", None: "–"}[x.get("bench_reps_agree")]
        extra = ""
        if units:
            med = x.get("e2e_medians_ratio_95")
            extra = (
                f" {x.get('block_pairs', '–')} | "
                + (_iv(x["e2e_medians_ratio"], med) if med else "–")
                + " |"
            )
        lines.append(
            f"| {x['level']} | {x['verdict']} | {x['pairs']} |{extra} {_iv(x['e2e_ratio'], x['e2e_ratio_95'])} "
            f"| {_iv(x['tpot_ratio'], x['tpot_ratio_95'])} | {x['accept_length']:.2f} | {reps} "
            f"| {run_label(x['bench_run']) if x.get('bench_run') else '–'} | {agree} "
            f"| {x.get('agreement', 'no ground truth')} |"
        )
    drift = [f"{x['level']} streams: {d}" for x in s["levels"] for d in x.get("drift", [])]
    if drift:
        lines += ["", "Drift episodes: " + "; ".join(drift) + "."]
    return lines


def section(s: dict[str, Any], marker: str) -> str:
    xo = s["crossover_sweep"]
    sweep_xo = "; ".join(
        f"{m.upper()} ~{xo[m]['estimate']} streams [{xo[m]['ci'][0]}, {xo[m]['ci'][1]}]"
        for m in ("e2e", "tpot")
        if xo[m].get("estimate") is not None
    )
    fresh = ", fresh prompts: no prompt sent twice" if s.get("fresh_prompts") else ""
    lines = [
        f"<!-- {marker}:start -->",
        f"Written by `summarize_sweep.py` from `{s['results_dir']}/` ({s.get('candidate', 'standalone')}"
        f", sweep status {s['status']}, at most {s['pairs_max']} pairs a level, --block-size "
        f"{s['block_size']}{fresh}).",
        "",
        *table(s),
        "",
        f"- crossover: sweep: {sweep_xo or (xo['e2e']['detail'] or xo['e2e']['status']).rstrip('.')};"
        f" bench_serving (mean of reps, levels whose reps agree) {s['crossover_bench_serving']}.",
    ]
    if s.get("proxy_overhead"):
        lines += ["", "Proxy overhead, in % of the direct E2E p50:", "", *proxy_table(s)]
    skipped = [f"{x.get('candidate', x.get('step'))}:{x['level']}" for x in s.get("skipped", [])]
    if skipped:
        lines += ["", f"Skipped (deadline or prompts used up): {', '.join(skipped)}."]
    return "\n".join([*lines, f"<!-- {marker}:end -->"])


def write_readme(readme: Path, text_section: str, marker: str) -> None:
    text = readme.read_text()
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    if start in text and end in text:
        text = text[: text.index(start)] + text_section + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip("\n") + "\n\n" + text_section + "\n"
    readme.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sweep_run_dir", type=Path)
    ap.add_argument("bench_run_dirs", type=Path, nargs="*")
    ap.add_argument("--sweep", default="sweep-standalone", help="the sweep's folder in records")
    ap.add_argument("--candidate", default="standalone")
    ap.add_argument("--key", default="sweep", help="summary.json key")
    ap.add_argument("--marker", default="sweep", help="README section markers")
    ap.add_argument("--summary", type=Path, default=HERE / "summary.json")
    ap.add_argument("--readme", type=Path, default=HERE / "README.md")
    ap.add_argument("--margin", type=float, default=0.02)
    a = ap.parse_args()
    for d in (a.sweep_run_dir, *a.bench_run_dirs):
        if not (d / "results.jsonl").is_file():
            ap.error(f"{d}: no results.jsonl (give a folder run_testbed.sh filled)")
    s = summarize(a)
    summary = json.loads(a.summary.read_text()) if a.summary.is_file() else {}
    summary[a.key] = s
    a.summary.write_text(json.dumps(summary, indent=1) + "\n")
    write_readme(a.readme, section(s, a.marker), a.marker)
    print(f"wrote the sweep to {a.summary} and the sweep section of {a.readme}")


if __name__ == "__main__":
    main()
