"""``core/_speedups.c``'s ``window_runs`` splits a straddling request's chunk tokens over
the throughput windows exactly as ``report.timeline._Windows.straddling``, the reference,
does, for every line it takes; it takes every line schema 3 writes with non-negative gaps.

Lines are drawn with gaps and tokens of any size (negative gaps included: those are left
to Python), with and without chunk choices, then edited at random bytes: wherever C still
gives runs and the line before the arrays parses (what ``ChunkReader.runs`` checks), the
whole line parses (orjson) to arrays whose Python split is the same.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core import speedups
from specproxy.errors import ConfigError
from specproxy.report import load
from specproxy.report.load import ChunkReader
from specproxy.report.timeline import _Windows

C = speedups.SPEEDUPS
needs_c = pytest.mark.skipif(C is None, reason="the C speedups are not built here")

_WIDTHS = st.one_of(st.sampled_from([1.0, 2.0, 5.0, 60.0, 3600.0]), st.floats(1e-3, 1e4))


def _line(gaps: list[int], tokens: list[int], choices: list[int]) -> bytes:
    head = orjson.dumps({"schema": 3, "side": "baseline", "chunk_count": len(gaps)})[:-1]
    arrays = {"chunk_gaps_us": gaps, "chunk_tokens": tokens, "chunk_choices": choices}
    return head + b"," + orjson.dumps(arrays)[1:] + b"\n"


def _python(line: bytes, start: float, width: float, last: int) -> list[int]:
    data = orjson.loads(line)
    w = _Windows(last + 1, 0.0, width)
    offsets = tuple(itertools.accumulate(data["chunk_gaps_us"]))
    w.straddling(start, offsets, tuple(data["chunk_tokens"]))
    return w.tokens


def _c(line: bytes, start: float, width: float, last: int) -> list[int] | None:
    runs = C.window_runs(line, start / width, 1e-6 / width, last)  # type: ignore[union-attr]
    if runs is None:
        return None
    tokens = [0] * (last + 1)
    for window, count in runs:
        tokens[window] += count
    return tokens


@st.composite
def requests(draw: st.DrawFn) -> tuple[list[int], list[int], list[int]]:
    gaps = draw(st.lists(st.integers(0, 3 * 10**7), min_size=1, max_size=40))
    if draw(st.integers(0, 9)) == 0:
        gaps[draw(st.integers(0, len(gaps) - 1))] = draw(st.integers(-(10**6), -1))
    tokens = [draw(st.integers(0, 12)) for _ in gaps]
    choices = [draw(st.integers(0, 3)) for _ in gaps] if draw(st.booleans()) else []
    return gaps, tokens, choices


@needs_c
@settings(max_examples=1500, deadline=None)
@given(
    request=requests(),
    start=st.floats(0.0, 4000.0),
    width=_WIDTHS,
    last=st.integers(0, 400),
)
def test_the_c_runs_are_the_python_split(
    request: tuple[list[int], list[int], list[int]], start: float, width: float, last: int
) -> None:
    gaps, tokens, choices = request
    line = _line(gaps, tokens, choices)
    done = _c(line, start, width, last)
    assert (done is not None) == (min(gaps) >= 0)  # C takes every line but a negative gap
    if done is not None:
        assert done == _python(line, start, width, last)


@needs_c
@settings(max_examples=1500, deadline=None)
@given(
    request=requests(),
    edits=st.lists(
        st.tuples(st.integers(0, 10**4), st.sampled_from([b"", b",", b"]", b"-", b" ", b"1.5"])),
        min_size=1,
        max_size=3,
    ),
    start=st.floats(0.0, 100.0),
    width=_WIDTHS,
)
def test_an_edited_line_is_split_as_python_or_left_to_it(
    request: tuple[list[int], list[int], list[int]],
    edits: list[tuple[int, bytes]],
    start: float,
    width: float,
) -> None:
    line = _line(*request)
    for place, put in edits:
        at = place % len(line)
        line = line[:at] + put + line[at + 1 :]
    done = _c(line, start, width, 50)
    head = line[: line.rfind(b',"chunk_gaps_us":[')] + b"}"
    if done is not None and _parses(head):  # what the reader gives: C's runs, head parsed
        assert done == _python(line, start, width, 50)


def _parses(text: bytes) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def test_the_reader_refuses_a_changed_line_on_either_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The line before the arrays is parsed as the whole line is without C: a record
    whose text changed since the scan is a ConfigError naming the file and byte."""
    from specproxy.core.records.columns import RecordColumns

    path = tmp_path / "requests.jsonl"
    path.write_bytes(_line([5, 10], [1, 1], []).replace(b'"side"', b'"side'))
    cols = RecordColumns((str(path),))
    cols.file_index.append(0)
    cols.line_offset.append(0)
    with ChunkReader() as reader:
        if C is not None:  # C takes the arrays; the line before them is parsed
            with pytest.raises(ConfigError, match="at byte 0 changed"):
                reader.runs(cols, 0, 0.0, 1e-6, 3)
        monkeypatch.setattr(load, "_C_RUNS", None)
        assert reader.runs(cols, 0, 0.0, 1e-6, 3) is None
        with pytest.raises(ConfigError, match="at byte 0 changed"):
            reader(cols, 0)
