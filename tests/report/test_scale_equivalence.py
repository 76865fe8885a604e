"""The streamed report (chunk arrays reduced to spans) gives the same figures as the
in-memory report over full records, on the saved validation runs and fabricated runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from specproxy.core.compare_sides import throughput_timeline
from specproxy.report.build import BuildOptions, build_report, summary_for_experiment
from specproxy.report.load import RunData, load_run_dir, record_files
from tests.report.fabricate import experiment, make_records, read_record_file, write_run_dir

VALIDATION = Path(__file__).resolve().parents[2] / "docs" / "validation"
SAVED_RUNS = sorted(p.parent for p in VALIDATION.rglob("requests.jsonl"))


def _full(run_dir: Path) -> RunData:
    """The in-memory load of before streaming: every record with its chunk arrays."""
    data = load_run_dir(run_dir, keep_chunks=True)
    records = [rec for path in record_files(run_dir) for rec in read_record_file(path)]
    assert tuple(records) == data.records
    return data


def _assert_same(run_dir: Path, options: BuildOptions) -> None:
    full, streamed = _full(run_dir), load_run_dir(run_dir)
    old, new = build_report([full], options), build_report([streamed], options)
    assert summary_for_experiment(new) == summary_for_experiment(old)
    assert new == old
    assert new.plots.timeline == throughput_timeline(full.records, options.window_s)


@pytest.mark.parametrize("run_dir", SAVED_RUNS, ids=lambda p: str(p.relative_to(VALIDATION)))
@pytest.mark.parametrize("window_s", [None, 0.25])
def test_saved_validation_runs_report_the_same(run_dir: Path, window_s: float | None) -> None:
    """Every saved validation run gives identical figures streamed and in memory (a 0.25 s
    window makes most requests straddle a window edge, so chunks are read back)."""
    _assert_same(run_dir, BuildOptions(resamples=200, window_s=window_s))


def test_saved_validation_runs_exist() -> None:
    """The comparison above runs over real saved runs, not an empty list."""
    assert len(SAVED_RUNS) >= 4


@pytest.mark.parametrize("window_s", [None, 0.5])
def test_fabricated_run_with_failures_and_warmup_reports_the_same(
    tmp_path: Path, window_s: float | None
) -> None:
    """A fabricated mirror run with failures, warm-ups and chunked streams gives identical
    figures streamed and in memory."""
    records = make_records(
        n_pairs=120, true_ratio=0.8, chunks=True, warmup=3, fail_base=0.03, fail_cand=0.05
    )
    run = write_run_dir(tmp_path / "run", records, experiment())
    _assert_same(run, BuildOptions(resamples=200, window_s=window_s))


def test_run_without_histogram_logs_keeps_chunks_for_itl(tmp_path: Path) -> None:
    """Without ``itl_us`` logs the records keep their chunks (ITL comes from them), and the
    report still matches the in-memory one."""
    records = make_records(n_pairs=40, chunks=True)
    run = write_run_dir(tmp_path / "run", records, experiment(), histograms=False)
    streamed = load_run_dir(run)
    assert any(rec.measurement.chunk_offsets_us for rec in streamed.records)
    _assert_same(run, BuildOptions(resamples=200))


def test_streamed_records_drop_chunk_arrays_but_keep_spans(tmp_path: Path) -> None:
    """With histogram logs, the streamed records hold no chunk arrays; their spans hold
    each record's earliest and latest chunk offset and its chunk tokens."""
    records = make_records(n_pairs=10, chunks=True)
    run = write_run_dir(tmp_path / "run", records, experiment())
    streamed = load_run_dir(run)
    assert streamed.spans is not None
    assert not any(rec.measurement.chunk_offsets_us for rec in streamed.records)
    for i, rec in enumerate(records):
        m = rec.measurement
        if m.chunk_offsets_us:
            assert streamed.spans.low_us[i] == min(m.chunk_offsets_us)
            assert streamed.spans.high_us[i] == max(m.chunk_offsets_us)
            assert streamed.spans.tokens[i] == sum(m.chunk_tokens)
