"""Property tests of the SSE decoder: split-invariance and exact byte accounting."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core.protocol.sse import BOM
from specproxy.testing.fuzz_targets import decode_pieces

_EOL = st.sampled_from([b"\n", b"\r\n", b"\r"])
_TEXT = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
    max_size=12,
).map(lambda s: s.encode("utf-8"))


@st.composite
def _line(draw: st.DrawFn) -> bytes:
    kind = draw(
        st.sampled_from(
            ["data", "data_nospace", "bare_data", "event", "id", "comment", "retry", "odd"]
        )
    )
    text = draw(_TEXT)
    body = {
        "data": b"data: " + text,
        "data_nospace": b"data:" + text,
        "bare_data": b"data",
        "event": b"event: " + text,
        "id": b"id: " + text,
        "comment": b":" + text,
        "retry": b"retry: 10",
        "odd": b"x" + text,
    }[kind]
    return body + draw(_EOL)


@st.composite
def _stream(draw: st.DrawFn) -> bytes:
    parts: list[bytes] = [BOM] if draw(st.booleans()) else []  # the standard's optional BOM
    for _ in range(draw(st.integers(0, 6))):
        parts.extend(draw(_EOL) for _ in range(draw(st.integers(0, 2))))  # padding
        parts.extend(draw(st.lists(_line(), min_size=1, max_size=4)))
        parts.append(draw(_EOL))  # the blank line that ends the block
    if draw(st.booleans()):  # an unterminated tail, as when a stream is cut off
        parts.extend(draw(st.lists(_line(), max_size=2)))
        parts.append(draw(st.sampled_from([b"", b"data: cut"])))
    return b"".join(parts)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in pairwise(bounds)]


@settings(max_examples=400, deadline=None)
@given(data=_stream(), cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_any_split_decodes_like_one_piece(data: bytes, cuts: list[int]) -> None:
    """However the bytes are split, the decoder returns the same events as for one piece."""
    whole = decode_pieces([data])
    split = decode_pieces(_split(data, cuts))
    assert [(e.data, e.event, e.id, e.complete) for e in split] == [
        (e.data, e.event, e.id, e.complete) for e in whole
    ]
    assert [e.raw for e in split] == [e.raw for e in whole]


@settings(max_examples=400, deadline=None)
@given(data=_stream(), cuts=st.lists(st.integers(min_value=0), max_size=12))
def test_raw_bytes_of_all_events_rebuild_the_input(data: bytes, cuts: list[int]) -> None:
    """Concatenating every event's raw bytes, flush included, gives back the input exactly."""
    events = decode_pieces(_split(data, cuts))
    assert b"".join(e.raw for e in events) == data


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.lists(_TEXT, min_size=1, max_size=3), max_size=5),
    eol=_EOL,
    cuts=st.lists(st.integers(min_value=0), max_size=8),
    bom=st.booleans(),
)
def test_data_lines_are_joined_with_newlines(
    payloads: list[list[bytes]], eol: bytes, cuts: list[int], bom: bool
) -> None:
    """Each block's data lines come back joined by LF, whatever the line ending, the split and a
    leading byte order mark."""
    data = b"".join(b"".join(b"data: " + p + eol for p in block) + eol for block in payloads)
    data = BOM + data if bom else data
    events = [e for e in decode_pieces(_split(data, cuts)) if e.data is not None]
    expected = [b"\n".join(block).decode("utf-8") for block in payloads]
    assert [e.data for e in events] == expected
    assert all(e.complete for e in events)
