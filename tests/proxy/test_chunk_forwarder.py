"""``ChunkForwarder``: each upstream read framed as one HTTP chunk, injected events withheld.

The transport, writer and exchange are recording stand-ins: the forwarder's contract is
the bytes it writes, in what framing, and what it asks of the exchange. End to end (real
sockets) it is exercised by every streaming test of this package. Each test runs twice:
with the commonest call in C (``core._speedups.ChunkWriter``, when it is built) and with
the Python forwarder alone; the reads go in as ``backends.h1`` hands them over, through
``Exchange.on_body`` as ``attach_forwarder`` set it.
"""

from __future__ import annotations

import asyncio
from itertools import pairwise
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specproxy.core.protocol.injected_events import is_sglext_event, is_usage_only_event
from specproxy.core.protocol.sse import SseEvent
from specproxy.core.records.model import ErrorKind
from specproxy.core.speedups import SPEEDUPS
from specproxy.proxy import client_answer
from specproxy.proxy.client_answer import ChunkForwarder, attach_forwarder

CONTENT = [
    b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n',
    b'data: {"choices":[{"index":0,"delta":{"content":"b"}}],"x":{"choices":[]}}\n\n',
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
]
USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
SGLEXT = b'data: {"choices": [],"sglext":{"spec_accept_length":1.5}}\n\n'
DONE = b"data: [DONE]\n\n"


def _drop_both(event: SseEvent) -> bool:
    return is_sglext_event(event) or is_usage_only_event(event)


class _Transport:
    def __init__(self, buffered: int = 0) -> None:
        self.written: list[bytes] = []
        self.closing = False
        self.buffered = buffered

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.buffered


class _Writer:
    def __init__(self) -> None:
        self.drained = asyncio.Event()

    async def drain(self) -> None:
        await self.drained.wait()


class _Exchange:
    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.resumed = asyncio.Event()
        self.headers = {"Content-Type": "text/event-stream"}
        self.chunks: list[tuple[int, bytes]] = []
        self.on_body: Any = None

    def abort(self, kind: ErrorKind, message: str) -> None:
        self.calls.append(("abort", kind))

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")
        self.resumed.set()


@pytest.fixture(params=["c", "python"], autouse=True)
def _path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "python":
        monkeypatch.setattr(client_answer, "_CHUNK_WRITER", None)
    elif SPEEDUPS is None:
        pytest.skip("the C speedups are not built here")


class _Sent:
    """A forwarder as the upstream connection calls it: through ``exchange.on_body``."""

    def __init__(self, forward: ChunkForwarder, exchange: _Exchange) -> None:
        self.forward = forward
        self.exchange = exchange

    def __call__(self, data: bytes) -> None:
        self.exchange.on_body(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.forward, name)


def _forwarder(
    transport: _Transport, *, drop: Any = None, writer: _Writer | None = None
) -> tuple[_Sent, _Exchange, _Writer]:
    exchange, writer = _Exchange(), writer or _Writer()
    forward = attach_forwarder(transport, writer, exchange, drop=drop)  # type: ignore[arg-type]
    return _Sent(forward, exchange), exchange, writer


def _dechunk(written: list[bytes]) -> list[bytes]:
    """The payload of each chunk written; every write is whole chunks, the last one the
    terminating chunk, which must be the end of the last write."""
    out = []
    for i, data in enumerate(written):
        rest = data
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            assert rest[n : n + 2] == b"\r\n"
            if n == 0:
                assert rest == b"\r\n" and i == len(written) - 1
                break
            out.append(rest[:n])
            rest = rest[n + 2 :]
    return out


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in pairwise([0, *points, len(data)]) if b > a]


def test_reads_go_out_one_chunk_each_as_they_are() -> None:
    transport = _Transport()
    forward, _, _ = _forwarder(transport)
    reads = [CONTENT[0][:10], CONTENT[0][10:] + CONTENT[1], CONTENT[2] + USAGE + DONE]
    for data in reads:
        forward(data)
    assert _dechunk(transport.written) == reads  # no filter: the usage event goes too
    assert forward.ended
    assert transport.written[-1].endswith(b"0\r\n\r\n")  # the end rides on the last event
    forward(b"data: late\n\n")
    assert forward.bytes_after_done == len(b"data: late\n\n") and len(transport.written) == 3


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cuts=st.lists(st.integers(min_value=0), max_size=20),
    where=st.lists(st.integers(0, 3), min_size=2, max_size=2),
)
def test_injected_events_are_withheld_however_the_reads_fall(
    cuts: list[int], where: list[int]
) -> None:
    """Split anywhere, even inside an injected event: the client gets every other byte."""
    events = list(CONTENT)
    events.insert(where[0], USAGE)
    events.insert(where[1], SGLEXT)
    body = b"".join([*events, DONE])
    transport = _Transport()
    forward, _, _ = _forwarder(transport, drop=_drop_both)
    for data in _split(body, cuts):
        forward(data)
    forward.finish()
    out = b"".join(_dechunk(transport.written))
    assert out == b"".join([*CONTENT, DONE])
    assert transport.written[-1].endswith(b"0\r\n\r\n")  # one end (``_dechunk``), the last


def test_an_unfinished_last_event_is_passed_on_at_the_end() -> None:
    transport = _Transport()
    forward, _, _ = _forwarder(transport, drop=_drop_both)
    forward(CONTENT[0] + b'data: {"cut')
    forward.finish()
    assert _dechunk(transport.written) == [CONTENT[0], b'data: {"cut']
    assert transport.written[-1].endswith(b"0\r\n\r\n")


def test_a_closing_client_ends_the_exchange_as_client_cancelled() -> None:
    transport = _Transport()
    forward, exchange, _ = _forwarder(transport)
    transport.closing = True
    forward(CONTENT[0])
    assert transport.written == []
    assert exchange.calls == [("abort", ErrorKind.CLIENT_CANCELLED)]


async def test_a_full_client_buffer_pauses_the_upstream_until_it_drains() -> None:
    transport = _Transport(buffered=1 << 20)
    forward, exchange, writer = _forwarder(transport)
    forward(CONTENT[0])
    forward(CONTENT[1])  # still full: one pause, one waiter
    assert exchange.calls == ["pause"]
    writer.drained.set()
    async with asyncio.timeout(5):
        await exchange.resumed.wait()
    assert exchange.calls == ["pause", "resume"]
    assert _dechunk(transport.written) == CONTENT[:2]  # nothing held back meanwhile


def test_the_commonest_call_is_the_c_one_when_built(request: pytest.FixtureRequest) -> None:
    transport = _Transport()
    _, exchange, _ = _forwarder(transport)
    c = request.node.callspec.params["_path"] == "c"
    assert (type(exchange.on_body).__name__ == "ChunkWriter") is c
    _, filtered, _ = _forwarder(_Transport(), drop=_drop_both)
    assert isinstance(filtered.on_body, ChunkForwarder)  # a filter: always the forwarder


_READS = st.lists(
    st.one_of(
        st.binary(max_size=40),
        st.sampled_from([*CONTENT, USAGE, DONE, CONTENT[0] + DONE, b"x" + DONE[1:], b""]),
        st.sampled_from(["closing", "open", "full", "drained"]),
    ),
    max_size=14,
)


@settings(
    max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=_READS)
def test_any_reads_go_out_as_the_python_forwarder_writes_them(steps: list[Any]) -> None:
    """Reads, the end, late bytes, a client going away, a full buffer: the same writes, the
    same calls to the exchange and the writer, as ``ChunkForwarder`` called directly."""
    with mock.patch.object(client_answer.runtime, "spawn", _no_task):
        assert _run(True, steps) == _run(False, steps)


class _Waiter:
    def cancel(self) -> None:
        pass


def _no_task(coro: Any, *, name: str) -> _Waiter:
    """The client-drain waiter, not run (the test has no event loop)."""
    coro.close()
    return _Waiter()


def _run(direct: bool, steps: list[Any]) -> tuple[Any, ...]:
    """The steps through the forwarder called directly, or as ``attach_forwarder`` set it."""
    transport = _Transport()
    exchange, writer = _Exchange(), _Writer()
    if direct:
        forward = ChunkForwarder(transport, writer, exchange, sse=True, drop=None)  # type: ignore[arg-type]
        send: Any = forward
    else:
        forward = attach_forwarder(transport, writer, exchange, drop=None)  # type: ignore[arg-type]
        send = _Sent(forward, exchange)
    for step in steps:
        if step == "closing":
            transport.closing = True
        elif step == "open":
            transport.closing = False
        elif step == "full":
            transport.buffered = 1 << 20
        elif step == "drained":
            transport.buffered = 0
        else:
            send(step)
    forward.stop()
    return (transport.written, exchange.calls, forward.ended, forward.bytes_after_done)
