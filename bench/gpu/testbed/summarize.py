"""Summarise one testbed run: summary.json and the README's results table.

usage: python3 summarize.py RESULTS_DIR [--summary summary.json] [--readme README.md]
                            [--min-pairs 16] [--margin 0.02]

RESULTS_DIR holds what run_testbed.sh returned: results.jsonl, records.tar.gz and
sglang-run.tar.gz (run.log is not read). Per candidate and concurrency level it reports:
  - specproxy's verdict under the product's rule (report.json of the replay run directory,
    at least 30 pairs) and re-rendered with `specproxy report --min-pairs N` (the level loop
    sends 16 to 128 prompts), with the paired E2E ratio and its 95% interval;
  - bench_serving's ratio of median E2E (candidate / baseline) for each ABAB rep, each rep's
    direction under the same margin, whether the reps agree among themselves, and whether
    specproxy's direction agrees with theirs;
  - the candidate's accept length: exact, from the replay's per-request meta_info, and as
    bench_serving printed it (/server_info's avg_spec_accept_length, a since-start average);
  - the crossover by the product's rule (``specproxy.core.load.crossover.estimate_crossover``),
    from specproxy's ratios and from the mean of bench_serving's reps;
  - proxy overhead in % of the direct E2E p50 per concurrency and mode;
  - decode step times read from the server logs (median over log windows per batch size).
The README section between the `summary` markers is rewritten from summary.json.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from specproxy.core.load.crossover import LevelRatio, estimate_crossover

# the testbed's results, summary.json and README
HERE = Path(__file__).resolve().parents[3] / "docs" / "validation" / "testbed"
START, END = "<!-- summary:start -->", "<!-- summary:end -->"
DECODE = re.compile(
    r"Decode batch, #running-req: (\d+),.*?(?:accept len: ([0-9.]+),.*?)?"
    r"gen throughput \(token/s\): ([0-9.]+)"
)


def direction(ratio: float | None, margin: float) -> str:
    if ratio is None:
        return "none"
    if ratio < 1 - margin:
        return "faster"
    if ratio > 1 + margin:
        return "slower"
    return "no_difference"


def rerendered_verdict(run_dir: Path, min_pairs: int, margin: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "specproxy", "report", str(run_dir), "--format", "json"]
        cmd += ["--min-pairs", str(min_pairs), "--margin", str(margin), "--out", out]
        subprocess.run(cmd, check=True, capture_output=True)
        verdict: dict[str, Any] = json.loads((Path(out) / "report.json").read_text())["verdict"]
        return verdict


def replay_facts(run_dir: Path, min_pairs: int, margin: float) -> dict[str, Any]:
    report = json.loads((run_dir / "report.json").read_text())
    loose = rerendered_verdict(run_dir, min_pairs, margin)
    acc = next(a for a in report["acceptance"] if a["side"] == "candidate")
    iv = report["verdict"]["interval"]
    return {
        "pairs": report["verdict"]["n_pairs"],
        "e2e_ratio": round(iv["point"], 4),
        "e2e_ratio_95": [round(iv["low"], 4), round(iv["high"], 4)],
        "verdict_rule_30_pairs": report["verdict"]["label"],
        f"verdict_min_pairs_{min_pairs}": loose["label"],
        "accept_length_meta_info": round(acc["token_weighted_mean"], 3),
        "accept_length_source": acc["exactness"],
        "greedy_outputs_identical": f"{report['agreement']['matched']}/{report['agreement']['compared']}",
    }


def bench_facts(rows: list[dict[str, Any]], margin: float) -> dict[str, Any]:
    reps: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rows:
        reps.setdefault(r["rep"], {})[r["side"]] = r
    ratios, accept = [], []
    for rep in sorted(reps):
        sides = reps[rep]
        if {"baseline", "candidate"} <= sides.keys() and all(s["ok"] for s in sides.values()):
            b, c = sides["baseline"], sides["candidate"]
            ratios.append(round(c["median_e2e_latency_ms"] / b["median_e2e_latency_ms"], 4))
            accept.append(c.get("accept_length") and round(c["accept_length"], 3))
    dirs = [direction(x, margin) for x in ratios]
    return {
        "bench_ratios": ratios,
        "bench_directions": dirs,
        "bench_reps_agree": len(set(dirs)) == 1 if dirs else None,
        "bench_accept_length_server_info": accept,
    }


def agreement(spx: str, dirs: list[str], reps_agree: bool | None) -> str:
    if not dirs:
        return "no ground truth"
    if not reps_agree:
        return "ground truth reps disagree"
    if spx not in ("faster", "slower", "no_difference"):
        return "specproxy inconclusive"
    return "agree" if spx == dirs[0] else "DISAGREE"


def crossover(
    levels: list[dict[str, Any]], key: str, *, consistent_only: bool = False
) -> str | None:
    """The product's crossover rule (``specproxy.core.load.crossover.estimate_crossover``, as the
    sweep applies it) over the levels' ``key`` ratios, in words; with consistent_only, levels
    whose bench_serving reps disagree in direction are left out. A level's interval is
    ``{key}_95`` where it has one (specproxy's levels; bench_serving's means have none)."""
    used = [
        x
        for x in levels
        if x.get(key) is not None and (x.get("bench_reps_agree") or not consistent_only)
    ]
    if not used:
        return "not determined (no usable level)"
    pts = [(x["level"], x[key]) for x in used]
    ratios = [
        LevelRatio(load=x["level"], point=x[key], low=band[0], high=band[1])
        if (band := x.get(f"{key}_95"))
        else LevelRatio(load=x["level"], point=x[key], low=None, high=None)
        for x in used
    ]
    found = estimate_crossover(ratios, "e2e")
    if found.status == "pays_everywhere":
        return "none: faster at every level measured"
    if found.status == "pays_nowhere":
        return "none: not faster at any level measured"
    if found.estimate is None:
        return None  # on both sides of 1, but the ratio falls with load
    below = max(c for c, _ in pts if c <= found.estimate)
    above = min(c for c, _ in pts if c >= found.estimate)
    ci = f" [{found.ci[0]:.3g}, {found.ci[1]:.3g}]" if found.ci else ""
    return f"~{found.estimate:.3g} streams{ci} (between {below} and {above} streams)"


def _name(r: dict[str, Any]) -> str:
    """The candidate's name (the first run's replay lines kept it only in run_dir)."""
    if isinstance(r.get("candidate"), str):
        return str(r["candidate"])
    return Path(r["run_dir"]).name.rsplit("-c", 1)[0]


def candidates(results: list[dict[str, Any]], rec: Path, a: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        if r["kind"] == "replay":
            r["candidate"] = _name(r)
    keys = sorted(
        {(r["candidate"], r["level"]) for r in results if r["kind"] in ("replay", "bench")},
        key=lambda k: (k[0], k[1]),
    )
    for name, c in keys:
        level: dict[str, Any] = {"level": c}
        run_dir = rec / "replay" / f"{name}-c{c}"
        if (run_dir / "report.json").is_file():
            level.update(replay_facts(run_dir, a.min_pairs, a.margin))
        bench = [
            r for r in results if r["kind"] == "bench" and (r["candidate"], r["level"]) == (name, c)
        ]
        level.update(bench_facts(bench, a.margin))
        ratios = level["bench_ratios"]
        level["bench_mean_ratio"] = round(statistics.mean(ratios), 4) if ratios else None
        spx = level.get(f"verdict_min_pairs_{a.min_pairs}", "none")
        level["agreement"] = agreement(spx, level["bench_directions"], level["bench_reps_agree"])
        out.setdefault(name, {"levels": []})["levels"].append(level)
    for name, entry in out.items():
        entry["accept_length_by_prompt_tokens"] = accept_by_prompt_length(rec, name)
        entry["crossover_specproxy"] = crossover(entry["levels"], "e2e_ratio")
        entry["crossover_bench_serving_mean"] = crossover(
            entry["levels"], "bench_mean_ratio", consistent_only=True
        )
    return out


def accept_by_prompt_length(rec: Path, name: str) -> dict[str, Any] | None:
    """Exact per-request accept length against prompt length, in prompt-length quartiles, from the
    candidate's replay level with the most prompts."""
    runs = sorted(rec.glob(f"replay/{name}-c*/requests.jsonl"), key=lambda p: p.stat().st_size)
    if not runs:
        return None
    with runs[-1].open() as f:
        rows = [json.loads(x) for x in f if x.strip()]
    xs = sorted(
        (r["prompt_tokens"], r["acceptance"]["accept_length"])
        for r in rows
        if r["side"] == "candidate"
        and r.get("acceptance")
        and r["acceptance"].get("accept_length")
        and r.get("prompt_tokens")
    )
    if len(xs) < 8:
        return None
    q = len(xs) // 4
    parts = [xs[i * q : (i + 1) * q if i < 3 else len(xs)] for i in range(4)]
    return {
        "run": runs[-1].parent.name,
        "requests": len(xs),
        "quartiles": [
            {
                "prompt_tokens": [p[0][0], p[-1][0]],
                "mean_accept_length": round(statistics.mean(a for _, a in p), 3),
            }
            for p in parts
        ],
        "pearson_r": round(statistics.correlation([x for x, _ in xs], [a for _, a in xs]), 3),
    }


def proxy(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        if r["kind"] == "proxy" and r["arm"] != "direct":
            per_round = r["per_round_overhead_pct"]
            rows.append(
                {
                    "level": r["level"],
                    "mode": r["arm"],
                    "requests": r["requests"],
                    "failed": r["failed"],
                    "e2e_p50_ms": r["e2e_p50_ms"],
                    "overhead_pct_of_direct_e2e_p50": r["overhead_pct_of_direct_e2e_p50"],
                    "per_round_pct": per_round,
                    "median_round_pct": round(statistics.median(per_round), 3)
                    if per_round
                    else None,
                }
            )
        if r["kind"] == "proxy" and r["arm"] == "direct":
            rows.append(
                {
                    "level": r["level"],
                    "mode": "direct",
                    "e2e_p50_ms": r["e2e_p50_ms"],
                    "requests": r["requests"],
                    "failed": r["failed"],
                }
            )
    return rows


def step_times(logs: Path) -> dict[str, Any]:
    """Decode step (ms) per server and batch size: batch x accept length / throughput, per log window.

    A window that also holds a prefill or an idle gap reads slow, so the 20th percentile is the
    steady decode step; the median is given beside it.
    """
    out: dict[str, dict[str, Any]] = {}
    for log in sorted(logs.glob("*.log")):
        by_bs: dict[int, list[float]] = {}
        for m in DECODE.finditer(log.read_text(errors="replace")):
            bs, acc, tput = int(m.group(1)), float(m.group(2) or 1.0), float(m.group(3))
            if tput > 0:
                by_bs.setdefault(bs, []).append(1e3 * bs * acc / tput)
        out[log.stem] = {
            str(bs): {
                "p20_step_ms": round(statistics.quantiles(v, n=5)[0], 2),
                "median_step_ms": round(statistics.median(v), 2),
                "windows": len(v),
            }
            for bs, v in sorted(by_bs.items())
            if bs in (1, 2, 4, 8, 16, 32, 64) and len(v) >= 3
        }
    return out


def server_facts(run: Path) -> dict[str, Any]:
    ups = {p.stem: int(p.read_text().strip()) for p in run.glob("*.up")}
    return {"start_to_healthy_s": ups}


def load(results_dir: Path, tmp: Path) -> tuple[list[dict[str, Any]], Path, Path]:
    with (results_dir / "results.jsonl").open() as f:
        results = [json.loads(x) for x in f if x.strip()]
    for name in ("records.tar.gz", "sglang-run.tar.gz"):
        with tarfile.open(results_dir / name) as t:
            t.extractall(tmp / name.split(".")[0], filter="data")
    return results, tmp / "records", tmp / "sglang-run" / "run"


def summarize(results_dir: Path, a: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        results, rec, run = load(results_dir, Path(tmp))
        pair = json.loads((rec / "pair.json").read_text())
        return {
            "results_dir": results_dir.name,
            "pair": pair,
            "rule": {
                "margin": a.margin,
                "specproxy_min_pairs_default": 30,
                "specproxy_min_pairs_rerendered": a.min_pairs,
            },
            "servers": server_facts(run),
            "decode_step_ms": step_times(run),
            "candidates": candidates(results, rec, a),
            "proxy_overhead": proxy(results),
            "skipped": [r for r in results if r["kind"] == "skipped"],
        }


def _fmt_ratio(level: dict[str, Any]) -> str:
    if "e2e_ratio" not in level:
        return "–"
    lo, hi = level["e2e_ratio_95"]
    return f"{level['e2e_ratio']:.3f} [{lo:.3f}, {hi:.3f}]"


def level_table(s: dict[str, Any]) -> list[str]:
    mp = s["rule"]["specproxy_min_pairs_rerendered"]
    lines = [
        f"| candidate | streams | pairs | specproxy E2E ratio [95%] | verdict (30-pair rule) "
        f"| verdict ({mp}-pair rule) | bench_serving ratio per rep (ABAB) | reps agree | agreement "
        f"| accept length: meta_info / bench_serving |",
        "|---|---:|---:|---|---|---|---|---|---|---|",
    ]
    for name, entry in s["candidates"].items():
        for lv in entry["levels"]:
            reps = " / ".join(f"{x:.3f}" for x in lv["bench_ratios"]) or "–"
            acc_b = (
                " / ".join(f"{x:.2f}" for x in lv["bench_accept_length_server_info"] if x) or "–"
            )
            lines.append(
                f"| {name} | {lv['level']} | {lv.get('pairs', '–')} | {_fmt_ratio(lv)} "
                f"| {lv.get('verdict_rule_30_pairs', '–')} | {lv.get(f'verdict_min_pairs_{mp}', '–')} "
                f"| {reps} | {'yes' if lv['bench_reps_agree'] else 'no'} | {lv['agreement']} "
                f"| {lv.get('accept_length_meta_info', '–')} / {acc_b} |"
            )
    lines.append("")
    for name, entry in s["candidates"].items():
        lines.append(
            f"- {name} crossover: specproxy {entry['crossover_specproxy']}; "
            f"bench_serving (mean of reps, levels whose reps agree) "
            f"{entry['crossover_bench_serving_mean']}."
        )
        by_len = entry.get("accept_length_by_prompt_tokens")
        if by_len:
            parts = ", ".join(
                f"{q['prompt_tokens'][0]}-{q['prompt_tokens'][1]} tokens: {q['mean_accept_length']}"
                for q in by_len["quartiles"]
            )
            lines.append(
                f"- {name} mean per-request accept length by prompt length ({by_len['run']}, "
                f"{by_len['requests']} requests, r = {by_len['pearson_r']}): {parts}."
            )
    return lines


def proxy_table(s: dict[str, Any]) -> list[str]:
    lines = [
        "| streams | direct E2E p50 | passthrough: overhead % (paired median; per round) "
        "| mirror: overhead % (paired median; per round) |",
        "|---:|---:|---|---|",
    ]
    for c in sorted({r["level"] for r in s["proxy_overhead"]}):
        rows = {r["mode"]: r for r in s["proxy_overhead"] if r["level"] == c}
        cells = []
        for mode in ("passthrough", "mirror"):
            r = rows.get(mode)
            cells.append(
                "–"
                if r is None
                else f"{r['overhead_pct_of_direct_e2e_p50']:+.2f} ({r['median_round_pct']:+.2f}; "
                f"{', '.join(f'{x:+.1f}' for x in r['per_round_pct'])})"
            )
        direct = rows.get("direct", {}).get("e2e_p50_ms")
        lines.append(f"| {c} | {direct} ms | {cells[0]} | {cells[1]} |")
    return lines


def step_table(s: dict[str, Any]) -> list[str]:
    sizes = ("1", "4", "16", "64")
    lines = [
        "| server | start to healthy | " + " | ".join(f"decode step at {b}" for b in sizes) + " |",
        "|---|---:|" + "---:|" * len(sizes),
    ]
    for name, by_bs in s["decode_step_ms"].items():
        up = s["servers"]["start_to_healthy_s"].get(name)
        cells = [
            f"{by_bs[b]['p20_step_ms']} ms ({by_bs[b]['median_step_ms']})" if b in by_bs else "–"
            for b in sizes
        ]
        lines.append(f"| {name} | {up} s | " + " | ".join(cells) + " |")
    return lines


def readme_section(s: dict[str, Any]) -> str:
    p = s["pair"]
    head = [
        START,
        f"Written by `summarize.py` from `{s['results_dir']}/` (pair: K = {p['k']}, EPS = {p['eps']}, "
        f"target {p['target_params'] / 1e9:.2f}B parameters, built in {p['build_s']} s).",
        "",
    ]
    body = [
        *level_table(s),
        "",
        "Proxy overhead, in % of the direct E2E p50:",
        "",
        *proxy_table(s),
        "",
        "Servers (decode step = batch x accept length / generated tokens per s over one of "
        "SGLang's 16-step log windows; 20th percentile of the windows, median in brackets):",
        "",
        *step_table(s),
    ]
    skipped = [f"{x.get('candidate', x.get('step'))}:{x['level']}" for x in s["skipped"]]
    if skipped:
        body += ["", f"Skipped for time (the measuring deadline): {', '.join(skipped)}."]
    return "\n".join([*head, *body, END])


def write_readme(readme: Path, section: str) -> None:
    text = readme.read_text() if readme.is_file() else ""
    if START in text and END in text:
        text = text[: text.index(START)] + section + text[text.index(END) + len(END) :]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    readme.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results_dir", type=Path)
    ap.add_argument("--summary", type=Path, default=HERE / "summary.json")
    ap.add_argument("--readme", type=Path, default=HERE / "README.md")
    ap.add_argument("--min-pairs", type=int, default=16)
    ap.add_argument("--margin", type=float, default=0.02)
    a = ap.parse_args()
    if not (a.results_dir / "results.jsonl").is_file():
        ap.error(f"{a.results_dir}: no results.jsonl (give the folder run_testbed.sh filled)")
    s = summarize(a.results_dir, a)
    if a.summary.is_file() and "sweep" in (old := json.loads(a.summary.read_text())):
        s["sweep"] = old["sweep"]  # written by summarize_sweep.py from the second run
    a.summary.write_text(json.dumps(s, indent=1) + "\n")
    write_readme(a.readme, readme_section(s))
    print(f"wrote {a.summary} and the summary section of {a.readme}")


if __name__ == "__main__":
    main()
