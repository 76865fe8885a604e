"""How often the sweep's crossover interval covers the true crossover: seeded sweeps on sims.

Not a test: prints figures. Each sweep starts the two simulators of issue 11's setup
(``tests/sweep/crossover_setup.py``; every cost times ``--scale``, which leaves the
crossover unchanged) with a fresh ``--seed``, runs a short concurrency ladder in
alternate mode (``specproxy.sweep.run_sweep``) and checks whether the TPOT crossover's
interval (``core.crossover.estimate_crossover``) holds the closed-form per-token
crossover. The E2E interval's coverage is printed too, for information (E2E adds the
time to the first token, which the per-token closed form leaves out), and the TPOT
interval's coverage of the closed-loop crossover (``closed_loop_crossover``: N* moved up
by the half step a replacement request waits to join the batch).

Usage: ``nice python bench/sweep_coverage.py [--sweeps 50] [--levels 16,32,64]
[--pairs 128] [--output-tokens 24] [--scale 4]`` from the repository root.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specproxy.sweep.config import SweepConfig
from specproxy.sweep.run import run_sweep
from tests.sweep.crossover_setup import (
    closed_loop_crossover,
    crossover_sims,
    true_crossover,
    write_trace,
)


def _covers(crossover: dict[str, object] | None, truth: float) -> bool:
    ci = (crossover or {}).get("ci")
    if not isinstance(ci, list):
        return False
    low, high = ci
    return float(low) <= truth <= (float("inf") if high is None else float(high))


def one_sweep(args: argparse.Namespace, seed: int, folder: Path, trace: Path) -> dict[str, object]:
    with crossover_sims(args.scale, seed) as (base, cand):
        cfg = SweepConfig(
            traces=(str(trace),), baseline=base, candidate=cand, concurrency=args.levels,
            pairs=args.pairs, block_size=16, output_len=args.output_tokens, seed=seed,
            run_dir=str(folder / f"sweep-{seed:03d}"), snapshots=False,
        )  # fmt: skip
        outcome = asyncio.run(run_sweep(cfg))
    return outcome.doc["settings"][0]["crossovers"]  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=50)
    parser.add_argument("--levels", default="16,32,64")
    parser.add_argument("--pairs", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=24)
    parser.add_argument("--scale", type=float, default=4.0)
    parser.add_argument("--keep", type=Path, default=None, help="Keep the sweeps in this folder.")
    args = parser.parse_args()
    truth = true_crossover()
    print(f"true per-token crossover: {truth:.2f} concurrent streams; levels {args.levels}")
    covered = {"tpot": 0, "e2e": 0, "loop": 0}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sweep-coverage-") as tmp:
        folder = args.keep or Path(tmp)
        trace = write_trace(folder / "trace.jsonl", 1000, args.output_tokens)
        for seed in range(args.sweeps):
            found = one_sweep(args, seed, folder, trace)
            for metric in ("tpot", "e2e"):
                covered[metric] += _covers(found.get(metric), truth)  # type: ignore[arg-type]
            covered["loop"] += _covers(found.get("tpot"), closed_loop_crossover(args.output_tokens))
            tp = found["tpot"] or {}
            print(f"seed {seed:3d}: TPOT estimate {tp.get('estimate')}, interval {tp.get('ci')},"
                  f" covers {_covers(tp, truth)}", flush=True)  # fmt: skip
    n = args.sweeps
    loop = closed_loop_crossover(args.output_tokens)
    print(
        f"TPOT interval held the closed-loop crossover ({loop:.1f}, N* corrected for the"
        f" wait to join the batch) in {covered['loop']}/{n} sweeps ({covered['loop'] / n:.0%})"
    )
    print(f"TPOT interval covered the truth in {covered['tpot']}/{n} sweeps"
          f" ({covered['tpot'] / n:.0%}); E2E in {covered['e2e']}/{n} ({covered['e2e'] / n:.0%});"
          f" {time.monotonic() - started:.0f} s")  # fmt: skip


if __name__ == "__main__":
    main()
