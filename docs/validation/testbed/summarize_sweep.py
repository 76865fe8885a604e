# ruff: noqa: T201
# (a report script: it prints where it wrote)
"""Summarise the second run: `specproxy sweep` against bench_serving, level by level.

usage: python3 summarize_sweep.py RUN2_DIR RUN1_DIR [--summary summary.json] [--readme README.md]
                                  [--margin 0.02]

RUN2_DIR holds what the second run_testbed.sh call returned (the sweep in records.tar.gz under
sweep-standalone/, bench_serving lines at 2, 8 and 32 streams in results.jsonl); RUN1_DIR the
first run's (bench_serving lines at 1, 4, 16 and 64 streams). Per level: the sweep's verdict,
paired E2E and TPOT ratios with their 95% intervals, pairs and accept length; bench_serving's
per-rep ratio of median E2E (candidate / baseline), each rep's direction under the same margin,
whether the reps agree, and whether the sweep's verdict agrees with them. Then the crossover the
sweep found (E2E and TPOT, with interval) next to bench_serving's (mean of reps, levels whose
reps agree). Writes the "sweep" key of summary.json (other keys are kept), the README section
between the `sweep` markers, and copies the sweep's report.html into RUN2_DIR.
"""

import argparse
import json
import shutil
import statistics
import tarfile
import tempfile
from pathlib import Path

from summarize import agreement, bench_facts, crossover

HERE = Path(__file__).resolve().parent
START, END = "<!-- sweep:start -->", "<!-- sweep:end -->"
SWEEP = "sweep-standalone"


def bench_rows(results_dir: Path, candidate: str) -> dict[int, list[dict]]:
    with (results_dir / "results.jsonl").open() as f:
        rows = [json.loads(x) for x in f if x.strip()]
    out: dict[int, list[dict]] = {}
    for r in rows:
        if r.get("kind") == "bench" and r.get("candidate") == candidate:
            out.setdefault(int(r["level"]), []).append(r)
    return out


def _round(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(x, nd)


def sweep_level(lv: dict) -> dict:
    return {
        "verdict": lv["verdict"],
        "pairs": lv["pairs"],
        "e2e_ratio": _round(lv["e2e_ratio"]),
        "e2e_ratio_95": [_round(x) for x in lv["e2e_ci"]],
        "tpot_ratio": _round(lv["tpot_ratio"]),
        "tpot_ratio_95": [_round(x) for x in lv["tpot_ci"]],
        "accept_length": _round(lv["accept_length"], 3),
    }


def levels(sweep: dict, runs: list[tuple[str, dict[int, list[dict]]]], margin: float) -> list[dict]:
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
            row["bench_mean"] = round(statistics.fmean(facts["bench_ratios"]), 4)
            dirs = facts["bench_directions"]
            row["agreement"] = agreement(lv["verdict"], dirs, facts["bench_reps_agree"])
        out.append(row)
    return out


def _crossing(x: dict) -> dict:
    ci = x.get("ci")
    return {
        "status": x["status"],
        "estimate": _round(x.get("estimate"), 2),
        "ci": [round(v, 2) for v in ci] if ci else None,
        "detail": x.get("detail"),
    }


def summarize(run2: Path, run1: Path, margin: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(run2 / "records.tar.gz") as t:
        t.extractall(tmp, filter="data")
        folder = Path(tmp) / SWEEP
        sweep = json.loads((folder / "sweep.json").read_text())
        shutil.copy(folder / "report.html", run2 / "sweep-report.html")
    runs = [
        (run2.name, bench_rows(run2, "standalone")),
        (run1.name, bench_rows(run1, "standalone")),
    ]
    rows = levels(sweep, runs, margin)
    xo = sweep["settings"][0]["crossovers"]
    return {
        "results_dir": run2.name,
        "status": sweep["status"],
        "ladder": [int(x) for x in sweep["ladder"]],
        "pairs_max": sweep["pairs_max"],
        "block_size": sweep["block_size"],
        "margin": margin,
        "levels": rows,
        "crossover_sweep": {"e2e": _crossing(xo["e2e"]), "tpot": _crossing(xo["tpot"])},
        "crossover_bench_serving": crossover(rows, "bench_mean", consistent_only=True),
    }


def _iv(x: float, iv: list[float]) -> str:
    return f"{x:.3f} [{iv[0]:.3f}, {iv[1]:.3f}]"


def table(s: dict) -> list[str]:
    lines = [
        "| streams | sweep verdict | pairs | E2E ratio [95%] | TPOT ratio [95%] | accept length "
        "| bench_serving ratio per rep (ABAB) | from | reps agree | agreement |",
        "|---:|---|---:|---|---|---:|---|---|---|---|",
    ]
    for x in s["levels"]:
        reps = " / ".join(f"{r:.3f}" for r in x.get("bench_ratios", [])) or "–"
        agree = {True: "yes", False: "no", None: "–"}[x.get("bench_reps_agree")]
        lines.append(
            f"| {x['level']} | {x['verdict']} | {x['pairs']} | {_iv(x['e2e_ratio'], x['e2e_ratio_95'])} "
            f"| {_iv(x['tpot_ratio'], x['tpot_ratio_95'])} | {x['accept_length']:.2f} | {reps} "
            f"| {'run 2' if x.get('bench_run') == s['results_dir'] else 'run 1'} | {agree} "
            f"| {x.get('agreement', 'no ground truth')} |"
        )
    return lines


def section(s: dict) -> str:
    xo = s["crossover_sweep"]
    sweep_xo = "; ".join(
        f"{m.upper()} ~{xo[m]['estimate']} streams [{xo[m]['ci'][0]}, {xo[m]['ci'][1]}]"
        for m in ("e2e", "tpot")
        if xo[m].get("estimate") is not None
    )
    return "\n".join(
        [
            START,
            f"Written by `summarize_sweep.py` from `{s['results_dir']}/` (sweep status {s['status']}, "
            f"at most {s['pairs_max']} pairs a level, --block-size {s['block_size']}).",
            "",
            *table(s),
            "",
            f"- crossover: sweep {sweep_xo or 'none'}; bench_serving (mean of reps, levels whose reps "
            f"agree) {s['crossover_bench_serving']}.",
            END,
        ]
    )


def write_readme(readme: Path, text_section: str) -> None:
    text = readme.read_text()
    if START in text and END in text:
        text = text[: text.index(START)] + text_section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + text_section + "\n"
    readme.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run2_dir", type=Path)
    ap.add_argument("run1_dir", type=Path)
    ap.add_argument("--summary", type=Path, default=HERE / "summary.json")
    ap.add_argument("--readme", type=Path, default=HERE / "README.md")
    ap.add_argument("--margin", type=float, default=0.02)
    a = ap.parse_args()
    for d in (a.run2_dir, a.run1_dir):
        if not (d / "results.jsonl").is_file():
            ap.error(f"{d}: no results.jsonl (give a folder run_testbed.sh filled)")
    s = summarize(a.run2_dir, a.run1_dir, a.margin)
    summary = json.loads(a.summary.read_text()) if a.summary.is_file() else {}
    summary["sweep"] = s
    a.summary.write_text(json.dumps(summary, indent=1) + "\n")
    write_readme(a.readme, section(s))
    print(f"wrote the sweep to {a.summary} and the sweep section of {a.readme}")


if __name__ == "__main__":
    main()
