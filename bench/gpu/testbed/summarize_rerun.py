"""Compare two sweeps of the same pair on fresh server instances: a rerun pair.

usage: python3 summarize_rerun.py KEY_A KEY_B --key rerun_nextn [--marker rerun-nextn]
           [--summary summary.json] [--readme README.md]

KEY_A and KEY_B are entries of summary.json that ``summarize_sweep.py`` wrote, one per run
(same pair, prompts and ladder; each run on servers started afresh, with bench_serving beside
it). Per level, for the median per-pair E2E ratio and for the ratio of medians: whether the two
runs' 95% intervals overlap, and whether each run's point estimate lies inside the other run's
interval; per run, whether the ratio of medians' interval holds bench_serving's mean ratio at
the levels where bench_serving's reps agree. Then the three rerun criteria, each with its count:
intervals overlap at every level; each run's point inside the other's interval at no fewer than
80% of levels; the medians' interval holds bench_serving's mean wherever its reps agree. Writes
the --key entry of summary.json (other keys are kept) and the README section between the
--marker markers.
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, under python -P too
from summarize_sweep import HERE, write_readme

FIGURES = (("e2e_ratio", "e2e_ratio_95"), ("e2e_medians_ratio", "e2e_medians_ratio_95"))


def inside(x: float | None, iv: list[float] | None) -> bool | None:
    if x is None or not iv:
        return None
    return iv[0] <= x <= iv[1]


def overlap(a: list[float] | None, b: list[float] | None) -> bool | None:
    if not a or not b:
        return None
    return max(a[0], b[0]) <= min(a[1], b[1])


def level_row(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"level": a["level"]}
    for point, iv in FIGURES:
        row[point] = [a.get(point), b.get(point)]
        row[iv] = [a.get(iv), b.get(iv)]
        row[f"{point}_overlap"] = overlap(a.get(iv), b.get(iv))
        row[f"{point}_a_in_b"] = inside(a.get(point), b.get(iv))
        row[f"{point}_b_in_a"] = inside(b.get(point), a.get(iv))
    row["verdicts"] = [a.get("verdict"), b.get("verdict")]
    row["block_pairs"] = [a.get("block_pairs"), b.get("block_pairs")]
    row["bench_means"] = [a.get("bench_mean"), b.get("bench_mean")]
    row["bench_reps_agree"] = [a.get("bench_reps_agree"), b.get("bench_reps_agree")]
    row["medians_interval_holds_bench_mean"] = [
        a.get("medians_interval_holds_bench_mean"),
        b.get("medians_interval_holds_bench_mean"),
    ]
    row["accept_length"] = [a.get("accept_length"), b.get("accept_length")]
    return row


def count(rows: list[dict[str, Any]], key: str, index: int | None = None) -> list[int]:
    """[met, judged] over the rows whose ``key`` (or its ``index``-th item) is not None."""
    vals = [r[key] if index is None else r[key][index] for r in rows]
    judged = [v for v in vals if v is not None]
    return [sum(1 for v in judged if v), len(judged)]


def criteria(rows: list[dict[str, Any]]) -> dict[str, Any]:
    overl = count(rows, "e2e_ratio_overlap")
    a_in_b, b_in_a = count(rows, "e2e_ratio_a_in_b"), count(rows, "e2e_ratio_b_in_a")
    bench = []
    for i in (0, 1):
        agreeing = [r for r in rows if r["bench_reps_agree"][i]]
        bench.append(count(agreeing, "medians_interval_holds_bench_mean", i))
    return {
        "intervals_overlap_every_level": {"met": overl[0] == overl[1] > 0, "count": overl},
        "points_inside_other_80pct": {
            "met": all(c[1] > 0 and c[0] >= 0.8 * c[1] for c in (a_in_b, b_in_a)),
            "run_a_in_b": a_in_b,
            "run_b_in_a": b_in_a,
        },
        "medians_interval_holds_bench_mean": {
            "met": all(c[1] > 0 and c[0] == c[1] for c in bench),
            "run_a": bench[0],
            "run_b": bench[1],
        },
    }


def summarize(summary: dict[str, Any], key_a: str, key_b: str) -> dict[str, Any]:
    a, b = summary[key_a], summary[key_b]
    by_b = {x["level"]: x for x in b["levels"]}
    rows = [level_row(x, by_b[x["level"]]) for x in a["levels"] if x["level"] in by_b]
    return {
        "runs": [key_a, key_b],
        "results_dirs": [a["results_dir"], b["results_dir"]],
        "candidate": a.get("candidate"),
        "levels": rows,
        "crossover_sweep": [a["crossover_sweep"], b["crossover_sweep"]],
        "crossover_bench_serving": [a["crossover_bench_serving"], b["crossover_bench_serving"]],
        "criteria": criteria(rows),
    }


def _iv(x: float | None, iv: list[float] | None) -> str:
    return "–" if x is None or not iv else f"{x:.3f} [{iv[0]:.3f}, {iv[1]:.3f}]"


def _yn(v: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "–"}[v]


def section(s: dict[str, Any], marker: str) -> str:
    lines = [
        f"<!-- {marker}:start -->",
        f"Written by `summarize_rerun.py` from summary.json's `{s['runs'][0]}` and "
        f"`{s['runs'][1]}` ({s['results_dirs'][0]}/ and {s['results_dirs'][1]}/, each on "
        "server instances started afresh).",
        "",
        "| streams | run A: E2E ratio [95%] | run B | overlap | A in B | B in A "
        "| ratio of medians A | B | bench_serving mean A / B | medians hold bench mean A / B |",
        "|---:|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s["levels"]:
        p, iv = r["e2e_ratio"], r["e2e_ratio_95"]
        mp, miv = r["e2e_medians_ratio"], r["e2e_medians_ratio_95"]
        means = " / ".join("–" if m is None else f"{m:.3f}" for m in r["bench_means"])
        holds = " / ".join(_yn(h) for h in r["medians_interval_holds_bench_mean"])
        lines.append(
            f"| {r['level']} | {_iv(p[0], iv[0])} | {_iv(p[1], iv[1])} "
            f"| {_yn(r['e2e_ratio_overlap'])} | {_yn(r['e2e_ratio_a_in_b'])} "
            f"| {_yn(r['e2e_ratio_b_in_a'])} | {_iv(mp[0], miv[0])} | {_iv(mp[1], miv[1])} "
            f"| {means} | {holds} |"
        )
    c = s["criteria"]
    o, pts, bm = (
        c["intervals_overlap_every_level"],
        c["points_inside_other_80pct"],
        c["medians_interval_holds_bench_mean"],
    )
    lines += [
        "",
        f"- intervals overlap at every level: {_yn(o['met'])} ({o['count'][0]} of {o['count'][1]})",
        f"- each run's point inside the other's interval at >= 80% of levels: {_yn(pts['met'])} "
        f"(A in B {pts['run_a_in_b'][0]} of {pts['run_a_in_b'][1]}, B in A "
        f"{pts['run_b_in_a'][0]} of {pts['run_b_in_a'][1]})",
        f"- ratio of medians' interval holds bench_serving's mean where its reps agree: "
        f"{_yn(bm['met'])} (A {bm['run_a'][0]} of {bm['run_a'][1]}, B {bm['run_b'][0]} of "
        f"{bm['run_b'][1]})",
    ]
    xa, xb = s["crossover_sweep"]
    lines.append(
        "- crossover (E2E): run A "
        + (
            f"{xa['e2e']['estimate']} {xa['e2e']['ci']}"
            if xa["e2e"].get("estimate")
            else xa["e2e"]["status"]
        )
        + ", run B "
        + (
            f"{xb['e2e']['estimate']} {xb['e2e']['ci']}"
            if xb["e2e"].get("estimate")
            else xb["e2e"]["status"]
        )
        + f"; bench_serving: {s['crossover_bench_serving'][0]} / {s['crossover_bench_serving'][1]}"
    )
    return "\n".join([*lines, f"<!-- {marker}:end -->"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("key_a")
    ap.add_argument("key_b")
    ap.add_argument("--key", required=True, help="summary.json key for the pair")
    ap.add_argument("--marker", default=None, help="README section markers (default: the key)")
    ap.add_argument("--summary", type=Path, default=HERE / "summary.json")
    ap.add_argument("--readme", type=Path, default=HERE / "README.md")
    a = ap.parse_args()
    summary = json.loads(a.summary.read_text())
    for k in (a.key_a, a.key_b):
        if k not in summary:
            ap.error(f"{a.summary}: no entry {k!r} (run summarize_sweep.py --key {k} first)")
    s = summarize(summary, a.key_a, a.key_b)
    summary[a.key] = s
    a.summary.write_text(json.dumps(summary, indent=1) + "\n")
    write_readme(a.readme, section(s, a.marker or a.key), a.marker or a.key)
    print(json.dumps(s["criteria"], indent=1))


if __name__ == "__main__":
    main()
