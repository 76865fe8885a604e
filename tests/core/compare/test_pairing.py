"""Pairing, paired and unpaired ratios, per-side summaries and the throughput timeline."""

from __future__ import annotations

import math

import pytest

from specproxy.core.compare.pairing import (
    MODE_CAVEATS,
    Metric,
    find_pairs,
    paired_ratio,
)
from specproxy.core.compare.sides import choose_window_s
from specproxy.core.records.model import ErrorKind, Role, SendMode
from specproxy.testing.fabricate import make_records, record
from tests.oracles.pairing import dominant_mode, paired_ratios, unpaired_ratios
from tests.oracles.sides import throughput_timeline

B, C = Role.BASELINE, Role.CANDIDATE


def test_pairing_counts_every_way_a_record_can_miss_a_pair() -> None:
    """Pairs need both sides; failures, missing sides, duplicates, warm-up and pair-less
    records are each counted, never paired."""
    recs = [
        record(B, "a"), record(C, "a"),
        record(B, "b", error=ErrorKind.TIMEOUT), record(C, "b"),
        record(B, "c"), record(C, "c", error=ErrorKind.HTTP_5XX),
        record(B, "d", error=ErrorKind.CONNECT), record(C, "d", error=ErrorKind.CONNECT),
        record(B, "e"),
        record(C, "f"),
        record(B, "a"),
        record(B, "w", warmup=True), record(C, "w", warmup=True),
        record(B, None),
    ]  # fmt: skip
    pairing = find_pairs(recs)
    p = pairing.counts
    assert len(pairing.pairs) == p.pairs == 4
    assert (p.both_ok, p.baseline_failed_only, p.candidate_failed_only, p.both_failed) == (
        1,
        1,
        1,
        1,
    )
    assert (p.missing_candidate, p.missing_baseline, p.incomplete) == (1, 1, 2)
    assert (p.duplicates, p.without_pair_id) == (1, 1)


def test_pairs_stay_inside_their_experiment() -> None:
    """The same pair id in two experiments makes two pairs, not a duplicate."""
    recs = [record(s, "x", experiment_id=e) for e in ("e1", "e2") for s in (B, C)]
    assert len(find_pairs(recs).pairs) == 2


def test_paired_ratio_of_a_known_effect() -> None:
    """Candidate latencies exactly 0.75 x baseline give ratio 0.75 on every metric."""
    recs = []
    for i in range(40):
        base = 100_000 * (i + 1)
        recs += [
            record(B, str(i), e2e_us=base, ttft_us=base // 10, tpot_us=base // 100),
            record(
                C, str(i), e2e_us=base * 3 // 4, ttft_us=base * 3 // 40, tpot_us=base * 3 // 400
            ),
        ]
    for r in paired_ratios(find_pairs(recs).pairs):
        assert r.interval is not None
        assert r.interval.point == pytest.approx(0.75, abs=1e-3)
        assert r.candidate_faster_share == 1.0
        assert r.n == 40


def test_paired_ratio_skips_missing_metric_but_ranks_failed_pairs() -> None:
    """A pair lacking TPOT drops out of TPOT only; a candidate-only failure ranks as +inf in
    every metric, so it never leaves the sample."""
    recs = [record(B, "1"), record(C, "1", tpot_us=None), record(B, "2"), record(C, "2")]
    recs += [record(B, "3"), record(C, "3", error=ErrorKind.TIMEOUT)]
    pairs = find_pairs(recs).pairs
    e2e = paired_ratio(pairs, Metric.E2E)
    assert (e2e.n, e2e.candidate_failed, e2e.completed) == (3, 1, 2)
    tpot = paired_ratio(pairs, Metric.TPOT)
    assert (tpot.n, tpot.candidate_failed, tpot.completed) == (2, 1, 1)
    assert tpot.interval is not None and tpot.interval.high == math.inf


def test_paired_ratio_recovers_lognormal_effect() -> None:
    """With lognormal noise around a true ratio of 0.8, the interval covers 0.8."""
    pairs = find_pairs(make_records(n_pairs=2000, true_ratio=0.8, sigma=0.2, lean=True)).pairs
    iv = paired_ratio(pairs, Metric.E2E).interval
    assert iv is not None
    assert iv.contains(0.8)
    assert iv.high - iv.low < 0.03


def test_unpaired_quantile_ratios_of_split_data() -> None:
    """Split-mode sides with candidate = 0.5 x baseline give p50/p90/p99 ratios of 0.5, and no
    interval for a tail quantile with under 10 values beyond it."""
    recs = []
    for i in range(1, 201):
        recs.append(record(B, None, e2e_us=1000 * i, ttft_us=100 * i, tpot_us=10 * i))
        recs.append(record(C, None, e2e_us=500 * i, ttft_us=50 * i, tpot_us=5 * i))
    found = unpaired_ratios(recs)
    assert {(q.metric, q.q) for q in found} == {(m, q) for m in Metric for q in (0.5, 0.9, 0.99)}
    for q in found:
        assert q.ratio == pytest.approx(0.5, rel=1e-6)
        assert q.candidate_value == pytest.approx(0.5 * q.baseline_value)
        if q.q == 0.99:
            assert q.interval is None  # 200 x 1% = 2 values beyond p99: too few
        else:
            assert q.interval is not None and q.interval.point == pytest.approx(0.5, rel=1e-6)


def test_timeline_windows_hold_every_token_once() -> None:
    """Each completed request's tokens land in the windows once (chunks at their arrival)."""
    recs = make_records(n_pairs=60, chunks=True, fail_cand=0.1, seed=4)
    tl = throughput_timeline(recs, window_s=1.0)
    for side, windows in tl.sides:
        expected = sum(
            r.measurement.completion_tokens or 0
            for r in recs
            if r.side is side and r.ok and not r.warmup
        )
        assert sum(w.output_tokens for w in windows) == expected
        done = sum(r.ok for r in recs if r.side is side)
        assert sum(w.completed for w in windows) == done
    assert choose_window_s(30) == 1.0
    assert choose_window_s(600) == 10.0


def test_chunk_tokens_land_at_chunk_time() -> None:
    """A request's chunk tokens are counted in the window of each chunk's arrival."""
    rec = record(
        B, "1", e2e_us=2_500_000, tokens=6, chunk_offsets_us=(100_000, 1_500_000, 2_400_000),
        chunk_tokens=(1, 2, 3),
    )  # fmt: skip
    ((side, windows),) = throughput_timeline([rec], window_s=1.0).sides
    assert side is B
    assert [w.output_tokens for w in windows] == [1, 2, 3]


def test_mode_caveats_and_dominant_mode() -> None:
    """Mirror warns about contention, split about being unpaired, alternate is the clean one."""
    assert "contend" in MODE_CAVEATS[SendMode.MIRROR]
    assert "unpaired" in MODE_CAVEATS[SendMode.SPLIT]
    assert "clean" in MODE_CAVEATS[SendMode.ALTERNATE]
    recs = [
        record(B, "1", mode=SendMode.SPLIT),
        record(B, "2", mode=SendMode.SPLIT),
        record(B, "3"),
    ]
    assert dominant_mode(recs) is SendMode.SPLIT
    assert dominant_mode([record(B, "1", mode=None)]) is None
