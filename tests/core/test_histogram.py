"""LatencyHistogram: recording, clamping, merging, encoding, and HdrHistogram log text."""

from __future__ import annotations

from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core.measurement.histogram import (
    HIGHEST_US,
    LOWEST_US,
    SIGNIFICANT_DIGITS,
    LatencyHistogram,
    LogInterval,
    format_histogram_log,
    format_log_intervals,
    parse_histogram_log,
)
from specproxy.errors import ProtocolError

_VALUES = st.lists(st.integers(min_value=0, max_value=2 * HIGHEST_US), max_size=60)


def _filled(values: list[int]) -> LatencyHistogram:
    h = LatencyHistogram()
    for v in values:
        h.record(v)
    return h


def test_statistics_of_a_small_sample() -> None:
    """Count, min, max, mean and percentiles are within the 3-significant-digit resolution."""
    h = LatencyHistogram()
    for v in range(1, 1001):
        h.record(v * 1000)  # 1 ms .. 1 s
    assert h.count == 1000
    assert h.min == 1000
    assert h.max is not None
    assert abs(h.max - 1_000_000) <= 1000
    assert h.mean is not None
    assert abs(h.mean - 500_500) <= 500_500 * 0.001
    p50 = h.percentile(50)
    assert p50 is not None
    assert abs(p50 - 500_000) <= 500
    assert h.percentiles([50.0, 99.0]) == {50.0: p50, 99.0: h.percentile(99)}


def test_empty_histogram_reports_none() -> None:
    """An empty histogram has no percentile, min, max or mean rather than a made-up zero."""
    h = LatencyHistogram()
    assert (h.count, h.percentile(50), h.min, h.max, h.mean) == (0, None, None, None, None)
    assert h.percentiles([50.0]) == {}


def test_values_above_one_hour_are_clamped_and_counted() -> None:
    """A value above the one-hour ceiling is recorded as one hour and counted as clamped."""
    h = LatencyHistogram()
    h.record(HIGHEST_US * 5, count=3)
    h.record(10)
    assert h.count == 4
    assert h.clamped == 3
    assert h.max is not None
    assert h.max >= HIGHEST_US
    assert h.max <= HIGHEST_US * 1.001


def test_bad_inputs_are_rejected() -> None:
    """Negative latencies, non-positive counts and out-of-range percentiles raise ValueError."""
    h = LatencyHistogram()
    with pytest.raises(ValueError, match="latency"):
        h.record(-1)
    with pytest.raises(ValueError, match="count"):
        h.record(5, count=0)
    with pytest.raises(ValueError, match="percentile"):
        h.percentile(101)


@settings(max_examples=60, deadline=None)
@given(a=_VALUES, b=_VALUES)
def test_merge_equals_recording_the_union(a: list[int], b: list[int]) -> None:
    """Merging two histograms gives exactly the histogram of all their values recorded together."""
    left, right, union = _filled(a), _filled(b), _filled(a + b)
    left.merge(right)
    assert left.equals(union)
    assert left.count == union.count == len(a) + len(b)
    assert left.clamped == union.clamped
    assert left.encode() == union.encode()


_PAIRS = st.lists(
    st.tuples(st.integers(min_value=0, max_value=2 * HIGHEST_US), st.integers(1, 5)), max_size=60
)


@settings(max_examples=80, deadline=None)
@given(pairs=_PAIRS, before=_VALUES)
def test_record_many_equals_recording_one_by_one(
    pairs: list[tuple[int, int]], before: list[int]
) -> None:
    """A batch lands in exactly the buckets, counts, extremes and clamped tally of single records."""
    single, batch = _filled(before), _filled(before)
    for value, count in pairs:
        single.record(value, count)
    batch.record_many(pairs)
    assert batch.equals(single)
    assert batch.encode() == single.encode()
    assert (batch.count, batch.clamped) == (single.count, single.clamped)
    assert (batch.min, batch.max, batch.mean) == (single.min, single.max, single.mean)
    assert batch.percentiles((50.0, 99.0)) == single.percentiles((50.0, 99.0))


def test_record_many_rejects_a_bad_pair_and_changes_nothing() -> None:
    """A negative latency or a count below one anywhere in a batch raises before anything is added."""
    h = _filled([7])
    with pytest.raises(ValueError, match="latency"):
        h.record_many([(5, 1), (-1, 1)])
    with pytest.raises(ValueError, match="count"):
        h.record_many([(5, 1), (6, 0)])
    assert h.equals(_filled([7]))
    assert h.count == 1


@settings(max_examples=60, deadline=None)
@given(values=_VALUES)
def test_encode_decode_round_trip(values: list[int]) -> None:
    """Decoding an encoded histogram gives back the same counts in every bucket."""
    h = _filled(values)
    back = LatencyHistogram.decode(h.encode())
    assert back.equals(h)
    assert back.count == h.count
    assert (back.min, back.max) == (h.min, h.max)


def test_decode_rejects_garbage() -> None:
    """A string that is not an encoded histogram raises ProtocolError."""
    with pytest.raises(ProtocolError, match="HdrHistogram"):
        LatencyHistogram.decode("not a histogram")


def test_decode_accepts_a_histogram_with_another_layout() -> None:
    """A payload written with a different layout (e.g. by another tool) is re-bucketed."""
    other = HdrHistogram(1, 60_000_000, 2)
    for v in (5, 500, 50_000):
        other.record_value(v)
    back = LatencyHistogram.decode(other.encode().decode())
    assert back.count == 3
    assert back.min == 5


def test_log_text_reads_back_with_hdrh_log_reader(tmp_path: Path) -> None:
    """hdrh's own HistogramLogReader reads every tagged interval of our log, counts intact."""
    ttft, e2e = _filled([1200, 3400, 99_000]), _filled([250_000])
    text = format_histogram_log(
        [("ttft_us", ttft), ("e2e_us", e2e)], start_unix_s=1796060355.25, end_unix_s=1796060365.75
    )
    path = tmp_path / "side.hlog"
    path.write_text(text)
    reader = HistogramLogReader(str(path), HdrHistogram(1, HIGHEST_US, 3))
    read = []
    while (hist := reader.get_next_interval_histogram()) is not None:
        read.append(hist)
    reader.close()
    assert [h.get_tag() for h in read] == ["ttft_us", "e2e_us"]
    assert [h.get_total_count() for h in read] == [3, 1]
    assert read[0].get_start_time_stamp() == pytest.approx(1796060355250.0)
    assert read[0].get_end_time_stamp() == pytest.approx(1796060365750.0)
    assert read[1].get_max_value() == e2e.max


def test_log_text_round_trips_through_our_parser() -> None:
    """parse_histogram_log returns the base time and each interval's tag, times and counts."""
    h1, h2 = _filled([10, 20, 30]), _filled([7])
    text = format_log_intervals(
        [LogInterval("itl_us", 0.0, 5.0, h1), LogInterval(None, 5.0, 5.0, h2)],
        base_unix_s=1700000000.5,
    )
    base, intervals = parse_histogram_log(text)
    assert base == pytest.approx(1700000000.5)
    assert [(i.tag, i.start_s, i.length_s) for i in intervals] == [
        ("itl_us", 0.0, 5.0),
        (None, 5.0, 5.0),
    ]
    assert intervals[0].histogram.equals(h1)
    assert intervals[1].histogram.equals(h2)


def test_log_parser_names_the_bad_line() -> None:
    """A line that is neither comment, legend nor interval raises ProtocolError with its number."""
    with pytest.raises(ProtocolError, match="line 2"):
        parse_histogram_log("#[BaseTime: 1.0 (seconds since epoch)]\nnonsense\n")


def test_interval_tag_must_not_contain_a_comma() -> None:
    """A tag with a comma would break the line format, so LogInterval refuses it."""
    with pytest.raises(ValueError, match="tag"):
        LogInterval("a,b", 0.0, 1.0, LatencyHistogram())


@settings(max_examples=60, deadline=None)
@given(values=_VALUES)
def test_record_lands_where_hdrh_record_value_does(values: list[int]) -> None:
    """``record``'s inlined index arithmetic puts each value in hdrh's own bucket."""
    ours = LatencyHistogram()
    theirs = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
    for value in values:
        ours.record(value)
        theirs.record_value(min(value, HIGHEST_US))
    h = ours._h
    assert list(h.counts) == list(theirs.counts)
    assert (h.total_count, h.min_value, h.max_value) == (
        theirs.total_count,
        theirs.min_value,
        theirs.max_value,
    )
    assert ours.clamped == sum(v > HIGHEST_US for v in values)
