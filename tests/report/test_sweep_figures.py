"""Goodput of a sweep level, counted over the level's record columns."""

from __future__ import annotations

from pathlib import Path

from specproxy.core.records.model import ErrorKind, Role
from specproxy.report.load import load_run_dir
from specproxy.report.sweep_figures import good_requests
from specproxy.testing.fabricate import experiment, record, write_run_dir


def test_good_requests_count_completed_requests_within_every_bound(tmp_path: Path) -> None:
    """Only completed, non-warm-up requests of the side count, each bound is applied, and a
    request without the bounded figure fails that bound."""
    records = [
        record(Role.BASELINE, "a", ttft_us=50_000, tpot_us=5_000),  # good
        record(Role.BASELINE, "b", ttft_us=250_000, tpot_us=5_000),  # TTFT too slow
        record(Role.BASELINE, "c", ttft_us=50_000, tpot_us=30_000),  # TPOT too slow
        record(Role.BASELINE, "d", ttft_us=50_000, tpot_us=None),  # no TPOT
        record(Role.BASELINE, "e", error=ErrorKind.TIMEOUT),  # failed
        record(Role.BASELINE, "f", ttft_us=10_000, tpot_us=1_000, warmup=True),
        record(Role.CANDIDATE, "a", ttft_us=10_000, tpot_us=1_000),  # the other side
    ]
    cols = load_run_dir(write_run_dir(tmp_path / "run", records, experiment())).columns
    assert good_requests(cols, Role.BASELINE, 100.0, 20.0) == 1
    assert good_requests(cols, Role.BASELINE, 100.0, None) == 3
    assert good_requests(cols, Role.BASELINE, None, 20.0) == 2
    assert good_requests(cols, Role.BASELINE, None, None) == 4
    assert good_requests(cols, Role.CANDIDATE, 100.0, 20.0) == 1
