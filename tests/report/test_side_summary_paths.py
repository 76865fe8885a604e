"""The side summary is built once (``core.records.tally.build_side_summary``) from what each path
reduces its data to: the recorder's running tallies (record by record) and the report's
column pass (``core.compare.column_figures.side_summary``). Fed the same records, the two
give equal ``SideSummary`` objects, on mixes meant to catch a rule applied differently:
failures of several kinds (some carrying latencies, tokens and an E2E), warm-ups (one
failed, one far outside the window), shadow copies (one dropped), requests without an
intended send time, early sends (negative lag), touching, nested and separate intervals,
completed requests without a TTFT or a token count, and a side with only warm-ups."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from specproxy.core.compare.pairing import Metric
from specproxy.core.records.model import ErrorKind, Measurement, RequestRecord, Role
from specproxy.core.records.tally import SideSummary
from specproxy.recording.recorder import RunFigures
from specproxy.report.build import BuildOptions, build_report
from specproxy.report.load import load_run_dir
from specproxy.testing.fabricate import experiment, make_records, record, write_run_dir

B, C = Role.BASELINE, Role.CANDIDATE
MAX_LAG_MS = 10.0  # experiment()'s workload names none: the report takes the default


def _failed(
    rec: RequestRecord, kind: ErrorKind, *, shadow: bool = False, **measured: int
) -> RequestRecord:
    """``rec`` failed with ``kind``, keeping whatever was ``measured`` before the failure."""
    failed = Measurement(error_kind=kind, **measured)
    return dataclasses.replace(rec, measurement=failed, shadow=shadow)


def _completed(i: int) -> RequestRecord:
    """Request ``i`` of the mix: the sides alternate; sent late, early or unscheduled."""
    intended_s = (i // 2) * 0.1
    lag_us = None if i % 5 == 0 else (i * 37) % 900 - 100
    return record(
        B if i % 2 else C,
        f"p{i // 2}",
        e2e_us=40_000 + (i * 7_919) % 250_000,
        ttft_us=None if i == 7 else 5_000 + i * 311,
        tpot_us=9_000 + i,
        tokens=None if i == 9 else 10 + i,
        sent_at=intended_s + (1.0 if i > 30 else 0.0),
        in_flight=i % 6,
        intended_send_us=None if lag_us is None else int(intended_s * 1e6) - lag_us,
    )


def _hand_mix() -> list[RequestRecord]:
    """Both sides: completed, failed of several kinds, warm-up, shadow and lagging records."""
    recs = [_completed(i) for i in range(40)]
    recs[12] = dataclasses.replace(recs[12], shadow=True)
    truncated = {"ttft_us": 3_000, "e2e_us": 900_000, "completion_tokens": 17}
    recs[14] = _failed(recs[14], ErrorKind.STREAM_TRUNCATED, **truncated)
    recs[15] = _failed(recs[15], ErrorKind.TIMEOUT, e2e_us=2_000_000)
    recs[16] = _failed(recs[16], ErrorKind.SHADOW_DROPPED, shadow=True)
    recs[17] = _failed(recs[17], ErrorKind.HTTP_5XX)
    recs[19] = _failed(recs[19], ErrorKind.CONNECT)
    recs[21] = _failed(recs[21], ErrorKind.HTTP_5XX)
    recs += [
        record(B, "w1", e2e_us=30_000_000, tokens=999, warmup=True, sent_at=-40.0,
               in_flight=99, intended_send_us=-50_000_000),
        _failed(record(C, "w2", warmup=True, sent_at=-1.0), ErrorKind.TIMEOUT, e2e_us=5),
        record(C, "t1", e2e_us=250_000, sent_at=8.5),  # exact binary fractions:
        record(C, "t2", e2e_us=250_000, sent_at=8.75),  # t2 starts where t1 ends
        record(C, "zero", e2e_us=0, sent_at=5.0),
        record(B, "inside", e2e_us=1, sent_at=0.01, tokens=0),  # within p0's request
    ]  # fmt: skip
    return recs


def _recorder_side(records: list[RequestRecord], side: Role) -> SideSummary:
    """What the recorder's running tallies (exact at any size) give for ``side``."""
    figures = RunFigures(exact_limit=None)
    for rec in records:
        figures.add(rec)
    return figures.summary(side, MAX_LAG_MS)


def _report_sides(records: list[RequestRecord], tmp_path: Path) -> tuple[SideSummary, ...]:
    """What the report's builder gives, over the records as saved in a run directory."""
    run = write_run_dir(tmp_path / "run", records, experiment(), histograms=False)
    return build_report([load_run_dir(run)], BuildOptions(resamples=100)).sides


def _assert_paths_agree(records: list[RequestRecord], tmp_path: Path) -> tuple[SideSummary, ...]:
    sides = _report_sides(records, tmp_path)
    assert [s.side for s in sides] == list(Role)
    for reported in sides:
        recorded = _recorder_side(records, reported.side)
        assert reported == recorded, reported.side
        assert repr(reported) == repr(recorded), reported.side  # an int stays an int
    return sides


def test_recorder_and_report_build_the_same_summary_of_a_mixed_run(tmp_path: Path) -> None:
    """Completed, failed (five kinds, some with latencies), warm-up and shadow records."""
    base, cand = _assert_paths_agree(_hand_mix(), tmp_path)
    assert base.failures == (("connect", 1), ("http_5xx", 2), ("timeout", 1))
    assert cand.failures == (("shadow_dropped", 1), ("stream_truncated", 1))
    assert (base.warmup_excluded, base.warmup_failed) == (1, 0)
    assert (cand.warmup_excluded, cand.warmup_failed) == (1, 1)
    assert (base.requests, base.completed, cand.requests, cand.completed) == (21, 17, 23, 21)
    assert base.load_max == 5  # the warm-up's 99 in flight is left out
    assert base.quantiles(Metric.TTFT).n_ok == 16  # record 7 completed without a TTFT
    assert base.quantiles(Metric.E2E).with_failures is not None
    assert math.isinf(base.quantiles(Metric.E2E).with_failures[-1])
    assert base.send_lag_p50_us is not None and cand.send_lag_count == 16
    assert base.span_s < 5.0  # the warm-up 40 s before the window is not in the span


def test_recorder_and_report_agree_on_a_fabricated_run_with_warmup(tmp_path: Path) -> None:
    """A larger fabricated mirror run: failures on both sides, warm-up pairs, chunks."""
    records = make_records(n_pairs=300, chunks=True, warmup=5, fail_base=0.04, fail_cand=0.08)
    base, cand = _assert_paths_agree(records, tmp_path)
    assert base.warmup_excluded == cand.warmup_excluded == 5
    assert base.failed > 0 and cand.failed > 0


@pytest.mark.parametrize("side", list(Role))
def test_a_side_with_only_warmups_agrees_and_is_empty(tmp_path: Path, side: Role) -> None:
    """A side whose every record is a warm-up: nothing measured, the same on both paths."""
    records = [record(side.other, f"p{i}", sent_at=i * 0.1) for i in range(5)]
    records += [record(side, "w", warmup=True)]
    records += [_failed(record(side, "v", warmup=True), ErrorKind.CONNECT)]
    sides = _assert_paths_agree(records, tmp_path)
    empty = next(s for s in sides if s.side is side)
    assert (empty.requests, empty.warmup_excluded, empty.warmup_failed) == (0, 2, 1)
    assert empty.requests_per_s is None and empty.load_min is None
    assert empty.send_lag_p99_us is None and empty.span_s == 0.0
