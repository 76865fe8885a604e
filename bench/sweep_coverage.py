"""How often the sweep's crossover interval covers the true crossover: seeded sweeps on sims.

Not a test: prints figures. Each sweep starts the two simulators of issue 11's setup
(``specproxy/testing/crossover_setup.py``; every cost times ``--scale``, which leaves the
crossover unchanged) with a fresh ``--seed``, runs a short concurrency ladder in
alternate mode (``specproxy.sweep.run_sweep``) and checks whether the TPOT crossover's
interval (``core.load.crossover.estimate_crossover``) holds the crossover in concurrency that
the cost formula implies for a closed loop (``closed_loop_crossover``: the per-token
closed form N*, moved up by the half step a replacement request waits to join the
batch), and whether it holds N* itself. The E2E interval's coverage of N* is printed
too, for information (E2E adds the time to the first token, which the per-token closed
form leaves out). Figures: ``docs/validation/sweep-coverage/``.

Usage: ``nice python bench/sweep_coverage.py [--sweeps 50] [--levels 16,32,64]
[--pairs 128] [--output-tokens 24] [--scale 4] [--workers 1] [--json FILE]`` from the
repository root. ``--workers K`` runs K sweeps at a time, each in its own process with its
own pair of simulators (three processes per sweep: give each sweep about a core, or the
shared CPU becomes the timing). ``--json`` writes every sweep's crossovers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from specproxy.sweep.config import SweepConfig
from specproxy.sweep.run import run_sweep
from specproxy.testing.crossover_setup import (
    add_variation_options,
    closed_loop_crossover,
    crossover_sims,
    true_crossover,
    variation_flags,
    write_trace,
)


def _covers(crossover: dict[str, Any] | None, truth: float) -> bool:
    ci = (crossover or {}).get("ci")
    if not isinstance(ci, list):
        return False
    low, high = ci
    return float(low) <= truth <= (float("inf") if high is None else float(high))


def one_sweep(args: argparse.Namespace, seed: int, folder: Path, trace: Path) -> dict[str, Any]:
    extra = variation_flags(args)
    with crossover_sims(args.scale, seed, args.per_token_us, extra) as (base, cand):
        cfg = SweepConfig(
            traces=(str(trace),), baseline=base, candidate=cand, concurrency=args.levels,
            pairs=args.pairs, block_size=args.block_size, output_len=args.output_tokens,
            seed=seed, run_dir=str(folder / f"sweep-{seed:03d}"), snapshots=False,
        )  # fmt: skip
        outcome = asyncio.run(run_sweep(cfg))
    return outcome.doc["settings"][0]["crossovers"]  # type: ignore[no-any-return]


def _write_json(args: argparse.Namespace, found: dict[int, dict[str, Any]]) -> None:
    """Every finished sweep's crossovers so far (rewritten after each sweep)."""
    if args.json is not None:
        doc = {"args": {k: str(v) for k, v in vars(args).items()}, "sweeps": found}
        args.json.write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")


def _report(args: argparse.Namespace, found: dict[int, dict[str, Any]], elapsed: float) -> None:
    truth = true_crossover(args.per_token_us)
    loop = closed_loop_crossover(args.output_tokens, args.per_token_us)
    n = len(found)
    tpot = [f.get("tpot") or {} for f in found.values()]
    held = {
        "TPOT, closed form N*": sum(_covers(t, truth) for t in tpot),
        "TPOT, closed loop": sum(_covers(t, loop) for t in tpot),
        "E2E, closed form N*": sum(_covers(f.get("e2e"), truth) for f in found.values()),
        "E2E, closed loop": sum(_covers(f.get("e2e"), loop) for f in found.values()),
    }
    for name, count in held.items():
        print(f"{name}: interval held the truth in {count}/{n} sweeps ({count / max(n, 1):.0%})")
    estimates = sorted(float(t["estimate"]) for t in tpot if t.get("estimate") is not None)
    if estimates:
        print(f"TPOT estimate: median {statistics.median(estimates):.1f}, range"
              f" {estimates[0]:.1f} to {estimates[-1]:.1f}; N* = {truth:.2f},"
              f" closed loop {loop:.2f}; {elapsed:.0f} s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=50)
    parser.add_argument("--levels", default="16,32,64")
    parser.add_argument("--pairs", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=24)
    parser.add_argument("--scale", type=float, default=4.0)
    parser.add_argument(
        "--per-token-us",
        type=float,
        default=100.0,
        help="Per-token cost on both sides (1000: crossover near 5 streams).",
    )
    parser.add_argument("--block-size", type=int, default=16)
    add_variation_options(parser, regime_sigma=0.0, drift_every_s=0.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None, help="Write every sweep's crossovers.")
    parser.add_argument("--keep", type=Path, default=None, help="Keep the sweeps in this folder.")
    args = parser.parse_args()
    truth = true_crossover(args.per_token_us)
    print(f"true per-token crossover N*: {truth:.2f} concurrent streams; closed loop"
          f" {closed_loop_crossover(args.output_tokens, args.per_token_us):.2f}; levels {args.levels};"
          f" {args.output_tokens}-token outputs; costs x{args.scale:g}", flush=True)  # fmt: skip
    started = time.monotonic()
    found: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="sweep-coverage-") as tmp:
        folder = args.keep or Path(tmp)
        trace = write_trace(folder / "trace.jsonl", 1000, args.output_tokens)
        with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
            jobs = {
                pool.submit(one_sweep, args, seed, folder, trace): seed
                for seed in range(args.sweeps)
            }
            for job in as_completed(jobs):
                seed, crossovers = jobs[job], job.result()
                found[seed] = crossovers
                tp = crossovers.get("tpot") or {}
                e2e = crossovers.get("e2e") or {}
                print(f"seed {seed:3d}: TPOT {tp.get('estimate')} {tp.get('ci')}, E2E"
                      f" {e2e.get('estimate')} {e2e.get('ci')}", flush=True)  # fmt: skip
                _write_json(args, found)
    _report(args, dict(sorted(found.items())), time.monotonic() - started)


if __name__ == "__main__":
    main()
