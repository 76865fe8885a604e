"""The proxy's server (``proxy.lean``): every request served by it, one of three ways.

Raw sockets, so that several requests share one connection exactly as written: relayed
and own routes in both orders, keep-alive, pipelining, a malformed request, bodies in
many reads, chunked and compressed bodies.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest
from aiohttp import web

from specproxy.core.protocol.headers import HeaderFacts
from specproxy.core.protocol.limits import MAX_HEADERS
from specproxy.core.records.model import Route
from specproxy.proxy import intake, lean
from specproxy.sim.config import SimConfig
from specproxy.testing.harness import (
    CHAT_BODY,
    GateServer,
    chat,
    records,
    records_when,
    rig,
    serve_app,
)

SIM = SimConfig(deterministic_ids=True, decode_step_ms=0.2, prefill_us_per_token=1.0)


@pytest.fixture
def ways(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """How each request was served, in order: ``relayed``, ``own`` (a route of the proxy's
    own) or ``refused``."""
    seen: list[str] = []
    for name, way in (("_start", "relayed"), ("_start_own", "own"), ("_refuse", "refused")):
        original = getattr(lean.LeanConnection, name)

        def spy(self: Any, *args: Any, _way: str = way, _f: Any = original, **kw: Any) -> None:
            seen.append(_way)
            _f(self, *args, **kw)

        monkeypatch.setattr(lean.LeanConnection, name, spy)
    return seen


def _post(body: bytes, path: str = "/v1/chat/completions", extra: str = "") -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()


async def _response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: (status, headers with lower-case names, de-chunked body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    assert headers.get("transfer-encoding") == "chunked"
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return status, headers, b"".join(parts)
        parts.append(data[:-2])


@asynccontextmanager
async def _connection(url: str) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        yield reader, writer
    finally:
        writer.close()


def _unary() -> bytes:
    return orjson.dumps(chat("Tell me about tides.", rid="lean-unary"))


def _json(body: bytes) -> Any:
    return orjson.loads(body)


async def test_an_admin_route_after_a_relayed_request_on_one_connection(
    tmp_path: Path, ways: list[str]
) -> None:
    async with (
        rig(tmp_path, baseline=SIM, mode="passthrough") as r,
        _connection(r.url) as (
            reader,
            writer,
        ),
    ):
        writer.write(_post(_unary()))
        status, headers, body = await _response(reader)
        assert status == 200 and _json(body)["object"] == "chat.completion"
        assert headers["x-specproxy-side"] == "baseline"
        assert "date" in headers
        assert "specproxy" not in headers["server"]  # the upstream's own, passed on
        assert ways == ["relayed"]
        writer.write(_get("/_specproxy/status"))
        status, own, body = await _response(reader)
        assert status == 200 and _json(body)["sides"]["baseline"]["completed"] == 1
        assert own["server"].startswith("specproxy/")  # the proxy's own answer
        assert ways == ["relayed", "own"]
    (rec,) = records(tmp_path)
    assert rec["request_id"] == headers["x-specproxy-request-id"] and rec["error_kind"] is None


async def test_a_relayed_request_after_an_admin_route_on_one_connection(
    tmp_path: Path, ways: list[str]
) -> None:
    async with (
        rig(tmp_path, baseline=SIM, mode="passthrough") as r,
        _connection(r.url) as (
            reader,
            writer,
        ),
    ):
        writer.write(_get("/_specproxy/metrics"))
        status, _, _ = await _response(reader)
        assert status == 200 and ways == ["own"]
        for _ in range(2):  # the connection is kept alive
            writer.write(_post(_unary()))
            status, _, body = await _response(reader)
            assert status == 200 and _json(body)["object"] == "chat.completion"
        assert ways == ["own", "relayed", "relayed"]
    found = records(tmp_path)
    assert len(found) == 2 and all(rec["error_kind"] is None for rec in found)


async def test_keep_alive_and_pipelining_stay_on_the_lean_server(
    tmp_path: Path, ways: list[str]
) -> None:
    stream = orjson.dumps(chat("Tell me about tides.", stream=True, rid="lean-stream"))
    async with (
        rig(tmp_path, baseline=SIM, mode="passthrough") as r,
        _connection(r.url) as (
            reader,
            writer,
        ),
    ):
        writer.write(_post(stream))
        _, headers, first = await _response(reader)
        assert headers["transfer-encoding"] == "chunked" and first.endswith(b"data: [DONE]\n\n")
        writer.write(_post(_unary()) + _post(stream) + _post(_unary()))  # three in one write
        answers = [await _response(reader) for _ in range(3)]
        assert [status for status, _, _ in answers] == [200, 200, 200]
        assert answers[1][2] == first  # the same stream, byte for byte, after a unary answer
        assert [_json(answers[i][2])["object"] for i in (0, 2)] == ["chat.completion"] * 2
        ids = {h["x-specproxy-request-id"] for _, h, _ in answers} | {
            headers["x-specproxy-request-id"]
        }
        assert len(ids) == 4
        writer.write(_post(_unary()) + _get("/health"))  # an own route pipelined behind
        assert (await _response(reader))[0] == 200
        assert (await _response(reader))[0] == 200
        assert ways[-2:] == ["relayed", "own"] and ways.count("own") == 1
    assert len(records(tmp_path)) == 5


async def test_a_malformed_request_gets_400_and_the_server_goes_on(
    tmp_path: Path, ways: list[str]
) -> None:
    async with rig(tmp_path, baseline=SIM, mode="passthrough") as r:
        async with _connection(r.url) as (reader, writer):
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nBad\x01Name: x\r\n\r\n")
            status, _, body = await _response(reader)
            assert status == 400
            assert _json(body)["error"]["code"] == "malformed_request"
            assert await reader.read() == b""  # closed
        async with _connection(r.url) as (reader, writer):  # an unparsable JSON body: ours
            writer.write(_post(b"{not json"))
            status, _, body = await _response(reader)
            assert status == 400 and _json(body)["error"]["code"] == "invalid_body"
            writer.write(_post(_unary()))  # the connection is still good
            assert (await _response(reader))[0] == 200
    assert ways == ["refused", "relayed", "relayed"]
    assert len(records(tmp_path)) == 1


async def test_a_large_body_in_many_reads_reaches_the_upstream_whole(
    tmp_path: Path, ways: list[str]
) -> None:
    gate = GateServer(hold=False)
    raw = orjson.dumps(chat("tide " * 150_000, rid="lean-large"))  # about 750 kB
    request = _post(raw)
    async with (
        rig(tmp_path, baseline=gate, mode="passthrough") as r,
        _connection(r.url) as (
            reader,
            writer,
        ),
    ):
        for i in range(0, len(request), 65_536):
            writer.write(request[i : i + 65_536])
            await writer.drain()
        status, _, body = await _response(reader)
        assert status == 200 and body == CHAT_BODY
        assert ways == ["relayed"]
    (seen,) = gate.seen
    assert orjson.loads(seen.body)["messages"] == orjson.loads(raw)["messages"]


async def test_a_body_over_the_limit_is_refused_with_413_and_closed(
    tmp_path: Path, ways: list[str]
) -> None:
    gate = GateServer(hold=False)
    raw = orjson.dumps(chat("tide " * 1000))
    async with (
        rig(tmp_path, baseline=gate, mode="passthrough", max_body_bytes=1024) as r,
        _connection(r.url) as (reader, writer),
    ):
        writer.write(_post(raw))
        status, _, body = await _response(reader)
        assert status == 413 and _json(body)["error"]["code"] == "body_too_large"
        assert ways == ["refused"]
        assert await reader.read() == b""  # closed: the rest of the body is not read
    assert gate.seen == []


async def test_a_client_that_goes_away_cancels_the_upstream_request(tmp_path: Path) -> None:
    gate = GateServer(hold=True)
    stream = orjson.dumps(chat("Tell me about tides.", stream=True))
    async with rig(tmp_path, baseline=gate, mode="passthrough") as r:
        async with _connection(r.url) as (_reader, writer):
            writer.write(_post(stream))
            await gate.arrived(1)
        (rec,) = await records_when(tmp_path, 1)  # written once the proxy saw the close
    assert rec["error_kind"] == "client_cancelled"


async def test_with_an_api_key_only_the_right_key_is_relayed(
    tmp_path: Path, ways: list[str]
) -> None:
    async with rig(tmp_path, baseline=SIM, mode="passthrough", api_key="k-1") as r:
        async with _connection(r.url) as (reader, writer):
            writer.write(_post(_unary(), extra="Authorization: Bearer k-1\r\n"))
            assert (await _response(reader))[0] == 200
            assert ways == ["relayed"]
        for extra in ("Authorization: Bearer k-2\r\n", ""):
            async with _connection(r.url) as (reader, writer):
                writer.write(_post(_unary(), extra=extra))
                status, _, body = await _response(reader)
                assert status == 401 and _json(body)["error"]["code"] == "invalid_api_key"
        assert ways == ["relayed", "refused", "refused"]
    assert len(records(tmp_path)) == 1


async def test_an_idle_keep_alive_connection_is_closed_a_busy_one_is_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[lean.LeanConnection] = []
    original = lean.LeanConnection.connection_made

    def spy(self: lean.LeanConnection, transport: asyncio.BaseTransport) -> None:
        made.append(self)
        original(self, transport)

    monkeypatch.setattr(lean.LeanConnection, "connection_made", spy)
    gate = GateServer(hold=True)
    async with (
        rig(tmp_path, baseline=gate, mode="passthrough") as r,
        _connection(r.url) as (idle_reader, idle_writer),
        _connection(r.url) as (busy_reader, busy_writer),
    ):
        idle_writer.write(_post(_unary()))
        await gate.arrived(1)
        gate.release.set()
        assert (await _response(idle_reader))[0] == 200
        gate.release.clear()
        busy_writer.write(_post(_unary()))
        await gate.arrived(2)
        later = asyncio.get_running_loop().time() + 1.0  # both are idle since before it
        for conn in made:
            conn.close_if_idle_since(later)
        assert await idle_reader.read() == b""  # closed
        gate.release.set()
        assert (await _response(busy_reader))[0] == 200  # the busy one was left open
        for conn in made:
            conn.close_if_idle_since(asyncio.get_running_loop().time() + 1.0)
        assert await busy_reader.read() == b""
    assert len(records(tmp_path)) == 2


async def test_a_failing_handler_answers_500_and_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(lean, "plan", broken)
    async with (
        rig(tmp_path, baseline=SIM, mode="passthrough") as r,
        _connection(r.url) as (
            reader,
            writer,
        ),
    ):
        writer.write(_post(_unary()))
        status, headers, body = await _response(reader)
        assert status == 500 and headers["connection"] == "close"
        assert _json(body)["error"]["code"] == "internal_error"
        assert await reader.read() == b""


async def test_a_client_that_does_not_read_pauses_the_stream_which_then_arrives_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunk = (
        b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"%b"},"finish_reason":null}]}\n\n'
    )
    events = [chunk % ((b"%06d " % i) * 2340) for i in range(2048)]  # about 32 MiB
    events.append(b"data: [DONE]\n\n")

    async def generate(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in events:
            await resp.write(event)
        await resp.write_eof()
        return resp

    paused = asyncio.Event()
    original = lean.LeanConnection.pause_writing

    def spy(self: lean.LeanConnection) -> None:
        paused.set()
        original(self)

    monkeypatch.setattr(lean.LeanConnection, "pause_writing", spy)
    app = web.Application()
    app.router.add_post("/v1/chat/completions", generate)
    stream = orjson.dumps(chat("Tell me about tides.", stream=True))
    async with (
        serve_app(app) as upstream,
        rig(tmp_path, baseline=upstream, mode="passthrough") as r,
        _connection(r.url) as (reader, writer),
    ):
        writer.write(_post(stream))
        async with asyncio.timeout(30):
            await paused.wait()  # the client's buffers are full: nothing read yet
            status, _, body = await _response(reader)
    assert status == 200 and body == b"".join(events)
    (rec,) = records(tmp_path)
    assert rec["error_kind"] is None


async def test_unusual_relayed_requests_are_read_whole_and_relayed(
    tmp_path: Path, ways: list[str]
) -> None:
    body = _unary()
    async with rig(tmp_path, baseline=SIM, mode="passthrough") as r:
        async with _connection(r.url) as (reader, writer):  # Expect: 100-continue
            head = _post(body, extra="Expect: 100-continue\r\n")[: -len(body)]
            writer.write(head)
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(body)
            assert (await _response(reader))[0] == 200
        async with _connection(r.url) as (reader, writer):  # a query string
            writer.write(_post(body, path="/v1/chat/completions?trace=1"))
            assert (await _response(reader))[0] == 200
        async with _connection(r.url) as (reader, writer):  # a chunked request body
            chunked = b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)
            writer.write(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
            )
            assert (await _response(reader))[0] == 200
        async with _connection(r.url) as (reader, writer):  # a gzip body, chunked, twice
            packed = gzip.compress(body)
            chunked = b"%x\r\n%b\r\n0\r\n\r\n" % (len(packed), packed)
            one = (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked
            )
            writer.write(one + one)  # the second pipelined behind the first
            answers = [await _response(reader) for _ in range(2)]
            assert [a[0] for a in answers] == [200, 200]
            assert all(_json(a[2])["object"] == "chat.completion" for a in answers)
    assert ways == ["relayed"] * 5
    assert len(records(tmp_path)) == 5


async def test_a_chunked_bodys_trailers_count_with_the_headers_but_are_none(
    tmp_path: Path, ways: list[str]
) -> None:
    body = _unary()
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunked = b"%x\r\n%b\r\n0\r\n" % (len(body), body)
    many = b"".join(b"X-T%d: v\r\n" % i for i in range(MAX_HEADERS))
    async with rig(tmp_path, baseline=SIM, mode="passthrough") as r:
        async with _connection(r.url) as (reader, writer):  # a Host there is no second Host
            writer.write(head + chunked + b"Host: again\r\n\r\n")
            assert (await _response(reader))[0] == 200
        async with _connection(r.url) as (reader, writer):  # past the count, trailers included
            writer.write(head + chunked + many + b"\r\n")
            status, headers, _ = await _response(reader)
            assert status == 400 and headers["connection"] == "close"
    assert ways == ["relayed", "refused"]
    assert len(records(tmp_path)) == 1


async def test_a_request_left_half_sent_is_closed_by_the_idle_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that sends part of a request and stops is closed once its request began
    before the sweep's limit; one that began after it is left alone."""
    made: list[lean.LeanConnection] = []
    read_part = asyncio.Event()
    original = lean.LeanConnection.data_received

    def spy(self: lean.LeanConnection, data: bytes) -> None:
        made.append(self)
        original(self, data)
        read_part.set()

    monkeypatch.setattr(lean.LeanConnection, "data_received", spy)
    gate = GateServer(hold=False)
    async with (
        rig(tmp_path, baseline=gate, mode="passthrough") as r,
        _connection(r.url) as (
            reader,
            writer,
        ),
    ):
        request = _post(_unary())
        writer.write(request[: len(request) - 5])  # the head and most of the body
        await writer.drain()
        async with asyncio.timeout(5):
            await read_part.wait()
        conn = made[0]
        assert conn.transport is not None
        conn.close_if_idle_since(asyncio.get_running_loop().time() - 1.0)  # began after it
        assert not conn.transport.is_closing()
        conn.close_if_idle_since(asyncio.get_running_loop().time() + 1.0)
        assert await reader.read() == b""  # closed, with nothing answered
    assert records(tmp_path) == []


@pytest.mark.parametrize(
    ("head", "want"),
    [
        (
            b"POST /x HTTP/1.1\r\nContent-Length: 12\r\nA: b\r\n\r\n",
            (b"POST /x HTTP/1.1\r\nContent-Length:\r\nA: b\r\n", 12),
        ),
        (
            b"POST /x HTTP/1.1\r\nA: b\r\ncontent-LENGTH:\t7 \r\n\r\n",
            (b"POST /x HTTP/1.1\r\nA: b\r\ncontent-LENGTH:\r\n", 7),
        ),
        (b"POST /x HTTP/1.1\r\nA: b\r\n\r\n", None),  # no length
        (b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", None),
        (b"POST /x HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", None),
        (b"POST /x HTTP/1.1\r\nX-Content-Length: 3\r\n\r\n", None),  # another header's name
    ],
)
def test_head_key_is_the_head_less_its_length(head: bytes, want: tuple[bytes, int] | None) -> None:
    assert intake.head_key(head + b"body", head.find(b"\r\n\r\n")) == want


def test_heads_that_differ_in_more_than_their_length_have_different_keys() -> None:
    def key(raw: bytes) -> bytes | None:
        found = intake.head_key(raw, raw.find(b"\r\n\r\n"))
        return None if found is None else found[0]

    body = _unary()
    assert key(_post(body)) == key(_post(body + b" " * 5)) is not None
    assert key(_post(body)) != key(_post(body, extra="x-specproxy-side: candidate\r\n"))
    assert key(_post(body)) != key(_post(body, path="/v1/completions"))


@pytest.fixture
def parsed_heads(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The URL of every request head the lean server parsed (with httptools)."""
    seen: list[bytes] = []
    original = lean.LeanConnection.on_headers_complete

    def spy(self: lean.LeanConnection) -> None:
        seen.append(self._url)
        original(self)

    monkeypatch.setattr(lean.LeanConnection, "on_headers_complete", spy)
    return seen


async def test_a_head_seen_before_is_served_unparsed_with_its_own_body(
    tmp_path: Path, ways: list[str], parsed_heads: list[bytes]
) -> None:
    gate = GateServer(hold=False)
    bodies = [orjson.dumps(chat("tides " * n, rid=f"known-{n}")) for n in (1, 40, 3)]
    async with rig(tmp_path, baseline=gate, mode="passthrough") as r:
        async with _connection(r.url) as (reader, writer):
            for body in bodies[:2]:
                writer.write(_post(body))
                status, _, answer = await _response(reader)
                assert status == 200 and answer == CHAT_BODY
        async with _connection(r.url) as (reader, writer):  # known on any connection
            writer.write(_post(bodies[2]) + _post(bodies[0]))  # and pipelined
            assert [(await _response(reader))[0] for _ in range(2)] == [200, 200]
    assert parsed_heads == [b"/v1/chat/completions"]  # only the first was parsed
    assert ways == ["relayed"] * 4
    assert [seen.body for seen in gate.seen] == [*bodies, bodies[0]]
    assert len(records(tmp_path)) == 4


async def test_a_known_head_over_the_limit_is_still_refused_with_413(
    tmp_path: Path, ways: list[str], parsed_heads: list[bytes]
) -> None:
    gate = GateServer(hold=False)
    small, large = _unary(), orjson.dumps(chat("tide " * 1000))
    async with (
        rig(tmp_path, baseline=gate, mode="passthrough", max_body_bytes=1024) as r,
        _connection(r.url) as (reader, writer),
    ):
        writer.write(_post(small))
        assert (await _response(reader))[0] == 200
        writer.write(_post(large))  # the same head but for its length
        status, _, body = await _response(reader)
        assert status == 413 and _json(body)["error"]["code"] == "body_too_large"
    assert len(parsed_heads) == 2 and ways == ["relayed", "refused"]  # parsed, then refused
    assert [seen.body for seen in gate.seen] == [small]


def test_a_known_head_whose_request_is_not_all_in_is_left_to_the_parser() -> None:
    request = _post(_unary())
    head_end = request.find(b"\r\n\r\n")
    found = intake.head_key(request, head_end)
    assert found is not None
    conn = object.__new__(lean.LeanConnection)
    facts = cast(HeaderFacts, object())
    conn._site = cast(
        Any, SimpleNamespace(heads={found[0]: intake.KnownHead(Route.CHAT, True, facts)})
    )
    conn._state = cast(Any, SimpleNamespace(config=SimpleNamespace(max_body_bytes=1 << 20)))
    assert not conn._serve_known(request[:-1], 0)  # the body's last byte is missing
    assert not conn._serve_known(request[: head_end + 2], 0)  # the head is not all in
    conn._state = cast(Any, SimpleNamespace(config=SimpleNamespace(max_body_bytes=found[1] - 1)))
    assert not conn._serve_known(request, 0)  # over the limit: the parser hands it to aiohttp


async def test_a_head_with_a_bad_header_is_answered_each_time_body_errors_first(
    tmp_path: Path, parsed_heads: list[bytes]
) -> None:
    bad = "x-specproxy-side: sideways\r\n"
    async with (
        rig(tmp_path, baseline=SIM, mode="passthrough") as r,
        _connection(r.url) as (reader, writer),
    ):
        for _ in range(2):
            writer.write(_post(_unary(), extra=bad))
            status, _, body = await _response(reader)
            assert status == 400 and _json(body)["error"]["code"] == "invalid_side_header"
        writer.write(_post(b"{not json", extra=bad))
        status, _, body = await _response(reader)
        assert status == 400 and _json(body)["error"]["code"] == "invalid_body"
    assert len(parsed_heads) == 3  # a head whose headers cannot be used is not kept
    assert records(tmp_path) == []


async def test_a_path_that_is_no_route_is_404_and_the_connection_is_kept(
    tmp_path: Path, ways: list[str]
) -> None:
    """Without a body, a 404 and a 405 keep the connection (the next request is served on
    it); with a body, which is then not read, the connection closes after the answer."""
    async with rig(tmp_path, baseline=SIM, mode="passthrough") as r:
        async with _connection(r.url) as (reader, writer):
            writer.write(_get("/no/such/route") + _get("/v1/chat/completions"))
            status, _, body = await _response(reader)
            assert status == 404 and _json(body)["error"]["code"] == "not_found"
            status, headers, body = await _response(reader)
            assert status == 405 and headers["allow"] == "POST"
            assert _json(body)["error"]["code"] == "method_not_allowed"
            writer.write(_post(_unary()))
            assert (await _response(reader))[0] == 200
        async with _connection(r.url) as (reader, writer):
            writer.write(_post(_unary(), path="/no/such/route"))
            status, headers, _ = await _response(reader)
            assert status == 404 and headers["connection"] == "close"
            assert await reader.read() == b""
    assert ways == ["own", "own", "relayed", "refused"]
    assert len(records(tmp_path)) == 1


async def test_a_compressed_body_over_the_limit_once_decoded_is_413(
    tmp_path: Path, ways: list[str]
) -> None:
    """The body limit holds for the decoded body: a small gzip body that inflates past it
    is refused (413, then close) and never reaches the upstream."""
    gate = GateServer(hold=False)
    packed = gzip.compress(orjson.dumps(chat("tide " * 2000)))  # about 10 kB, 200 B packed
    assert len(packed) < 1024
    async with (
        rig(tmp_path, baseline=gate, mode="passthrough", max_body_bytes=1024) as r,
        _connection(r.url) as (reader, writer),
    ):
        writer.write(_post(packed, extra="Content-Encoding: gzip\r\n"))
        status, headers, body = await _response(reader)
        assert status == 413 and _json(body)["error"]["code"] == "body_too_large"
        assert headers["connection"] == "close" and await reader.read() == b""
    assert ways == ["refused"] and gate.seen == []


async def test_an_http_1_0_client_gets_one_answer_a_connection(tmp_path: Path) -> None:
    """HTTP/1.0, keep-alive asked or not: the answer says ``Connection: close`` and the
    connection ends after it (relayed, and on an own route)."""
    body = _unary()
    relayed = (
        b"POST /v1/chat/completions HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    own = b"GET /_specproxy/status HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    async with rig(tmp_path, baseline=SIM, mode="passthrough") as r:
        for request in (relayed, own):
            async with _connection(r.url) as (reader, writer):
                writer.write(request)
                status, headers, _ = await _response(reader)
                assert status == 200 and headers["connection"] == "close"
                assert await reader.read() == b""
    assert len(records(tmp_path)) == 1


@pytest.mark.parametrize(
    "line", [b"GET /_specproxy/status\r\n\r\n", b"GET /_specproxy/status\n\r\n"]
)
async def test_an_http_0_9_request_line_is_answered_then_closed(
    tmp_path: Path, line: bytes
) -> None:
    """A request line without a version (HTTP/0.9, as aiohttp's server takes it): the
    route's answer, then the close; nothing after the line is read."""
    async with (
        rig(tmp_path, baseline=SIM, mode="passthrough") as r,
        _connection(r.url) as (reader, writer),
    ):
        writer.write(line + b"GARBAGE\r\n\r\n")
        status, headers, body = await _response(reader)
        assert status == 200 and headers["connection"] == "close"
        assert _json(body)["mode"] == "passthrough"
        assert await reader.read() == b""
