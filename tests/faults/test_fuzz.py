"""Hypothesis over the SSE decoder, the protocol interpreter and every trace reader (``fuzz_targets``).

Inputs: real captures from ``tests/fixtures`` cut anywhere and mutated, arbitrary bytes,
and the bundled traces' lines mutated value by value. ``bench/fuzz.py`` runs the same
targets for millions of inputs; these keep a few hundred per target in every test run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specproxy.core.records.model import Route
from specproxy.replay.trace import TraceFormat
from specproxy.testing import fuzz_targets as targets

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_TOKENS = [
    b"\n",
    b"\r",
    b"\r\n",
    b"data:",
    b"data: ",
    b"[DONE]",
    b"{",
    b"}",
    b'"',
    b":",
    b"\xff",
    b"event: x",
]
_ODD_VALUES: list[Any] = [
    float("inf"), float("-inf"), float("nan"), 1e308, -1, 0, 2**70, "x", "", None, [], {}, True, [1, "a"],
]  # fmt: skip


@st.composite
def _mutated_capture(draw: st.DrawFn) -> bytes:
    """A capture's slice, with a few bytes flipped, inserted or removed."""
    body = draw(st.sampled_from(targets.capture_bodies()))
    start = draw(st.integers(0, len(body)))
    data = bytearray(body[start : start + draw(st.integers(0, 3000))])
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["insert", "delete", "flip"]))
        if op == "insert":
            data[at:at] = draw(st.sampled_from(_TOKENS) | st.binary(max_size=4))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 16))]
        elif data:
            data[min(at, len(data) - 1)] ^= 1 << draw(st.integers(0, 7))
    return bytes(data)


_INPUTS = _mutated_capture() | st.binary(max_size=400)
_CUTS = st.lists(st.integers(0, 4000), max_size=12)


@SETTINGS
@given(_INPUTS, _CUTS)
def test_sse_decoder_is_split_invariant_on_mutated_captures(data: bytes, cuts: list[int]) -> None:
    """Real streams, mutated and cut anywhere, decode to the same events as when whole."""
    targets.check_sse(data, cuts)


@SETTINGS
@given(
    _INPUTS,
    _CUTS,
    st.sampled_from([200, 400, 500]),
    st.sampled_from(list(Route)),
    st.booleans(),
)
def test_meter_never_raises(
    data: bytes, cuts: list[int], status: int, route: Route, stream: bool
) -> None:
    """Any bytes, split anywhere, give a Measurement on any route; interpreters raise ProtocolError only."""
    targets.check_protocol(data, cuts, status, cases=[(route, stream)])


_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(-3, 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=4)
)
_JSON = st.recursive(
    _SCALAR,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(targets.PROTOCOL_KEYS), inner, max_size=4)
    ),
    max_leaves=16,
)
_EVENT = st.dictionaries(st.sampled_from(targets.PROTOCOL_KEYS), _JSON, max_size=5)


@SETTINGS
@given(st.lists(_EVENT, max_size=5), st.booleans(), st.sampled_from(list(Route)), st.booleans())
def test_meter_never_raises_on_odd_json_shapes(
    events: list[dict[str, Any]], done: bool, route: Route, stream: bool
) -> None:
    """Events with the protocol's field names holding any JSON values are measured, never a crash."""
    body = (
        targets.sse_body(events, done)
        if stream
        else json.dumps(events[0] if events else {}).encode()
    )
    targets.check_protocol(body, [7, 31], cases=[(route, stream)])


@pytest.mark.parametrize(
    "body",
    [
        b'data: {"choices": 5}\n\n',
        b'data: {"choices": [{"text": 5}]}\n\n',
        b'data: {"choices": [{"delta": {"content": 5}}]}\n\n',
        b'data: {"choices": [{"delta": {"reasoning_content": 5}}]}\n\n',
        b'{"choices": 5}',
        b'{"choices": [5]}',
        b'{"choices": [{"text": 5}]}',
        b'{"choices": [{"message": {"content": 5}}]}',
    ],
)
def test_fuzz_findings_stay_fixed(body: bytes) -> None:
    """The shapes bench/fuzz.py found crashing the interpreter (a number where a list or text belongs)."""
    targets.check_protocol(body, [])


@st.composite
def _mutated_line(draw: st.DrawFn, fmt: TraceFormat) -> str:
    """A seed line of ``fmt`` with a value replaced, a key removed, or its text cut."""
    line = draw(st.sampled_from(targets.trace_lines(fmt)))
    how = draw(st.sampled_from(["value", "drop", "cut", "as is"]))
    if how == "cut":
        return line[: draw(st.integers(0, len(line)))]
    if fmt is TraceFormat.AZURE:
        cells = line.split(",")
        at = draw(st.integers(0, len(cells) - 1))
        cells[at] = draw(st.sampled_from(["", "inf", "1e308", "-1", "x", "2023-13-40 99:99:99"]))
        return ",".join(cells if how != "drop" else cells[:at])
    obj = json.loads(line)
    if how != "as is" and isinstance(obj, dict) and obj:
        key = draw(st.sampled_from(sorted(obj)))
        if how == "drop":
            del obj[key]
        else:
            obj[key] = draw(st.sampled_from(_ODD_VALUES))
    return json.dumps(obj)


def _file_text(draw: st.DrawFn, fmt: TraceFormat) -> str:
    lines = draw(st.lists(_mutated_line(fmt), min_size=1, max_size=4))
    if fmt is TraceFormat.AZURE:
        lines = [targets.trace_lines(fmt)[0], *lines]  # keep the header
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\r\n"]))


@SETTINGS
@given(st.data(), st.sampled_from(list(TraceFormat)))
def test_trace_readers_yield_records_or_file_line_errors(
    data: st.DataObject, fmt: TraceFormat
) -> None:
    """Every reader turns mutated trace lines into records or file:line errors, never a crash."""
    targets.check_reader(fmt, _file_text(data.draw, fmt))


@SETTINGS
@given(st.text(max_size=300), st.sampled_from(list(TraceFormat)))
def test_trace_readers_survive_arbitrary_text(text: str, fmt: TraceFormat) -> None:
    """Arbitrary text is never a crash in any reader or in format detection."""
    targets.check_reader(fmt, text)
