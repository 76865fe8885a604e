"""How long the comparison statistics and a whole report take on large runs.

Run from the repository root:

    .venv/bin/python bench/stats_speed.py [--pairs 10000]

Prints seconds for: the paired median-ratio intervals (E2E, TTFT, TPOT; exact order
statistics) and the unpaired quantile intervals (2,000 bootstrap resamples each), both
over a loaded run directory's record columns as the report computes them, building
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

from specproxy.core.compare.column_figures import (
    CompletedValues,
    PairColumns,
    PairSeries,
    pair_replication,
    paired_ratios,
    unpaired_ratios,
)
from specproxy.core.compare.pairing import PairedRatio, QuantileRatio
from specproxy.core.records.columns import RecordColumns
from specproxy.core.records.model import Role
from specproxy.report.build import build_report
from specproxy.report.load import load_run_dir
from specproxy.report.write import write_reports
from specproxy.testing.fabricate import experiment, make_records, write_run_dir


def _timed(label: str, fn: Callable[[], object]) -> None:
    start = time.perf_counter()
    fn()
    print(f"{label:<52} {time.perf_counter() - start:7.3f} s")


def _paired(cols: RecordColumns) -> tuple[PairedRatio, ...]:
    pairs = PairColumns.of(cols)
    series = PairSeries.of(cols, pairs)
    units = series.units()
    return paired_ratios(series, units, pair_replication(cols, pairs, series, units).flagged)


def _unpaired(cols: RecordColumns) -> tuple[QuantileRatio, ...]:
    base, cand = (CompletedValues.of(cols, side) for side in (Role.BASELINE, Role.CANDIDATE))
    return unpaired_ratios(base, cand)


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
    print(f"{args.pairs} pairs ({len(records)} records)")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = write_run_dir(Path(tmp) / "run", records, experiment())
        run = load_run_dir(run_dir)
        cols = run.columns
        _timed("paired median-ratio intervals, 3 metrics (exact)", lambda: _paired(cols))
        _timed("unpaired p50/p90/p99 ratios, 3 metrics, 2000 resamples", lambda: _unpaired(cols))
        _timed("whole report model from the loaded columns", lambda: build_report([run]))
        out = Path(tmp) / "out"
        _timed(
            "load run dir + build + render text/md/html/json", lambda: write_reports([run_dir], out)
        )
        sizes = ", ".join(f"{p.name} {p.stat().st_size // 1024} KiB" for p in sorted(out.iterdir()))
        print(f"sizes: {sizes}")


if __name__ == "__main__":
    main()
