"""Do the paired intervals survive block effects and drift? Seeded alternate runs on sims.

Not a test: prints figures. Each experiment starts a simulated baseline and a simulated
STANDALONE candidate (``specproxy/testing/crossover_setup.py``'s costs, contention 0) with
``sim.variation`` switched on: every ``--regime-s`` seconds each server's step costs take
a new lognormal factor of median 1 (``--regime-sigma``), so requests in one block share a
factor as they share a real server's state; and drift episodes start after exponential
gaps of mean ``--drift-every-s`` seconds, making that server ``1 + --drift-slowdown``
times slower for ``--drift-s`` seconds. It then runs one alternate-mode replay
(``--blocks`` block pairs of ``--block-size`` requests at ``--concurrency`` streams, the
last ``n`` of each block a cool-down, as a sweep level does) and reads the ordinary report.

The true ratio is the median per-pair E2E ratio without variation: the pooled median of
``--reference`` runs of the same setup with variation off (median-1 factors leave the
population median where it is; drift is what the report must flag, not what it measures).
Printed per setting:

- how often the report's 95% interval (spread between block pairs, ``core.compare.blocks``)
  holds the truth, beside the per-pair order-statistic interval the report used before;
- among runs where an episode covered at least one whole window (a block on that side),
  how often the report flagged drift on that side; and how often it flagged drift in runs
  with no episode at all;
- the verdicts given.

Usage (repository root): ``python bench/block_coverage.py [--experiments 200]
[--workers 2] [--json FILE]``; see ``--help`` for the setting's flags.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from specproxy.core.compare.pairing import Metric, find_pairs
from specproxy.core.records.model import RequestRecord, Role
from specproxy.core.statistics.stats import quantile_interval, quantile_sorted
from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay
from specproxy.report.build import build_report
from specproxy.report.load import load_run_dir
from specproxy.testing.crossover_setup import (
    add_variation_options,
    sim_args,
    sim_pair,
    variation_flags,
    write_trace,
)


def _replay(args: argparse.Namespace, base: str, cand: str, trace: Path, folder: Path,
            blocks: int, seed: int) -> Path:  # fmt: skip
    run_dir = folder / f"run-{seed:04d}"
    cfg = ReplayConfig(
        traces=(str(trace),), baseline=base, candidate=cand, mode="alternate",
        block_size=args.block_size, concurrency=args.concurrency,
        limit=blocks * args.block_size, cooldown=args.concurrency, seed=seed,
        route="generate", output_len=args.output_tokens, ignore_eos=True,
        run_dir=str(run_dir), snapshots=False, drain_s=5.0,
    )  # fmt: skip
    asyncio.run(run_replay(cfg))
    return run_dir


def _windows(run_dir: Path) -> dict[Role, list[tuple[float, float]]]:
    """Each side's counted block windows (first send to last end, Unix s)."""
    spans: dict[tuple[Role, str], list[float]] = {}
    for line in (run_dir / "requests.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("warmup"):
            continue
        side = Role(rec["side"])
        end = rec["sent_at_unix_s"] + (rec.get("e2e_us") or 0) / 1e6
        key = (side, (rec.get("labels") or {}).get("block", "?"))
        lo, hi = spans.get(key, [math.inf, -math.inf])
        spans[key] = [min(lo, rec["sent_at_unix_s"]), max(hi, end)]
    out: dict[Role, list[tuple[float, float]]] = {Role.BASELINE: [], Role.CANDIDATE: []}
    for (side, _), (lo, hi) in spans.items():
        out[side].append((lo, hi))
    return out


def _had_drift(windows: list[tuple[float, float]], episodes: list[tuple[float, float]]) -> bool:
    return any(a <= lo and hi <= b for lo, hi in windows for a, b in episodes)


def one(args: argparse.Namespace, seed: int, folder: Path, trace: Path, *, on: bool,
        blocks: int) -> dict[str, Any]:  # fmt: skip
    """One seeded experiment; what its report said, and what happened on the servers."""
    base_args, cand_args = sim_args(args.scale, seed, extra=variation_flags(args) if on else [])
    with sim_pair(base_args, cand_args) as ((base, base_drift), (cand, cand_drift)):
        run_dir = _replay(args, base, cand, trace, folder, blocks, seed)
    report = build_report([load_run_dir(run_dir)])
    e2e = report.paired[0]
    pairs = find_pairs(_records(run_dir)).pairs
    ratios = [r for p in pairs if (r := p.failure_aware_ratio(Metric.E2E)) is not None]
    old = quantile_interval(ratios)
    windows = _windows(run_dir)
    iv = e2e.interval
    return {
        "seed": seed,
        "point": iv.point if iv else None,
        "ci": [iv.low, iv.high] if iv else None,
        "old_ci": [old.low, old.high],
        "units": e2e.units,
        "verdict": report.verdict.label.value,
        "flagged": sorted({e.side.value for e in report.replication.episodes}),
        "episodes": [e.describe() for e in report.replication.episodes],
        "drift": {
            "baseline": _had_drift(windows[Role.BASELINE], base_drift),
            "candidate": _had_drift(windows[Role.CANDIDATE], cand_drift),
        },
        "any_episode_overlap": any(
            a < hi and lo < b
            for side, eps in ((Role.BASELINE, base_drift), (Role.CANDIDATE, cand_drift))
            for lo, hi in windows[side]
            for a, b in eps
        ),
        "heterogeneity_p": report.replication.heterogeneity.p_value
        if report.replication.heterogeneity
        else None,
    }


def _records(run_dir: Path) -> list[RequestRecord]:
    lines = (run_dir / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    return [RequestRecord.from_dict(json.loads(line)) for line in lines if line.strip()]


def _truth(args: argparse.Namespace, folder: Path, trace: Path) -> float:
    """The pooled median per-pair E2E ratio of the reference runs (variation off)."""
    ratios: list[float] = []
    for k in range(args.reference):
        one(args, 100_000 + k, folder, trace, on=False, blocks=args.reference_blocks)
        pairs = find_pairs(_records(folder / f"run-{100_000 + k:04d}")).pairs
        ratios += [r for p in pairs if (r := p.failure_aware_ratio(Metric.E2E)) is not None]
    ratios.sort()
    reference = build_report(
        [load_run_dir(folder / f"run-{100_000 + k:04d}") for k in range(args.reference)]
    )
    iv = reference.paired[0].interval
    if iv is not None:
        print(f"reference runs (variation off): {iv.point:.4f} [{iv.low:.4f}, {iv.high:.4f}] over "
              f"{iv.units} block pairs, {iv.n} pairs", flush=True)  # fmt: skip
    return quantile_sorted(ratios, 0.5)


def _summary(args: argparse.Namespace, truth: float, runs: list[dict[str, Any]]) -> None:
    n = len(runs)
    covered = sum(r["ci"] is not None and r["ci"][0] <= truth <= r["ci"][1] for r in runs)
    old = sum(r["old_ci"][0] <= truth <= r["old_ci"][1] for r in runs)
    drifted = [(r, side) for r in runs for side, had in r["drift"].items() if had]
    caught = sum(side in r["flagged"] for r, side in drifted)
    clean = [r for r in runs if not r["any_episode_overlap"]]
    false = sum(bool(r["flagged"]) for r in clean)
    verdicts = statistics.multimode([r["verdict"] for r in runs])
    counts = {v: sum(r["verdict"] == v for r in runs) for v in sorted({r["verdict"] for r in runs})}
    print(f"truth (pooled median per-pair E2E ratio without variation): {truth:.4f}")
    print(f"block-pair interval held the truth in {covered}/{n} runs ({covered / max(n, 1):.1%})")
    print(
        f"per-pair order-statistic interval (the old one) held it in {old}/{n} ({old / max(n, 1):.1%})"
    )
    print(
        f"drift covering a whole window: {len(drifted)} side-runs, flagged on that side in "
        f"{caught} ({caught / max(len(drifted), 1):.1%})"
    )
    print(f"runs with no episode overlapping any window: {len(clean)}, drift flagged in {false}")
    print(f"verdicts: {counts} (most common: {', '.join(verdicts)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=200)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--blocks", type=int, default=8, help="Block pairs per experiment.")
    parser.add_argument("--output-tokens", type=int, default=32)
    parser.add_argument("--scale", type=float, default=1.0, help="Multiplies every sim cost.")
    add_variation_options(parser, regime_sigma=0.07, drift_every_s=40.0)
    parser.add_argument("--reference", type=int, default=3, help="Reference runs for the truth.")
    parser.add_argument("--reference-blocks", type=int, default=24)
    parser.add_argument("--truth", type=float, default=None, help="Skip the reference runs.")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="Keep the run directories here.")
    parser.add_argument("--seeds", default=None, help="Only these seeds (comma-separated).")
    args = parser.parse_args()
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="block-coverage-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        trace = write_trace(folder / "trace.jsonl", 4000, args.output_tokens)
        truth = args.truth if args.truth is not None else _truth(args, folder, trace)
        print(f"truth {truth:.4f} ({time.monotonic() - started:.0f} s)", flush=True)
        with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
            jobs = {
                pool.submit(one, args, seed, folder, trace, on=True, blocks=args.blocks): seed
                for seed in (
                    [int(x) for x in args.seeds.split(",")]
                    if args.seeds
                    else range(args.experiments)
                )
            }
            for job in as_completed(jobs):
                run = job.result()
                runs.append(run)
                ci = run["ci"]
                print(f"seed {run['seed']:3d}: {run['point']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] "
                      f"over {run['units']} block pairs, {run['verdict']}, drift "
                      f"{run['drift']} flagged {run['flagged']}", flush=True)  # fmt: skip
                if args.json is not None:
                    doc = {"args": vars(args) | {"json": str(args.json)}, "truth": truth,
                           "runs": sorted(runs, key=lambda r: r["seed"])}  # fmt: skip
                    args.json.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    _summary(args, truth, runs)
    print(f"{len(runs)} experiments in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
