"""``core/_speedups.c``'s ``cut_chunk_arrays`` cuts a records line exactly as
``core.records.chunk_span.cut_chunk_arrays``, the reference, does wherever it takes the line, and
takes every line whose first chunk gap is a plain integer.

The lines are schema-3 tails (the chunk arrays last) with near misses: first gaps that
Python's ``int`` reads and C leaves to it (spaces, ``+``, underscores), numbers past 18
digits, no gaps, no choices, no final newline, a second gaps key, and random byte edits
and cuts anywhere in the line.
"""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core import speedups
from specproxy.core.records import chunk_span
from specproxy.report import scan

C = speedups.SPEEDUPS
needs_c = pytest.mark.skipif(C is None, reason="the C speedups are not built here")

_PLAIN = re.compile(rb"-?[0-9]{1,18}")
_FIRST = st.one_of(
    st.integers(-(10**18) + 1, 10**18 - 1).map(lambda v: str(v).encode()),
    st.sampled_from([b" 5", b"5 ", b"+5", b"1_0", b"-", b"", b"00", b"-0", b"5.0", b"1e3"]),
    st.sampled_from([b"1" * 19, b"-" + b"9" * 19, b"\xd9\xa3", b"0x10"]),
)


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    count = draw(st.integers(0, 6))
    first = draw(_FIRST)
    gaps = [first, *(str(draw(st.integers(-5, 10**6))).encode() for _ in range(count - 1))]
    tokens = [b"1"] * draw(st.sampled_from([count, max(0, count - 1), count + 1]))
    choices = [b"0"] * draw(st.sampled_from([0, count]))
    head = orjson.dumps({"schema": 3, "chunk_count": count, "text": draw(st.text(max_size=8))})
    tail = b',"chunk_gaps_us":[' + b",".join(gaps[:count]) + b'],"chunk_tokens":['
    tail += b",".join(tokens) + b'],"chunk_choices":[' + b",".join(choices) + b"]}"
    raw = head[:-1] + draw(st.sampled_from([b"", b',"x":{"chunk_gaps_us":[1]}'])) + tail
    raw += draw(st.sampled_from([b"\n", b"", b"\n\n", b" \n"]))
    for _ in range(draw(st.integers(0, 2))):  # byte edits anywhere
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"", b",", b"]", b"[", b"}", b"-"])) + raw[at + 1 :]
    if draw(st.booleans()):
        raw = raw[: draw(st.integers(0, len(raw)))]
    return raw


def _first_gap_is_plain(raw: bytes) -> bool:
    """Whether the reference read the line's first gap from a plain integer (C's share)."""
    at = raw.rfind(b',"chunk_gaps_us":[') + len(b',"chunk_gaps_us":[')
    end = raw.find(b",", at)
    number = raw[at:end].removesuffix(b"]")
    return raw[at : at + 1] == b"]" or _PLAIN.fullmatch(number) is not None


@needs_c
@settings(max_examples=3000, deadline=None)
@given(raw=lines())
def test_the_c_cut_equals_the_python_cut_where_it_takes_the_line(raw: bytes) -> None:
    done = C.cut_chunk_arrays(raw)  # type: ignore[union-attr]
    expected = chunk_span.cut_chunk_arrays(raw)
    if done is not None:
        assert done == expected
        assert type(done[3]) is bool and type(done[0]) is bytes
    elif expected is not None:  # C left a line the reference cuts: only for an odd first gap
        assert not _first_gap_is_plain(raw)
    assert scan.cut_line(raw) == expected


@needs_c
def test_a_recorded_line_is_cut_in_c() -> None:
    raw = (
        b'{"schema":3,"side":"baseline","chunk_count":3,"chunk_min_us":5,"chunk_max_us":27,'
        b'"chunk_tokens_sum":4,"chunk_gaps_us":[5,10,12],"chunk_tokens":[1,1,2],'
        b'"chunk_choices":[]}\n'
    )
    done = C.cut_chunk_arrays(raw)  # type: ignore[union-attr]
    assert done == (
        b'{"schema":3,"side":"baseline","chunk_count":3,"chunk_min_us":5,"chunk_max_us":27,'
        b'"chunk_tokens_sum":4}',
        6,
        5,
        False,
    )
    assert done == chunk_span.cut_chunk_arrays(raw)
    assert C.cut_chunk_arrays(raw.replace(b"[5,", b"[+5,")) is None  # int() reads it: Python's
    assert scan.cut_line(raw.replace(b"[5,", b"[+5,"))[2] == 5  # type: ignore[index]


def test_without_c_the_cut_is_the_python_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = b'{"a":1,"chunk_gaps_us":[-3],"chunk_tokens":[2],"chunk_choices":[1]}'
    monkeypatch.setattr(scan, "_C_CUT", None)
    assert scan.cut_line(raw) == (b'{"a":1}', 2, -3, True)
