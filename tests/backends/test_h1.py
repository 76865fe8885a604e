"""``backends.h1`` against scripted raw HTTP servers on loopback: pooling, framing, failures."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

import pytest

from specproxy.backends.base import BackendSpec, Timeouts, UpstreamRequest
from specproxy.backends.exchange import UpstreamFailure
from specproxy.backends.http import HttpBackend
from specproxy.core.protocol.headers import SharedHeaders
from specproxy.core.records.model import ErrorKind, Role, Route
from specproxy.sweep.launchers import free_port

STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
EVENTS = (b'data: {"a":1}\n\n', b'data: {"b":2}\n\n', b"data: [DONE]\n\n")
REQUEST = UpstreamRequest(Route.CHAT, b'{"stream":true}', True, {"X-Test": "1"})


def _chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


Answer = Callable[[int, int, bytes, asyncio.Transport], None]
"""(connection number, request number on it, request bytes, transport) -> writes the answer."""


class _Scripted(asyncio.Protocol):
    def __init__(self, server: _Server) -> None:
        self.server = server
        self.number = len(server.connections)
        server.connections.append(self)
        self.requests = 0
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return
        length = 0
        for line in self.buf[:head_end].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        if len(self.buf) < head_end + 4 + length:
            return
        request, self.buf = self.buf[: head_end + 4 + length], self.buf[head_end + 4 + length :]
        self.server.requests.append(request)
        assert self.transport is not None
        self.server.answer(self.number, self.requests, request, self.transport)
        self.requests += 1


class _Server:
    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.connections: list[_Scripted] = []
        self.requests: list[bytes] = []


@contextlib.asynccontextmanager
async def _serve(answer: Answer) -> AsyncIterator[tuple[_Server, str]]:
    state = _Server(answer)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Scripted(state), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield state, f"http://127.0.0.1:{port}"
    finally:
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def _backend(url: str, **timeouts: float) -> AsyncIterator[HttpBackend]:
    backend = HttpBackend(BackendSpec(url, Role.BASELINE, timeouts=Timeouts(**timeouts)))
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


async def _exchange(backend: HttpBackend) -> tuple[int, bytes]:
    ex = await backend.open_exchange(REQUEST, 0)
    await ex.ended
    return ex.status, b"".join(data for _, data in ex.chunks)


def _stream_answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
    transport.write(STREAM_HEAD + _chunked(*EVENTS))


async def test_a_keep_alive_connection_is_reused_and_the_body_dechunked() -> None:
    async with _serve(_stream_answer) as (server, url), _backend(url) as backend:
        first = await _exchange(backend)
        second = await _exchange(backend)
    assert first == second == (200, b"".join(EVENTS))
    assert len(server.connections) == 1 and len(server.requests) == 2
    head = server.requests[0]
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nX-Test: 1\r\n" in head and b"\r\nContent-Length: 15\r\n" in head
    assert head.endswith(b'\r\n\r\n{"stream":true}')


async def test_every_read_is_stamped_and_handed_on_in_order() -> None:
    loop = asyncio.get_running_loop()
    release = asyncio.Event()

    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        transport.write(STREAM_HEAD + b"%x\r\n%b\r\n" % (len(EVENTS[0]), EVENTS[0]))

        async def rest() -> None:
            await release.wait()
            transport.write(_chunked(*EVENTS[1:]))

        loop.create_task(rest())  # noqa: RUF006  # the test awaits the exchange's end

    async with _serve(answer) as (_, url), _backend(url) as backend:
        ex = await backend.open_exchange(REQUEST, 0)
        seen: list[bytes] = []
        ex.on_body = seen.append
        release.set()
        await ex.ended
    assert b"".join(data for _, data in ex.chunks) == b"".join(EVENTS)
    assert seen  # the reads after ``on_body`` was set went to it, the same bytes, in order
    assert seen == [data for _, data in ex.chunks[len(ex.chunks) - len(seen) :]]
    times = [t for t, _ in ex.chunks]
    assert times == sorted(times) and ex.end_us >= times[-1] >= ex.headers_us


async def test_a_pooled_connection_the_server_dropped_is_retried_on_a_fresh_one() -> None:
    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        if conn == 0 and n == 1:
            transport.close()  # the server had given up on the idle connection
            return
        _stream_answer(conn, n, request, transport)

    async with _serve(answer) as (server, url), _backend(url) as backend:
        await _exchange(backend)
        assert await _exchange(backend) == (200, b"".join(EVENTS))
    assert len(server.connections) == 2


async def test_content_length_and_end_of_connection_bodies() -> None:
    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        if n == 0 and conn == 0:
            transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")
        else:
            transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end")
            transport.close()

    async with _serve(answer) as (server, url), _backend(url) as backend:
        assert await _exchange(backend) == (200, b"hello")
        assert await _exchange(backend) == (200, b"until the end")
        assert await _exchange(backend) == (200, b"until the end")  # not reused: a new one
    assert len(server.connections) == 2


async def test_silence_after_the_headers_is_an_idle_timeout() -> None:
    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        transport.write(STREAM_HEAD + b"%x\r\n%b\r\n" % (len(EVENTS[0]), EVENTS[0]))

    async with _serve(answer) as (server, url), _backend(url, idle_s=0.2) as backend:
        ex = await backend.open_exchange(REQUEST, 0)
        with pytest.raises(UpstreamFailure) as failure:
            await ex.ended
        assert failure.value.kind is ErrorKind.TIMEOUT
        assert b"".join(d for _, d in ex.chunks) == EVENTS[0]  # what came is kept
        assert await backend.open_exchange(REQUEST, 0) is not None  # a fresh connection
    assert len(server.connections) == 2


async def test_no_headers_in_time_is_a_timeout() -> None:
    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        return  # never answers

    async with _serve(answer) as _, _backend(_[1], first_byte_s=0.2) as backend:
        with pytest.raises(UpstreamFailure) as failure:
            await backend.open_exchange(REQUEST, 0)
    assert failure.value.kind is ErrorKind.TIMEOUT


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (b"", ErrorKind.CONNECT),  # closed before any answer, on a fresh connection
        (STREAM_HEAD + b"f\r\ndata: {}\n\n", ErrorKind.STREAM_TRUNCATED),  # cut mid-body
        (b"NOT HTTP AT ALL\r\n\r\n", ErrorKind.PROTOCOL),  # bytes that are not HTTP/1.1
        (STREAM_HEAD + b"zz\r\n", ErrorKind.PROTOCOL),  # broken chunk framing
    ],
)
async def test_broken_answers_are_classified(reply: bytes, kind: ErrorKind) -> None:
    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        transport.write(reply)
        transport.close()

    async with _serve(answer) as (_, url), _backend(url) as backend:
        with pytest.raises(UpstreamFailure) as failure:
            await _exchange(backend)
    assert failure.value.kind is kind


async def test_a_refused_connection_is_a_connect_failure() -> None:
    async with _backend(f"http://127.0.0.1:{free_port()}") as backend:
        with pytest.raises(UpstreamFailure) as failure:
            await backend.open_exchange(REQUEST, 0)
    assert failure.value.kind is ErrorKind.CONNECT


async def test_abort_closes_the_connection_so_the_server_sees_it_go() -> None:
    gone = asyncio.Event()

    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        transport.write(STREAM_HEAD)

    async with _serve(answer) as (server, url), _backend(url) as backend:
        ex = await backend.open_exchange(REQUEST, 0)
        conn = server.connections[0]
        original = conn.connection_lost

        def lost(exc: Exception | None) -> None:
            original(exc)
            gone.set()

        conn.connection_lost = lost  # type: ignore[method-assign]
        ex.abort()
        async with asyncio.timeout(5):
            await gone.wait()
        with pytest.raises(UpstreamFailure) as failure:
            await ex.ended
    assert failure.value.kind is ErrorKind.CLIENT_CANCELLED


async def test_no_headers_in_time_names_the_first_byte_deadline() -> None:
    """The first-byte deadline is the pool's own timer: the failure says which deadline it was."""

    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        return  # never answers

    async with _serve(answer) as _, _backend(_[1], first_byte_s=0.1, idle_s=30) as backend:
        with pytest.raises(UpstreamFailure) as failure:
            await backend.open_exchange(REQUEST, 0)
    assert failure.value.kind is ErrorKind.TIMEOUT
    assert failure.value.message == "no response headers before deadline"


async def test_the_idle_deadline_does_not_apply_before_the_headers() -> None:
    """Headers later than ``idle_s`` but within ``first_byte_s`` are a normal answer: before
    the head only the first-byte deadline counts, after it the idle one (from the last read)."""

    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.3, transport.write, STREAM_HEAD + b"%x\r\n%b\r\n" % (5, b"first"))
        loop.call_later(0.4, transport.write, b"%x\r\n%b\r\n0\r\n\r\n" % (4, b"last"))

    async with _serve(answer) as _, _backend(_[1], first_byte_s=5, idle_s=0.2) as backend:
        ex = await backend.open_exchange(REQUEST, 0)
        await ex.ended
    assert ex.status == 200
    assert b"".join(data for _, data in ex.chunks) == b"firstlast"


async def test_interim_answers_are_skipped() -> None:
    """``100 Continue`` and ``103 Early Hints`` before the answer: the exchange's status and
    headers are the final answer's, its body is the final answer's body, and the connection
    is reused."""

    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        transport.write(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
        transport.write(STREAM_HEAD + _chunked(*EVENTS))

    async with _serve(answer) as (server, url), _backend(url) as backend:
        for _ in range(2):
            ex = await backend.open_exchange(REQUEST, 0)
            await ex.ended
            assert ex.status == 200
            assert "Link" not in ex.headers
            assert ex.headers["Content-Type"] == "text/event-stream"
            assert b"".join(data for _, data in ex.chunks) == b"".join(EVENTS)
    assert len(server.connections) == 1


async def test_a_stream_past_the_total_deadline_is_a_timeout() -> None:
    """Reads every 50 ms keep the idle deadline from firing; the total deadline still does."""

    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        loop = asyncio.get_running_loop()
        transport.write(STREAM_HEAD)
        for i in range(40):
            loop.call_later(
                0.05 * i, transport.write, b"%x\r\n%b\r\n" % (len(EVENTS[0]), EVENTS[0])
            )

    async with _serve(answer) as _, _backend(_[1], total_s=0.3, idle_s=10) as backend:
        ex = await backend.open_exchange(REQUEST, 0)
        with pytest.raises(UpstreamFailure) as failure:
            await ex.ended
    assert failure.value.kind is ErrorKind.TIMEOUT
    assert failure.value.message == "request exceeded its total deadline"
    assert 3 <= len(ex.chunks) < 40  # what came before the deadline is kept


async def test_begin_exchange_writes_on_an_idle_pooled_connection_in_the_call() -> None:
    """``begin_exchange`` sends at once or not at all: without an idle connection it returns
    None and nothing is sent; with one, ``open_exchange`` takes the exchange on from there."""
    async with _serve(_stream_answer) as (server, url), _backend(url) as backend:
        assert backend.begin_exchange(REQUEST, 0) is None  # no connection yet: nothing sent
        await _exchange(backend)  # opens one, which goes back to the pool
        begun = backend.begin_exchange(REQUEST, 0)
        assert begun is not None
        ex = await backend.open_exchange(REQUEST, 0, begun=begun)
        await ex.ended
    assert ex is begun and b"".join(data for _, data in ex.chunks) == b"".join(EVENTS)
    assert len(server.connections) == 1
    assert server.requests == [server.requests[0]] * 2  # the same request, byte for byte


async def test_a_begun_exchange_on_a_connection_the_server_dropped_is_retried() -> None:
    sent: list[int] = []

    def answer(conn: int, n: int, request: bytes, transport: asyncio.Transport) -> None:
        if conn == 0 and n == 1:
            transport.close()
            return
        _stream_answer(conn, n, request, transport)

    async with _serve(answer) as (server, url), _backend(url) as backend:
        await _exchange(backend)
        begun = backend.begin_exchange(REQUEST, 0)
        assert begun is not None
        ex = await backend.open_exchange(REQUEST, 0, lambda: sent.append(1), begun)
        await ex.ended
    assert ex is not begun and ex.status == 200  # answered on a fresh connection
    assert len(server.connections) == 2 and server.requests[2] == server.requests[0]
    assert sent == [1]  # told once that the request went out


async def test_requests_sharing_headers_get_their_own_length_and_others_their_own_head() -> None:
    """The head kept for ``SharedHeaders`` (``Outbound._head``) ends before the
    length, and is kept per headers object."""
    async with _serve(_stream_answer) as (server, url), _backend(url) as backend:
        shared = SharedHeaders({"X-Test": "1"})
        for body in (b'{"stream":true}', b'{"stream":true, "n":1}'):
            ex = await backend.open_exchange(UpstreamRequest(Route.CHAT, body, True, shared), 0)
            await ex.ended
        await _exchange(backend)  # plain headers, the same ones
        other = SharedHeaders({"X-Test": "2"})
        ex = await backend.open_exchange(UpstreamRequest(Route.CHAT, b"{}", True, other), 0)
        await ex.ended
    heads = [r.partition(b"\r\n\r\n")[0] for r in server.requests]
    assert heads[0].replace(b"Length: 15", b"Length: 22") == heads[1]
    assert heads[2] == heads[0]
    assert b"\r\nX-Test: 2\r\n" in heads[3] and b"X-Test: 1" not in heads[3]
    assert [
        r.endswith(b)
        for r, b in zip(server.requests, (b"true}", b"1}", b"true}", b"{}"), strict=True)
    ] == [True] * 4


async def test_in_flight_counts_the_requests_inside_counted() -> None:
    """``counted()`` counts one request for its block, nested or not, until the block ends,
    also when it ends with an error."""
    async with _serve(_stream_answer) as (_, url), _backend(url) as backend:
        with backend.counted():
            with backend.counted():
                assert backend.in_flight == 2
            assert backend.in_flight == 1
        with pytest.raises(ValueError, match="boom"), backend.counted():
            raise ValueError("boom")
        assert backend.in_flight == 0


async def test_a_backend_opens_no_connection_before_start_or_after_close() -> None:
    async with _serve(_stream_answer) as (server, url):
        backend = HttpBackend(BackendSpec(url, Role.BASELINE))
        assert backend.begin_exchange(REQUEST, 0) is None
        with pytest.raises(RuntimeError, match=r"start\(\) was not awaited"):
            await backend.open_exchange(REQUEST, 0)
        await backend.start()
        assert await _exchange(backend) == (200, b"".join(EVENTS))
        await backend.close()
        assert backend.begin_exchange(REQUEST, 0) is None  # its pooled connection is closed
        with pytest.raises(RuntimeError, match=r"start\(\) was not awaited"):
            await backend.open_exchange(REQUEST, 0)
    assert len(server.connections) == 1 and len(server.requests) == 1
