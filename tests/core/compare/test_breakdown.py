"""The breakdown figures over record columns, on constructed records with known answers."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from specproxy.core.compare import column_acceptance as acc
from specproxy.core.compare.breakdown import (
    ESTIMATED,
    EXACT,
    Breakdowns,
    breakdowns,
    length_bins,
    step_histogram,
)
from specproxy.core.compare.column_figures import PairColumns, PairSeries
from specproxy.core.records.columns import ColumnBuilder, RecordColumns
from specproxy.core.records.model import (
    Acceptance,
    AcceptanceSource,
    ErrorKind,
    Measurement,
    RequestRecord,
    Role,
    Route,
    SendMode,
)

START = 1_750_000_000.0


def _record(
    i: int,
    side: Role,
    e2e_us: int,
    *,
    prompt: int | None = None,
    tokens: int = 50,
    acceptance: Acceptance | None = None,
    category: str | None = None,
    failed: bool = False,
    warmup: bool = False,
) -> RequestRecord:
    if failed:
        m = Measurement(status=503, error_kind=ErrorKind.HTTP_5XX, e2e_us=e2e_us)
    else:
        m = Measurement(
            status=200,
            ttft_us=e2e_us // 10,
            e2e_us=e2e_us,
            tpot_us=(e2e_us - e2e_us // 10) // (tokens - 1),
            prompt_tokens=prompt,
            completion_tokens=tokens,
            acceptance=acceptance,
        )
    return RequestRecord(
        experiment_id="exp000000001",
        request_id=f"r-{side.value}-{i}",
        side=side,
        route=Route.GENERATE,
        stream=True,
        backend_url="http://127.0.0.1:1",
        sent_at_unix_s=START + i,
        actual_send_us=i * 1_000_000,
        measurement=m,
        pair_id=f"p{i}",
        mode=SendMode.MIRROR,
        category=category,
        warmup=warmup,
    )


def _pair(
    i: int, ratio: float, *, prompt: int | None, tokens: int = 50, **cand: object
) -> list[RequestRecord]:
    return [
        _record(i, Role.BASELINE, 1_000_000, prompt=prompt, tokens=tokens),
        _record(i, Role.CANDIDATE, round(1_000_000 * ratio), prompt=prompt, tokens=tokens, **cand),  # type: ignore[arg-type]
    ]


def columns_of(records: Sequence[RequestRecord]) -> RecordColumns:
    cols = RecordColumns()
    builder = ColumnBuilder(cols, frozenset())
    for r in records:
        builder.add(r.to_dict(), 0, 0)
    builder.flush()
    return cols


def _breakdowns(records: Sequence[RequestRecord], stream_interval: object = None) -> Breakdowns:
    cols = columns_of(records)
    pairs = PairColumns.of(cols)
    series = PairSeries.of(cols, pairs)
    lengths = acc.candidate_lengths(cols, pairs)
    return breakdowns(
        cols,
        pairs,
        series,
        lengths,
        stream_interval=stream_interval,
    )


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([0] * 25 + [300] * 25 + [70_000] * 25, [(0, 1), (256, 512), (65_536, 131_072)]),
        ([1] * 5 + [100] * 30 + [5_000] * 3, [(1, 8192)]),  # a short last bin joins the one before
        ([3] * 8 + [5] * 8 + [9] * 8 + [17] * 30, [(2, 16), (16, 32)]),  # merged upward to 20
        ([7] * 4, [(4, 8)]),  # fewer than the minimum in all: one bin
        ([], []),
    ],
)
def test_length_bins_are_powers_of_two_merged_to_the_minimum(
    values: list[int], expected: list[tuple[int, int]]
) -> None:
    """Power-of-two edges; a bin under 20 values merges upward, a short last one downward."""
    assert length_bins(values, 20) == expected


def test_input_length_bins_carry_each_bins_ratio_and_accept_length() -> None:
    """Short prompts at ratio 0.5, long ones at 1.5: each bin shows its own ratio exactly."""
    short = Acceptance(AcceptanceSource.META_INFO, accept_length=3.0, verify_ct=17)
    long = Acceptance(AcceptanceSource.META_INFO, accept_length=1.2, verify_ct=42)
    records = []
    for i in range(40):
        records += _pair(i, 0.5, prompt=100, acceptance=short)
    for i in range(40, 80):
        records += _pair(i, 1.5, prompt=3000, acceptance=long)
    for i in range(80, 85):
        records += _pair(i, 1.0, prompt=None)
    b = _breakdowns(records).by_input_tokens
    assert [g.label for g in b.groups] == ["64–127", "2048–4095"]
    assert [g.n for g in b.groups] == [40, 40]
    assert b.without == 5
    e2e = [g.e2e for g in b.groups]
    assert e2e[0] is not None and e2e[1] is not None
    assert math.isclose(e2e[0].point, 0.5) and math.isclose(e2e[1].point, 1.5)
    assert [g.mean_accept_length for g in b.groups] == [3.0, 1.2]
    accept = [iv.point if iv is not None else None for iv in b.accept_length]
    assert accept == [3.0, 1.2]
    assert all(iv is not None and iv.units == 4 and iv.unit == "segment" for iv in b.accept_length)
    assert all(g.units == 4 for g in b.groups)  # 40 pairs: 4 segments of 10 within the bin


def test_output_length_bins_and_category_use_completed_pairs_only() -> None:
    """Output bins from completion tokens; a pair with a failed side is in no bin."""
    records = []
    for i in range(30):
        records += _pair(i, 0.8, prompt=10, tokens=40, category="code")
    for i in range(30, 60):
        records += _pair(i, 1.1, prompt=10, tokens=600, category="chat")
    records += [
        _record(60, Role.BASELINE, 1_000_000, prompt=10, tokens=40, category="code"),
        _record(60, Role.CANDIDATE, 2_000_000, failed=True, category="code"),
    ]
    b = _breakdowns(records)
    out = b.by_output_tokens
    assert [(g.label, g.n) for g in out.groups] == [("32–63", 30), ("512–1023", 30)]
    points = [g.e2e.point for g in out.groups if g.e2e is not None]
    assert [round(p, 6) for p in points] == [0.8, 1.1]
    assert [(g.label, g.n) for g in b.by_category.groups] == [("chat", 30), ("code", 30)]
    assert b.by_category.without == 0  # the pair whose candidate failed is not completed
    assert b.by_category.accept_length == (None, None)  # no acceptance figures


def test_exact_and_estimated_step_histograms_are_kept_apart() -> None:
    """Exact histograms sum per index; an estimated one is its own histogram; warm-ups,
    failures, the baseline and records without a histogram do not count."""
    exact_a = Acceptance(AcceptanceSource.META_INFO, 2.0, 6, histogram=(1, 2, 3))
    exact_b = Acceptance(AcceptanceSource.META_INFO, 2.0, 1, histogram=(0, 1))
    estimate = Acceptance(AcceptanceSource.CHUNK_ESTIMATE, 2.0, 4, histogram=(2, 0, 0, 2))
    records = [
        *_pair(0, 0.9, prompt=10, acceptance=exact_a),
        *_pair(1, 0.9, prompt=10, acceptance=exact_b),
        *_pair(2, 0.9, prompt=10, acceptance=estimate),
        *_pair(3, 0.9, prompt=10, acceptance=Acceptance(AcceptanceSource.META_INFO, 1.0, 3)),
        _record(4, Role.CANDIDATE, 1, prompt=10, acceptance=exact_a, warmup=True),
        _record(5, Role.BASELINE, 1, prompt=10, acceptance=exact_a),
    ]
    hists = _breakdowns(records, stream_interval=1).step_acceptance
    assert [h.label for h in hists] == [EXACT, ESTIMATED]
    exact, est = hists
    assert exact.counts == (1, 3, 3) and exact.steps == 7 and exact.requests == 2
    assert exact.position_rates == pytest.approx((6 / 7, 3 / 7))
    assert exact.shares == pytest.approx((1 / 7, 3 / 7, 3 / 7))
    assert exact.mean_accepted == pytest.approx(9 / 7)
    assert "meta_info 2" in exact.source
    assert est.counts == (2, 0, 0, 2) and est.position_rates == (0.5, 0.5, 0.5)
    assert "stream bursts" in est.source and "stream_interval is" not in est.source


def test_estimated_source_names_a_stream_interval_other_than_one() -> None:
    estimate = Acceptance(AcceptanceSource.CHUNK_ESTIMATE, 2.0, 2, histogram=(1, 1))
    (est,) = _breakdowns(_pair(0, 1.0, prompt=5, acceptance=estimate), 4).step_acceptance
    assert "stream_interval is 4" in est.source


def test_records_without_prompt_tokens_or_histograms_give_empty_breakdowns() -> None:
    """Old records (no prompt_tokens, no histogram): no bins, every pair counted as without."""
    records = [r for i in range(25) for r in _pair(i, 0.7, prompt=None)]
    b = _breakdowns(records)
    assert b.by_input_tokens.groups == () and b.by_input_tokens.without == 25
    assert b.step_acceptance == ()
    assert len(b.by_output_tokens.groups) == 1  # completion tokens are there


def test_step_histogram_of_nothing() -> None:
    h = step_histogram(Role.CANDIDATE, EXACT, "x", 0, ())
    assert h.steps == 0 and h.position_rates == () and h.mean_accepted is None
