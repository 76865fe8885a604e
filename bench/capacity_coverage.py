"""How often the sweep's capacity intervals (and its crossover interval) cover the truth.

Not a test: prints figures. Each sweep starts the two simulators of issue 11's setup
(``tests/sweep/crossover_setup.py``, every cost times ``--scale``) with a fresh seed, runs
``specproxy sweep`` over a short concurrency ladder with ``--slo tpot_pQ_ms=B`` and checks:

- **capacity** (each side, in concurrency): whether the 95% interval holds the capacity
  the simulator's cost model implies (``true_capacity``);
- **ratio**: whether the interval of the load ratio candidate/baseline holds the true one;
- **crossover**: whether the TPOT crossover's interval holds the closed-loop crossover
  (``closed_loop_crossover``, as ``bench/sweep_coverage.py`` judges it); E2E for
  information.

The truth, from ``sim.engine``'s cost model: a step over ``b`` running requests costs
``fixed + per_token * tokens_per_request * b`` (``core.load.crossover.SideCost``). A request's
first token comes from its prefill; the other ``L - 1`` take ``K`` decode steps: ``L - 1``
on the baseline, and on the candidate as many verify steps as its kept drafts need
(each step emits ``1 + kept``, ``kept`` drawn as ``sim.acceptance`` does), so its TPOT is
``K * step / (L - 1)``. Its Q-th percentile is the Q-quantile of ``K`` (exact distribution
below) times the step time over ``L - 1``. In a closed loop of ``n`` a request waits half a
step on average to join the batch, so the batch runs ``b = n * S / (S + 1/2)`` with ``S``
the mean steps per request (as ``closed_loop_crossover``). The capacity is the ``n`` where
that percentile equals ``B``. Pick ``Q`` inside an atom of ``K``'s distribution (the script
prints it); at an atom's edge the truth jumps between two values.

Two truths measured on the simulator beside it: the *reference*, ten more sweeps'
requests pooled per level and crossed as a sweep crosses them (the primary truth), and,
for information, the *pooled sweeps*, the 50 sweeps' own requests pooled the same way. The
simulator runs in real time on the host, so its TPOT carries the host's scheduling delays:
when the reference sweeps (run last) met a busier or quieter host than the others, the two
differ, and a difference there is the host's, not the estimator's. Each interval that
missed the reference is printed with its seed, estimate and interval.

The intervals are not corrected for the stopping rule's repeated looks: what is measured
here is their coverage as they are. Each batch takes new trace requests (the sweep's
``--fresh-prompts``): the simulator draws a request's acceptance from its content, so a
sweep that replays the same requests in every block has units that differ only in timing,
and its interval is conditional on those requests (``--same-prompts`` measures that).
Usage (repository root):
``nice python bench/capacity_coverage.py [--sweeps 50] [--workers 2] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from specproxy.core.load.capacity import SIDES, Bound, first_crossing
from specproxy.core.records.column_concat import concat
from specproxy.core.statistics.stats import quantile_sorted
from specproxy.report.build import build_report
from specproxy.report.load import load_run_dir
from specproxy.sweep.capacity import level_sample
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.run import run_sweep
from specproxy.testing.crossover_setup import (
    ACCEPT,
    DRAFT_TOKENS,
    STEPS,
    closed_loop_crossover,
    crossover_sims,
    setup_costs,
    write_trace,
)


def steps_distribution(tokens: int) -> dict[int, float]:
    """P(K = k): verify steps the candidate needs for ``tokens`` tokens (``sim.acceptance``:
    each step keeps each of at most ``m`` drafts with probability ``ACCEPT`` until the first
    rejection, and emits the kept drafts plus one)."""
    m = min(STEPS, DRAFT_TOKENS - 1)
    per_step = [(1 - ACCEPT) * ACCEPT**k for k in range(m)] + [ACCEPT**m]
    dist: list[dict[int, float]] = [{0: 1.0}]
    for left in range(1, tokens + 1):
        d: dict[int, float] = collections.defaultdict(float)
        for kept, p in enumerate(per_step):
            for k, q in dist[max(0, left - kept - 1)].items():
                d[k + 1] += p * q
        dist.append(dict(d))
    return dict(sorted(dist[tokens].items()))


def steps_quantile(tokens: int, q: float) -> tuple[int, float, float]:
    """The ``q``-quantile of K and the CDF just below and at it."""
    below = 0.0
    for k, p in steps_distribution(tokens).items():
        if below + p >= q:
            return k, below, below + p
        below += p
    raise ValueError("q beyond the distribution")


def true_capacity(args: argparse.Namespace) -> dict[str, float]:
    """Each side's capacity in concurrency under ``tpot_p{Q}_ms = B`` (module docstring)."""
    base, cand = setup_costs(args.per_token_us)
    tokens = args.output_tokens - 1
    k_q, _, _ = steps_quantile(tokens, args.percentile / 100)
    bound_us = args.bound_ms * 1000 / args.scale  # in the unscaled costs
    out = {}
    for side, cost, steps, per_step in (
        ("baseline", base, tokens, 1.0),
        ("candidate", cand, tokens / cand.tokens_per_step, k_q / tokens),
    ):
        fixed = cost.step_us + cost.draft_us
        slope = cost.per_token_us * cost.tokens_per_request
        batch = (bound_us / per_step - fixed) / slope
        out[side] = batch * (steps + 0.5) / steps
    out["ratio"] = out["candidate"] / out["baseline"]
    return out


def one_sweep(args: argparse.Namespace, seed: int, folder: Path, trace: Path) -> dict[str, Any]:
    slo = f"tpot_p{args.percentile:g}_ms={args.bound_ms:g}"
    with crossover_sims(args.scale, seed, args.per_token_us) as (base, cand):
        cfg = SweepConfig(
            traces=(str(trace),), baseline=base, candidate=cand, concurrency=args.levels,
            pairs=args.pairs, block_size=args.block_size, output_len=args.output_tokens,
            seed=seed, run_dir=str(folder / f"sweep-{seed:03d}"), snapshots=False, slo=slo,
            fresh_prompts=not args.same_prompts,
        )  # fmt: skip
        outcome = asyncio.run(run_sweep(cfg))
        values = level_values(outcome.root)
    entry = outcome.doc["settings"][0]
    return {"crossovers": entry["crossovers"], "capacity": entry["capacity"], "values": values,
            "units": {str(lv["level"]): lv["units"] for lv in entry["levels"]}}  # fmt: skip


def level_values(root: Path) -> dict[str, dict[str, list[float]]]:
    """Each level's TPOT values (ms, ``inf`` failed) per side, as the capacity saw them."""
    out: dict[str, dict[str, list[float]]] = {}
    for line in (root / "experiments.jsonl").read_text(encoding="utf-8").splitlines():
        level = json.loads(line)
        runs = [load_run_dir(p) for p in level["batches"]]
        if not runs:
            continue
        sample = level_sample(concat([r.columns for r in runs]), build_report(runs),
                              float(level["level"]), "concurrency")  # fmt: skip
        out[f"{level['level']:g}"] = {
            side: [v for g in sample.values[side]["tpot"] for v in g] for side in SIDES
        }
    return out


def reference_capacity(args: argparse.Namespace, refs: list[dict[str, Any]]) -> dict[str, float]:
    """The capacity of the reference sweeps' pooled requests at each level (their
    percentile, crossed as the sweep crosses it): the truth the ladder's estimate aims at."""
    loads = sorted({float(k) for r in refs for k in r["values"]})
    bound = Bound("tpot", args.percentile, args.bound_ms)
    out = {}
    for side in SIDES:
        points = []
        for load in loads:
            pooled = sorted(v for r in refs for v in r["values"].get(f"{load:g}", {}).get(side, []))
            points.append(quantile_sorted(pooled, bound.percentile / 100))
        out[side] = first_crossing(loads, points, bound.limit_ms)
    out["ratio"] = out["candidate"] / out["baseline"]
    return out


def covers(est: dict[str, Any] | None, truth: float) -> bool:
    ci = (est or {}).get("ci")
    if not isinstance(ci, list):
        return False
    low, high = ci
    return float(low) <= truth <= (float("inf") if high is None else float(high))


def _held(caps: list[dict[str, Any]], truth: dict[str, float]) -> dict[str, int]:
    return {
        "baseline": sum(covers((c.get("baseline") or {}).get("load"), truth["baseline"]) for c in caps),
        "candidate": sum(covers((c.get("candidate") or {}).get("load"), truth["candidate"]) for c in caps),
        "ratio": sum(covers(c.get("load_ratio"), truth["ratio"]) for c in caps),
    }  # fmt: skip


def _misses(found: dict[int, dict[str, Any]], truth: dict[str, float]) -> dict[str, list[str]]:
    """Each capacity interval that missed the reference truth: seed, estimate, interval,
    and the side of the truth it lies on (printed, and kept in the JSON summary)."""
    out: dict[str, list[str]] = {}
    for what in ("baseline", "candidate", "ratio"):
        lines = []
        for seed, f in found.items():
            cap = f.get("capacity") or {}
            est = cap.get("load_ratio") if what == "ratio" else (cap.get(what) or {}).get("load")
            if covers(est, truth[what]):
                continue
            ci, point = (est or {}).get("ci"), (est or {}).get("estimate")
            side = "no interval" if not ci else ("above" if ci[0] > truth[what] else "below")
            lines.append(f"seed {seed}: {point} {ci} ({side} the truth {truth[what]:.4f})")
        out[what] = lines
        for line in lines:
            print(f"  {what} miss, {line}")
    return out


def _report(
    args: argparse.Namespace, found: dict[int, dict[str, Any]], refs: list[dict[str, Any]],
    mains: list[dict[str, Any]], elapsed: float,
) -> dict[str, Any]:  # fmt: skip
    truths = {"reference": reference_capacity(args, refs), "cost model": true_capacity(args),
              "pooled sweeps": reference_capacity(args, mains)}  # fmt: skip
    loop = closed_loop_crossover(args.output_tokens, args.per_token_us)
    n = len(found)
    caps = [f.get("capacity") or {} for f in found.values()]
    held = {name: _held(caps, truth) for name, truth in truths.items()}
    crossovers = {m: sum(covers((f["crossovers"] or {}).get(m), loop) for f in found.values())
                  for m in ("tpot", "e2e")}  # fmt: skip
    for name, counts in held.items():
        truth = truths[name]
        for what, count in counts.items():
            print(f"capacity {what} vs the {name} truth {truth[what]:.3f}: interval held it in"
                  f" {count}/{n} sweeps ({count / max(n, 1):.0%})")  # fmt: skip
    for metric, count in crossovers.items():
        print(f"{metric.upper()} crossover vs the closed loop {loop:.2f}: interval held it in"
              f" {count}/{n} sweeps ({count / max(n, 1):.0%})")  # fmt: skip
    medians = {}
    for side in SIDES:
        points = sorted(
            e
            for c in caps
            if (e := ((c.get(side) or {}).get("load") or {}).get("estimate")) is not None
        )
        if points:
            medians[side] = points[len(points) // 2]
            print(
                f"{side} capacity: median estimate {medians[side]:.2f} (range {points[0]:.2f} to {points[-1]:.2f})"
            )
    misses = _misses(found, truths["reference"])
    print(f"{elapsed:.0f} s")
    return {"reference_misses": misses, "sweeps": n, "reference_sweeps": len(refs), "truth": truths,
            "capacity_covered": held, "crossover_closed_loop": loop,
            "crossover_covered": crossovers, "median_estimates": medians,
            "elapsed_s": round(elapsed)}  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=50)
    parser.add_argument("--reference", type=int, default=10, help="Reference sweeps (pooled).")
    parser.add_argument("--levels", default="2,4,8")
    parser.add_argument("--pairs", type=int, default=96)
    parser.add_argument("--output-tokens", type=int, default=24)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--per-token-us", type=float, default=1000.0)
    parser.add_argument("--percentile", type=float, default=85.0)
    parser.add_argument("--bound-ms", type=float, default=10.0, help="TPOT bound (scaled ms).")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--same-prompts",
        action="store_true",
        help="Every batch replays the trace's first requests (the sweep's default); without"
        " it each batch takes new ones (--fresh-prompts), so the units sample requests.",
    )
    parser.add_argument("--json", type=Path, default=None, help="Write every sweep's figures.")
    parser.add_argument("--keep", type=Path, default=None, help="Keep the sweeps in this folder.")
    return parser


def _line(seed: int, got: dict[str, Any]) -> str:
    cap = got["capacity"] or {}
    b, c = ((cap.get(s) or {}).get("load") or {} for s in SIDES)
    tpot = (got["crossovers"] or {}).get("tpot") or {}
    return (f"seed {seed:4d}: capacity b {b.get('estimate')} {b.get('ci')}, c {c.get('estimate')}"
            f" {c.get('ci')}; TPOT crossover {tpot.get('estimate')} {tpot.get('ci')}")  # fmt: skip


def main() -> None:
    args = _parser().parse_args()
    truth = true_capacity(args)
    k, below, at = steps_quantile(args.output_tokens - 1, args.percentile / 100)
    print(f"SLO tpot_p{args.percentile:g}_ms={args.bound_ms:g}; K quantile {k} (CDF {below:.3f}"
          f" to {at:.3f}); cost-model capacity: baseline {truth['baseline']:.2f}, candidate"
          f" {truth['candidate']:.2f} streams (ratio {truth['ratio']:.3f}); closed-loop crossover"
          f" {closed_loop_crossover(args.output_tokens, args.per_token_us):.2f}; levels"
          f" {args.levels}", flush=True)  # fmt: skip
    started = time.monotonic()
    found: dict[int, dict[str, Any]] = {}
    refs: list[dict[str, Any]] = []
    mains: list[dict[str, Any]] = []
    seeds = [*range(args.sweeps), *range(10_000, 10_000 + args.reference)]
    with tempfile.TemporaryDirectory(prefix="capacity-coverage-") as tmp:
        folder = args.keep or Path(tmp)
        trace = write_trace(folder / "trace.jsonl", 4000, args.output_tokens)
        with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
            jobs = {pool.submit(one_sweep, args, s, folder, trace): s for s in seeds}
            for job in as_completed(jobs):
                seed, got = jobs[job], job.result()
                print(("reference " if seed >= 10_000 else "") + _line(seed, got), flush=True)
                if seed >= 10_000:
                    refs.append(got)
                else:
                    mains.append({"values": got["values"]})
                    found[seed] = {k: v for k, v in got.items() if k != "values"}
    summary = _report(args, dict(sorted(found.items())), refs, mains, time.monotonic() - started)
    if args.json is not None:
        doc = {"args": {k: str(v) for k, v in vars(args).items()}, "summary": summary,
               "sweeps": dict(sorted(found.items()))}  # fmt: skip
        args.json.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")


if __name__ == "__main__":
    main()
