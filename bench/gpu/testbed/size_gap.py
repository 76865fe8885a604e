"""Why the sweep's E2E ratios can be larger than bench_serving's: the figures, side by side.

usage: python3 size_gap.py RESULTS_DIR [RESULTS_DIR ...] [--min-level 8] [--no-blocks]

Each RESULTS_DIR is a folder run_testbed.sh filled (records.tar.gz is read in memory; nothing is
extracted). Per run, candidate and concurrency level n it prints specproxy's paired records (the
sweep's batches, or the first run's `replay` directories) next to bench_serving's reps of the
same level on the same server instance. Columns:

  pairs          counted pairs (warm-up/cool-down requests left out, both sides answered)
  med(c/b)       median of per-pair ratios candidate E2E / baseline E2E (specproxy's figure)
  medc/medb      ratio of the sides' median E2E (bench_serving's figure)
  mean c/b       ratio of the sides' mean E2E
  ttft, decode   ratio of medians of TTFT and of the decode part (E2E - TTFT); bench_serving's
                 rows give its TPOT ratio in the decode column
  b, c E2E       the sides' median E2E in ms (median TTFT in brackets)
  conc b/c       the load each side really ran at: for specproxy the time-weighted mean number of
                 the side's requests in flight while each counted request ran (itself included);
                 for bench_serving its own `concurrency` (sum of E2E / duration)
  arr b/c        median number of the same side's requests sent while a request was decoding
                 (between its first and last token): each one is a prefill the server runs
                 between decode steps
  stall b/c      median time per request spent in chunk gaps longer than 2.5 x the side's median
                 gap (ms); step b/c: the median gap (one decode or verify step)
  ex-stall       median per-pair ratio with both sides' stall time taken out

Rows: `all` (every counted pair), one per block pair (batch/block), `wave 1` (the first n pairs of
each block in send order: n streams started together and prefilled together), `later` (the rest
of the counted pairs, sent one by one as earlier ones ended), `+cool` (every request sent,
cool-down included, as bench_serving counts its drain). Then in_flight_at_send per side, the
least-squares line of decode time against arrivals per side, and a closed-loop model (sweeps
only, where the candidate's line has r >= 0.8): each request keeps its own TTFT and its decode
time less its arrivals' stalls, every start adds the fitted stall to the requests decoding then;
run on the sweep's own schedule (a check) and on bench_serving's (the first N prompts in one
block, all counted, no cool-down). bench_serving rows: one per rep (ABAB, baseline first), with
its prompt count and waves (prompts / n). A closing table puts every run and level side by side.

Stdlib only.
"""

import argparse
import io
import itertools
import json
import re
import statistics
import tarfile
from collections import defaultdict
from pathlib import Path
from typing import Any

SIDES = ("baseline", "candidate")


def run_label(folder: Path) -> str:
    m = re.search(r"-run(\d+)$", folder.name)
    return f"run {m.group(1)}" if m else "run 1"


def _member(t: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    """A regular file's bytes from the archive."""
    f = t.extractfile(member)
    if f is None:
        raise SystemExit(f"{member.name}: not a regular file in the archive")
    return f.read()


def _read_jsonl(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(x) for x in io.StringIO(data.decode()) if x.strip()]


def load(results_dir: Path) -> dict[str, Any]:
    """specproxy's alternate-mode run directories and bench_serving's lines, from records.tar.gz."""
    runs: dict[tuple[str, int], dict[str, Any]] = {}
    bench: dict[tuple[str, int], list[dict[str, Any]]] = {}
    with tarfile.open(results_dir / "records.tar.gz") as t:
        files = {m.name.removeprefix("./"): m for m in t.getmembers() if m.isfile()}
        for name, member in sorted(files.items()):
            if name.endswith("/requests.jsonl"):
                folder = name.rsplit("/", 1)[0]
                exp_name = f"{folder}/experiment.json"
                if exp_name not in files:
                    continue
                exp = json.loads(_member(t, files[exp_name]))
                if exp.get("mode") != "alternate":
                    continue
                m_sweep = re.match(r"sweep-([^/]+)/c(\d+)/(batch-\d+)$", folder)
                m_replay = re.match(r"replay/(.+)-c(\d+)$", folder)
                if m_sweep:
                    cand, level, batch, source = m_sweep[1], int(m_sweep[2]), m_sweep[3], "sweep"
                elif m_replay:
                    cand, level, batch, source = m_replay[1], int(m_replay[2]), "replay", "replay"
                else:
                    continue
                sched = (exp.get("workload") or {}).get("schedule") or {}
                level = int(sched.get("concurrency") or level)
                entry = runs.setdefault((cand, level), {"source": source, "batches": {}})
                entry["batches"][batch] = {
                    "rows": _read_jsonl(_member(t, member)),
                    "workload": exp.get("workload") or {},
                }
            m_bench = re.match(r"bench/(.+)-c(\d+)\.jsonl$", name)
            if m_bench:
                rows = _read_jsonl(_member(t, member))
                bench[(m_bench[1], int(m_bench[2]))] = rows
    return {
        "label": run_label(results_dir),
        "folder": results_dir.name,
        "runs": runs,
        "bench": bench,
    }


# --- specproxy's records -------------------------------------------------------------------


def ok(r: dict[str, Any]) -> bool:
    return r.get("status") == 200 and not r.get("error_kind") and r.get("e2e_us") is not None


def med(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def time_weighted_load(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per request id: the mean number of the same side's requests in flight while it ran
    (itself included), over the records given (one side of one batch)."""
    iv = [
        (r["sent_at_unix_s"], r["sent_at_unix_s"] + r["e2e_us"] / 1e6, r["request_id"])
        for r in rows
    ]
    out = {}
    for s0, e0, rid in iv:
        span = e0 - s0
        if span <= 0:
            continue
        overlap = sum(max(0.0, min(e0, e1) - max(s0, s1)) for s1, e1, _ in iv)
        out[rid] = overlap / span
    return out


STALL_FACTOR = 2.5  # a gap between chunks longer than this many median gaps is a stall


def gaps_ms(r: dict[str, Any]) -> list[float]:
    """Gaps between the streamed chunks after the first (one per decode or verify step); schema 1
    records keep chunk_offsets_us, schema 2 chunk_gaps_us (its first entry is the TTFT)."""
    if r.get("chunk_gaps_us"):
        return [g / 1e3 for g in r["chunk_gaps_us"][1:]]
    offs = r.get("chunk_offsets_us") or []
    return [(b - a) / 1e3 for a, b in itertools.pairwise(offs)]


def side_stats(recs: list[dict[str, Any]]) -> dict[str, Any]:
    e2e = [r["e2e_us"] / 1e3 for r in recs]
    ttft = [r["ttft_us"] / 1e3 for r in recs if r.get("ttft_us") is not None]
    dec = [(r["e2e_us"] - r["ttft_us"]) / 1e3 for r in recs if r.get("ttft_us") is not None]
    return {
        "n": len(recs),
        "e2e_med": med(e2e),
        "e2e_mean": statistics.fmean(e2e) if e2e else None,
        "ttft_med": med(ttft),
        "dec_med": med(dec),
        "load": statistics.fmean(r["_load"] for r in recs) if recs else None,
        "arrivals": med([r["_arrivals"] for r in recs]),
        "stall": med([r["_stall"] for r in recs]),
        "step": med([r["_step"] for r in recs if r["_step"] is not None]),
    }


def view(
    pairs: list[tuple[dict[str, Any], dict[str, Any]]],
    extra_b: list[dict[str, Any]] | None = None,
    extra_c: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Figures of a set of pairs; extra_b/extra_c replace the sides' records for the pooled
    figures (the `+cool` view counts unpaired cool-down requests too)."""
    b_recs = extra_b if extra_b is not None else [b for b, _ in pairs]
    c_recs = extra_c if extra_c is not None else [c for _, c in pairs]
    b, c = side_stats(b_recs), side_stats(c_recs)
    per_pair = [c_["e2e_us"] / b_["e2e_us"] for b_, c_ in pairs]
    ex_stall = [
        (c_["e2e_us"] / 1e3 - c_["_stall"]) / (b_["e2e_us"] / 1e3 - b_["_stall"])
        for b_, c_ in pairs
    ]
    return {
        "ex_stall": med(ex_stall),
        "b_arr": b["arrivals"],
        "c_arr": c["arrivals"],
        "b_stall": b["stall"],
        "c_stall": c["stall"],
        "b_step": b["step"],
        "c_step": c["step"],
        "pairs": len(pairs) if extra_b is None else f"{b['n']}+{c['n']}",
        "med_pair": med(per_pair),
        "rom": ratio(c["e2e_med"], b["e2e_med"]),
        "mean": ratio(c["e2e_mean"], b["e2e_mean"]),
        "ttft": ratio(c["ttft_med"], b["ttft_med"]),
        "dec": ratio(c["dec_med"], b["dec_med"]),
        "b_e2e": b["e2e_med"],
        "c_e2e": c["e2e_med"],
        "b_ttft": b["ttft_med"],
        "c_ttft": c["ttft_med"],
        "b_load": b["load"],
        "c_load": c["load"],
    }


Pair = tuple[dict[str, Any], dict[str, Any]]  # (baseline record, candidate record)


def analyse_level(entry: dict[str, Any], n: int) -> dict[str, Any]:
    blocks: list[tuple[str, list[Pair]]] = []
    all_pairs: list[Pair] = []
    wave1: list[Pair] = []
    later: list[Pair] = []
    cool_pairs: list[Pair] = []
    every: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    sched: dict[str, list[list[dict[str, Any]]]] = {s: [] for s in SIDES}
    in_flight: dict[str, list[int]] = {s: [] for s in SIDES}
    for batch, data in sorted(entry["batches"].items()):
        rows = [r for r in data["rows"] if ok(r)]
        for s in SIDES:
            mine = [r for r in rows if r["side"] == s]
            load_of = time_weighted_load(mine)
            sends = sorted(r["sent_at_unix_s"] for r in mine)
            for r in mine:
                r["_load"] = load_of.get(r["request_id"], float("nan"))
                t0 = r["sent_at_unix_s"] + (r.get("ttft_us") or 0) / 1e6
                t1 = r["sent_at_unix_s"] + r["e2e_us"] / 1e6
                r["_arrivals"] = sum(1 for x in sends if t0 < x < t1)
        steps = {s: med([g for r in rows if r["side"] == s for g in gaps_ms(r)]) for s in SIDES}
        for r in rows:
            gs, step = gaps_ms(r), steps[r["side"]]
            r["_step"] = med(gs)
            r["_stall"] = sum(g - step for g in gs if step and g > STALL_FACTOR * step)
        for s in SIDES:
            every[s] += [r for r in rows if r["side"] == s]
        by_block: dict[str, dict[str, dict[str, dict[str, Any]]]] = defaultdict(
            lambda: {s: {} for s in SIDES}
        )
        for r in rows:
            block = (r.get("labels") or {}).get("block", "0")
            by_block[block][r["side"]][r["pair_id"]] = r
        for block in sorted(by_block, key=lambda x: int(x) if x.isdigit() else x):
            sides = by_block[block]
            common = [p for p in sides["baseline"] if p in sides["candidate"]]
            # send order within the block (the trace order, the same on both sides)
            common.sort(key=lambda p: sides["baseline"][p].get("trace_index") or 0)
            first = set(common[:n])
            counted = [
                (sides["baseline"][p], sides["candidate"][p])
                for p in common
                if not sides["baseline"][p].get("warmup")
                and not sides["candidate"][p].get("warmup")
            ]
            cool_pairs += [(sides["baseline"][p], sides["candidate"][p]) for p in common]
            for s in SIDES:
                mine = sorted(
                    sides[s].values(),
                    key=lambda r: (r["sent_at_unix_s"], r.get("trace_index") or 0),
                )
                sched[s].append(mine)
            for b, c in counted:
                (wave1 if b["pair_id"] in first else later).append((b, c))
                in_flight["baseline"].append(b["in_flight_at_send"])
                in_flight["candidate"].append(c["in_flight_at_send"])
            all_pairs += counted
            if counted:
                blocks.append((f"{batch}/b{block}", counted))
    return {
        "source": entry["source"],
        "all": view(all_pairs),
        "blocks": [(name, view(p)) for name, p in blocks],
        "wave1": view(wave1) if wave1 else None,
        "later": view(later) if later else None,
        "cool": view(cool_pairs, every["baseline"], every["candidate"]),
        "fit": {s: decode_fit([p[i] for p in all_pairs]) for i, s in enumerate(SIDES)},
        "sched": sched,
        "in_flight": {s: in_flight_summary(in_flight[s], n) for s in SIDES},
        "cooldown": sorted({d["workload"].get("cooldown", 0) for d in entry["batches"].values()}),
        "block_size": sorted({d["workload"].get("block_size") for d in entry["batches"].values()}),
    }


def decode_fit(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """Least squares: decode time (E2E - TTFT) against arrivals of the same side during it."""
    xs = [r["_arrivals"] for r in recs]
    ys = [(r["e2e_us"] - r["ttft_us"]) / 1e3 for r in recs]
    cached = sum(r.get("cached_tokens") or 0 for r in recs)
    prompt = sum(r.get("prompt_tokens") or 0 for r in recs)
    share = f"; prompt tokens cached {cached / prompt:.0%}" if prompt else ""
    if len(set(xs)) < 2:
        text = f"arrivals always {xs[0] if xs else '-'}; decode median {f0(med(ys))} ms"
        return {"slope": None, "text": text + share}
    slope, icpt = statistics.linear_regression(xs, ys)
    r = statistics.correlation(xs, ys)
    text = f"decode = {icpt:.0f} ms + {slope:.1f} ms x arrivals during it (r = {r:.2f})"
    return {"slope": slope, "r": r, "text": text + share}


# --- a closed-loop model: what bench_serving's schedule would give on the same servers ---------


def intrinsic(r: dict[str, Any], slope: float) -> tuple[float, float, bool]:
    """(TTFT, decode time without the stalls its arrivals caused, counted) of one record."""
    decode = (r["e2e_us"] - r["ttft_us"]) / 1e3
    return (
        r["ttft_us"] / 1e3,
        max(0.3 * decode, decode - slope * r["_arrivals"]),
        not r.get("warmup"),
    )


def _start(
    t: float, pending: list[tuple[float, float, bool]], active: list[list[float]], slope: float
) -> None:
    """``simulate``'s start of the next pending request at ``t``: every request then past its
    first token gets ``slope`` ms more decode."""
    ttft, dec, counted = pending.pop(0)
    for a in active:
        if a[1] <= t:
            a[2] += slope
    active.append([t, t + ttft, t + ttft + dec, counted])


def simulate(blocks: list[list[tuple[float, float, bool]]], n: int, slope: float) -> dict[str, Any]:
    """Closed loop of n streams per block: a request starts when one ends; each start adds
    `slope` ms to every request of the block that is decoding then (the prefill stall the
    records measured). Returns the counted requests' E2E and the time-weighted concurrency."""
    e2e, busy, span = [], 0.0, 0.0
    for block in blocks:
        pending = list(block)
        active: list[list[float]] = []  # [start, ttft_end, finish, counted]
        t = 0.0
        while pending and len(active) < n:
            _start(t, pending, active, slope)
        while active:
            done = min(active, key=lambda a: a[2])
            active.remove(done)
            t = done[2]
            busy += t - done[0]
            if done[3]:
                e2e.append(t - done[0])
            if pending:
                _start(t, pending, active, slope)
        span += t
    return {"e2e": e2e, "conc": busy / span if span else None}


MODEL_MIN_R = 0.8  # the model is used only where arrivals explain the candidate's decode time
BENCH_PROMPTS = {1: 16, 2: 16, 4: 32, 8: 32, 16: 48, 32: 64, 64: 128}  # run_levels.py's n(c)


def model(spx: dict[str, Any], n: int, bench_prompts: int | None) -> dict[str, Any]:
    """The sweep's schedule replayed in the model (a check against the measured figures) and
    bench_serving's: the first N requests of the level, one block, all counted, no cool-down."""
    fit = spx["fit"]["candidate"]
    if spx["source"] != "sweep":
        return {"skipped": "no cool-down: the counted requests' load falls as the block drains"}
    if fit["slope"] is None or fit["r"] < MODEL_MIN_R:
        return {
            "skipped": f"the candidate's decode time does not follow its arrivals (r < {MODEL_MIN_R})"
        }
    out: dict[str, Any] = {}
    for s in SIDES:
        slope = max(0.0, spx["fit"][s]["slope"] or 0.0)
        blocks = [[intrinsic(r, slope) for r in b] for b in spx["sched"][s]]
        own = simulate(blocks, n, slope)
        flat = [(t, d, True) for b in blocks for t, d, _ in b]
        want = bench_prompts or BENCH_PROMPTS.get(n, 4 * n)
        bench = simulate([flat[:want]], n, slope)
        out[s] = {"own": own, "bench": bench, "prompts": min(want, len(flat)), "wanted": want}
    return {
        "own_rom": ratio(med(out["candidate"]["own"]["e2e"]), med(out["baseline"]["own"]["e2e"])),
        "bench_rom": ratio(
            med(out["candidate"]["bench"]["e2e"]), med(out["baseline"]["bench"]["e2e"])
        ),
        "bench_conc": (out["candidate"]["bench"]["conc"], out["baseline"]["bench"]["conc"]),
        "prompts": out["candidate"]["prompts"],
        "wanted": out["candidate"]["wanted"],
    }


def in_flight_summary(xs: list[int], n: int) -> str:
    if not xs:
        return "-"
    full = sum(1 for x in xs if x >= n - 1) / len(xs)
    return (
        f"min {min(xs)} med {statistics.median(xs):g} mean {statistics.fmean(xs):.1f} "
        f"max {max(xs)}; at n-1={n - 1}: {full:.0%}"
    )


# --- bench_serving ------------------------------------------------------------------------


def bench_reps(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Its lines in order: baseline then candidate per rep (the side read from server_info)."""
    reps: list[dict[str, Any]] = []
    for r in rows:
        side = (
            "candidate" if (r.get("server_info") or {}).get("speculative_algorithm") else "baseline"
        )
        if side == "baseline" or not reps or "candidate" in reps[-1]:
            reps.append({})
        reps[-1][side] = r
    out = []
    for i, rep in enumerate(reps, 1):
        if set(rep) != set(SIDES):
            continue
        b, c = rep["baseline"], rep["candidate"]
        out.append(
            {
                "rep": i,
                "prompts": b.get("completed"),
                "rom": ratio(c["median_e2e_latency_ms"], b["median_e2e_latency_ms"]),
                "mean": ratio(c["mean_e2e_latency_ms"], b["mean_e2e_latency_ms"]),
                "ttft": ratio(c["median_ttft_ms"], b["median_ttft_ms"]),
                "tpot": ratio(c["median_tpot_ms"], b["median_tpot_ms"]),
                "b_e2e": b["median_e2e_latency_ms"],
                "c_e2e": c["median_e2e_latency_ms"],
                "b_ttft": b["median_ttft_ms"],
                "c_ttft": c["median_ttft_ms"],
                "b_load": b.get("concurrency"),
                "c_load": c.get("concurrency"),
                "b_dur": b.get("duration"),
                "c_dur": c.get("duration"),
            }
        )
    return out


# --- printing ------------------------------------------------------------------------------


def f3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def f0(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def f1(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


HEAD = (
    f"  {'row':<22} {'pairs':>7} {'med(c/b)':>8} {'medc/medb':>9} {'mean c/b':>8} {'ttft':>6} "
    f"{'decode':>6} {'b E2E (ttft)':>13} {'c E2E (ttft)':>13} {'conc b/c':>11} {'arr b/c':>9} "
    f"{'stall b/c':>9} {'step b/c':>9} {'ex-stall':>8}"
)


def line(name: str, v: dict[str, Any]) -> str:
    return (
        f"  {name:<22} {v['pairs']!s:>7} {f3(v['med_pair']):>8} {f3(v['rom']):>9} {f3(v['mean']):>8} "
        f"{f3(v['ttft']):>6} {f3(v['dec']):>6} {f0(v['b_e2e']) + ' (' + f0(v['b_ttft']) + ')':>13} "
        f"{f0(v['c_e2e']) + ' (' + f0(v['c_ttft']) + ')':>13} "
        f"{f1(v['b_load']) + '/' + f1(v['c_load']):>11} "
        f"{f0(v['b_arr']) + '/' + f0(v['c_arr']):>9} {f0(v['b_stall']) + '/' + f0(v['c_stall']):>9} "
        f"{f1(v['b_step']) + '/' + f1(v['c_step']):>9} {f3(v['ex_stall']):>8}"
    )


def bench_line(r: dict[str, Any], n: int) -> str:
    waves = r["prompts"] / n if r["prompts"] else None
    name = (
        f"bench rep {r['rep']} ({r['prompts']}p, {waves:g}w)" if waves else f"bench rep {r['rep']}"
    )
    return (
        f"  {name:<22} {'':>7} {'':>8} {f3(r['rom']):>9} {f3(r['mean']):>8} {f3(r['ttft']):>6} "
        f"{'(tpot ' + f3(r['tpot']) + ')':>6} {f0(r['b_e2e']) + ' (' + f0(r['b_ttft']) + ')':>13} "
        f"{f0(r['c_e2e']) + ' (' + f0(r['c_ttft']) + ')':>13} "
        f"{f1(r['b_load']) + '/' + f1(r['c_load']):>11}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results_dirs", type=Path, nargs="+")
    ap.add_argument("--min-level", type=int, default=1, help="leave out levels below this")
    ap.add_argument("--no-blocks", action="store_true", help="leave out the per-block rows")
    a = ap.parse_args()
    summary: list[tuple[str, str, int, str]] = []
    for d in a.results_dirs:
        if not (d / "records.tar.gz").is_file():
            ap.error(f"{d}: no records.tar.gz (give a folder run_testbed.sh filled)")
        run = load(d)
        keys = sorted(set(run["runs"]) | set(run["bench"]))
        for cand, n in keys:
            if n < a.min_level:
                continue
            print(f"\n== {run['label']} ({run['folder']}), {cand}, n = {n}")
            print(HEAD)
            spx = None
            if (cand, n) in run["runs"]:
                spx = analyse_level(run["runs"][(cand, n)], n)
                print(
                    f"  [{spx['source']}: block size {spx['block_size']}, cool-down {spx['cooldown']}]"
                )
                print(line(f"{spx['source']} all", spx["all"]))
                if not a.no_blocks:
                    for name, v in spx["blocks"]:
                        print(line(f"  {name}", v))
                for name in ("wave1", "later"):
                    if spx[name]:
                        print(
                            line(
                                {"wave1": "wave 1 (n together)", "later": "later (steady)"}[name],
                                spx[name],
                            )
                        )
                print(line("+cool (all sent)", spx["cool"]))
                for s in SIDES:
                    print(f"  in_flight_at_send {s:<9}: {spx['in_flight'][s]}")
                for s in SIDES:
                    print(f"  counted {s:<9}: {spx['fit'][s]['text']}")
            reps = bench_reps(run["bench"].get((cand, n), []))
            if spx:
                spx["model"] = model(spx, n, reps[0]["prompts"] if reps else None)
                m = spx["model"]
                if "skipped" in m:
                    print(f"  model: not applied: {m['skipped']}")
                else:
                    short = f" of {m['wanted']} wanted" if m["prompts"] < m["wanted"] else ""
                    print(
                        f"  model: the sweep's schedule gives medc/medb {f3(m['own_rom'])} (measured "
                        f"{f3(spx['all']['rom'])}); bench_serving's ({m['prompts']} prompts{short}, "
                        f"one block, all counted) {f3(m['bench_rom'])}, concurrency c/b "
                        f"{f1(m['bench_conc'][0])}/{f1(m['bench_conc'][1])}"
                    )
            for r in reps:
                print(bench_line(r, n))
            if reps:
                roms = [r["rom"] for r in reps]
                print(
                    f"  bench median of rep ratios {f3(statistics.median(roms))}, mean {f3(statistics.fmean(roms))}"
                )
            summary.append(summary_row(run["label"], cand, n, spx, reps))
    print(
        "\n== side by side: specproxy (med = median of per-pair ratios, rom = ratio of medians; "
        "wave 1 / later / +cool: rom of those requests; arr: the candidate's median arrivals during "
        "decode, wave 1/later; ms/arr: the candidate's decode slope) and bench_serving (rom per rep; "
        "conc: its concurrency, candidate/baseline, mean of reps)"
    )
    print(SUM_HEAD)
    for row in sorted(summary, key=lambda x: (x[1], x[2], x[0])):
        print(row[3])


SUM_HEAD = (
    f"{'run':<6} {'cand':<10} {'n':>3} {'pairs':>5} {'med':>6} {'rom':>6} {'wave 1':>6} {'later':>6} "
    f"{'+cool':>6} {'arr':>7} {'ms/arr':>6} {'model':>6} {'m-bench':>7}  {'bench rom per rep':<22} "
    f"{'conc c/b':>11}"
)


def summary_row(
    label: str, cand: str, n: int, spx: dict[str, Any] | None, reps: list[dict[str, Any]]
) -> tuple[str, str, int, str]:
    def rom(v: dict[str, Any] | None) -> str:
        return f3(v["rom"]) if v else "-"

    if spx:
        v = spx["all"]
        w, later = spx["wave1"], spx["later"]
        arr = f"{f0(w['c_arr']) if w else '-'}/{f0(later['c_arr']) if later else '-'}"
        slope = spx["fit"]["candidate"]["slope"]
        left = (
            f"{v['pairs']!s:>5} {f3(v['med_pair']):>6} {f3(v['rom']):>6} {rom(w):>6} {rom(later):>6} "
            f"{f3(spx['cool']['rom']):>6} {arr:>7} {f1(slope):>6} {f3(spx['model'].get('own_rom')):>6} "
            f"{f3(spx['model'].get('bench_rom')):>7}"
        )
    else:
        left = f"{'-':>5} {'-':>6} {'-':>6} {'-':>6} {'-':>6} {'-':>6} {'-':>7} {'-':>6} {'-':>6} {'-':>7}"
    bench = "/".join(f"{r['rom']:.2f}" for r in reps) or "-"
    conc = (
        f"{statistics.fmean(r['c_load'] for r in reps):.1f}/{statistics.fmean(r['b_load'] for r in reps):.1f}"
        if reps and all(r["c_load"] and r["b_load"] for r in reps)
        else "-"
    )
    text = f"{label:<6} {cand:<10} {n:>3} {left}  {bench:<22} {conc:>11}"
    return (label, cand, n, text)


if __name__ == "__main__":
    main()
