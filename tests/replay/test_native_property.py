"""Property tests of specproxy's native trace format: what is written reads back the same."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core.records.model import Route
from specproxy.replay.native import dump_native_line
from specproxy.replay.readers import read_trace_file
from specproxy.replay.trace import TraceFormat, TraceRecord

_json_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False, width=64)
    | st.text(max_size=20)
)
_json = st.recursive(
    _json_scalar,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_offsets = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)
_category = st.none() | st.text(min_size=1, max_size=12)


@st.composite
def _records(draw: st.DrawFn) -> TraceRecord:
    offset = draw(_offsets)
    if draw(st.booleans()):
        return TraceRecord(
            source_path="",
            source_line=0,
            offset_s=offset,
            route=draw(st.sampled_from(list(Route))),
            body=draw(st.dictionaries(st.text(max_size=10), _json, max_size=5)),
            category=draw(_category),
        )
    return TraceRecord(
        source_path="",
        source_line=0,
        offset_s=offset,
        input_tokens=draw(st.integers(1, 200_000)),
        output_tokens=draw(st.integers(1, 20_000)),
        hash_ids=tuple(draw(st.lists(st.integers(0, 2**40), max_size=6))),
        category=draw(_category),
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(_records(), min_size=1, max_size=8))
def test_native_round_trip(tmp_path_factory: object, records: list[TraceRecord]) -> None:
    """Records written as native lines read back equal (offsets shifted to start at 0)."""
    folder = tmp_path_factory.mktemp("native")  # type: ignore[attr-defined]
    path = Path(folder) / "t.jsonl"
    records = sorted(records, key=lambda r: r.offset_s or 0.0)
    path.write_bytes(b"".join(dump_native_line(r) for r in records))
    back, summary = read_trace_file(path, TraceFormat.NATIVE)
    assert summary.records == len(records)
    base = min(r.offset_s or 0.0 for r in records)
    for i, (want, got) in enumerate(zip(records, back, strict=True)):
        assert got.source_line == i + 1
        assert got.offset_s == (want.offset_s or 0.0) - base
        expected = dataclasses.replace(
            want, offset_s=got.offset_s, source_path=str(path), source_line=i + 1
        )
        assert got == expected


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=200))
def test_native_reader_never_crashes_on_garbage(tmp_path_factory: object, data: bytes) -> None:
    """Arbitrary bytes either read as records or fail with a TraceFormatError/ConfigError."""
    from specproxy.errors import ConfigError

    folder = tmp_path_factory.mktemp("garbage")  # type: ignore[attr-defined]
    path = Path(folder) / "g.jsonl"
    path.write_bytes(data)
    with contextlib.suppress(ConfigError):
        read_trace_file(path, TraceFormat.NATIVE)
