"""How long the comparison statistics and a whole report take on large runs.

Run from the repository root:

    .venv/bin/python bench/stats_speed.py [--pairs 10000]

Prints seconds for: the paired median-ratio intervals (E2E, TTFT, TPOT; exact order
statistics), the unpaired quantile intervals (2,000 bootstrap resamples each), building
the whole report model from a loaded run directory's record columns (per-token latencies
from its histogram logs), and loading plus rendering every format from it (per-token
latencies from its histogram logs).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from specproxy.core.compare.pairing import find_pairs, paired_ratios, unpaired_ratios
from specproxy.report.build import build_report
from specproxy.report.load import load_run_dir
from specproxy.report.write import write_reports
from specproxy.testing.fabricate import experiment, make_records, write_run_dir


def _timed(label: str, fn: Callable[[], object]) -> None:
    start = time.perf_counter()
    fn()
    print(f"{label:<52} {time.perf_counter() - start:7.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10_000)
    args = parser.parse_args()
    records = make_records(
        n_pairs=args.pairs,
        true_ratio=0.85,
        accept=lambda rng: rng.uniform(1.0, 4.0),
        categories=("code", "chat", "math"),
        chunks=True,
    )
    pairs = find_pairs(records).pairs
    print(f"{args.pairs} pairs ({len(records)} records)")
    _timed("paired median-ratio intervals, 3 metrics (exact)", lambda: paired_ratios(pairs))
    _timed(
        "unpaired p50/p90/p99 ratios, 3 metrics, 2000 resamples", lambda: unpaired_ratios(records)
    )
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = write_run_dir(Path(tmp) / "run", records, experiment())
        run = load_run_dir(run_dir)
        _timed("whole report model from the loaded columns", lambda: build_report([run]))
        out = Path(tmp) / "out"
        _timed(
            "load run dir + build + render text/md/html/json", lambda: write_reports([run_dir], out)
        )
        sizes = ", ".join(f"{p.name} {p.stat().st_size // 1024} KiB" for p in sorted(out.iterdir()))
        print(f"sizes: {sizes}")


if __name__ == "__main__":
    main()
