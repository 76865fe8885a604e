"""Hostile upstream answers over raw sockets: what the client gets, what is recorded, and
that the proxy's pool and other requests are not hurt (``specproxy.core.protocol.limits``)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from specproxy.core.protocol.limits import MAX_INTERIM, MAX_RESPONSE_HEAD_BYTES
from specproxy.testing.harness import CHAT_BODY, CHAT_EVENTS, records_when, rig
from specproxy.testing.hostile import (
    PATHS,
    Answer,
    RawUpstream,
    chat_post,
    connect,
    exchange,
    fixed,
    read_response,
    request,
    unary,
)

OK = unary(CHAT_BODY)
SSE = b"".join(CHAT_EVENTS)


def _chunked(body: bytes, trailer: bytes = b"") -> bytes:
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    return head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n" + trailer + b"\r\n"


@asynccontextmanager
async def _proxy(
    tmp_path: Path, answer: Answer, **options: Any
) -> AsyncIterator[tuple[str, RawUpstream]]:
    up = RawUpstream(answer)
    options.setdefault("mode", "passthrough")
    async with up.running() as url, rig(tmp_path, baseline=url, **options) as r:
        yield r.url, up


async def _one(tmp_path: Path, answer: Answer, request: bytes | None = None) -> Any:
    """The client's response to one request, and the record."""
    async with _proxy(tmp_path, answer) as (url, _):
        got = await exchange(url, request or chat_post())
        found = await records_when(tmp_path, 1)
    assert len(found) == 1
    return got, found[0]


async def test_a_second_response_in_the_same_read_is_not_mixed_in(tmp_path: Path) -> None:
    injected = unary(b'{"evil":1}', status="201 Created", extra="X-Injected: 1\r\n")
    (status, headers, body), rec = await _one(tmp_path, fixed(OK + injected))
    assert (status, body) == (200, CHAT_BODY)
    assert "x-injected" not in headers
    assert rec["error_kind"] is None and rec["status"] == 200


async def test_chunked_trailers_do_not_become_response_headers(tmp_path: Path) -> None:
    answer = fixed(_chunked(SSE, trailer=b"X-Trailer: sneaky\r\n"))
    (status, headers, body), rec = await _one(tmp_path, answer, chat_post(stream=True))
    assert status == 200 and body == SSE
    assert "x-trailer" not in headers
    assert rec["error_kind"] is None


async def test_a_complete_stream_followed_by_garbage_is_recorded_clean(tmp_path: Path) -> None:
    answer = fixed(_chunked(SSE) + b"\x00garbage that is not HTTP\r\n\r\n")
    (status, _, body), rec = await _one(tmp_path, answer, chat_post(stream=True))
    assert status == 200 and body == SSE
    assert rec["error_kind"] is None


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("code", [204, 304])
async def test_a_bodiless_status_is_relayed_without_a_body(
    tmp_path: Path, code: int, path: str
) -> None:
    answer = fixed(f"HTTP/1.1 {code} X\r\nX-A: 1\r\n\r\n".encode())
    async with _proxy(tmp_path, answer) as (url, _), connect(url) as (reader, writer):
        for _ in range(2):  # the connection stays in step: a second request on it
            writer.write(request(path, "Host: 127.0.0.1\r\n"))
            status, headers, _ = await read_response(reader)
            assert status == code
            assert "transfer-encoding" not in headers and "content-length" not in headers
        writer.write(b"x")  # nothing left over in the stream: the next bytes are a new head
        status, _, _ = await read_response(reader)
        assert status == 400


async def test_an_upstream_101_is_a_502_not_a_switch(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    answer = fixed(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n")
    (status, _, _), rec = await _one(tmp_path, answer)
    assert status == 502
    assert rec["error_kind"] == "protocol"
    assert "Fatal" not in capfd.readouterr().err
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.parametrize("line", [b"099 Odd", b"000 Zero", b"600 Six", b"903 Nine"])
async def test_a_status_that_is_no_http_status_is_a_502(tmp_path: Path, line: bytes) -> None:
    """A status outside 100-599 is not relayed (it would reach the client as ``HTTP/1.1 99``
    or an unregistered class): 502, recorded as ``protocol``."""
    answer = fixed(b"HTTP/1.1 " + line + b"\r\nContent-Length: 2\r\n\r\n{}")
    (status, _, _), rec = await _one(tmp_path, answer)
    assert status == 502
    assert rec["error_kind"] == "protocol"


@pytest.mark.parametrize(
    "framing",
    [
        "Content-Length: 10\r\nTransfer-Encoding: chunked",
        "Content-Length: 10\r\nContent-Length: 12",
    ],
    ids=["cl+te", "two-cl"],
)
async def test_contradictory_framing_is_protocol(tmp_path: Path, framing: str) -> None:
    answer = fixed(f"HTTP/1.1 200 OK\r\n{framing}\r\n\r\n0123456789ab".encode(), keep=False)
    (status, _, _), rec = await _one(tmp_path, answer)
    assert status == 502
    assert rec["error_kind"] == "protocol"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("how", ["truncated", "stalled"])
async def test_a_broken_unary_answer_is_a_502(tmp_path: Path, how: str, path: str) -> None:
    async def answer(_request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(OK[: len(OK) - 20])
        await writer.drain()
        if how == "stalled":
            await asyncio.Event().wait()  # until the proxy gives up and the server stops
        return False

    async with _proxy(tmp_path, answer, idle_timeout_s=0.3) as (url, _):
        status, _, body = await exchange(url, request(path, "Host: 127.0.0.1\r\n"))
        rec = (await records_when(tmp_path, 1))[0]
    assert status == (502 if how == "truncated" else 504), body  # not a closed socket
    assert rec["error_kind"] == ("stream_truncated" if how == "truncated" else "timeout")


async def test_endless_interim_answers_fail_the_exchange(tmp_path: Path) -> None:
    """A server sending 103 for ever: the exchange fails (``protocol``) after the limit,
    instead of being read until a deadline."""
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"

    async def answer(_request: bytes, writer: asyncio.StreamWriter) -> bool:
        for _ in range(10_000):
            writer.write(early * 10)
            await writer.drain()
        await asyncio.Event().wait()
        return False

    (status, _, _), rec = await _one(tmp_path, answer)
    assert status == 502
    assert rec["error_kind"] == "protocol"
    assert MAX_INTERIM < 10_000


async def test_a_few_interim_answers_are_skipped(tmp_path: Path) -> None:
    early = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
    (status, headers, body), rec = await _one(tmp_path, fixed(early * MAX_INTERIM + OK))
    assert (status, body) == (200, CHAT_BODY) and "link" not in headers
    assert rec["error_kind"] is None


@pytest.mark.parametrize("shape", ["one header", "many headers", "endless"])
async def test_an_oversized_response_head_is_protocol(tmp_path: Path, shape: str) -> None:
    big = b"a" * (MAX_RESPONSE_HEAD_BYTES + 1)
    many = b"".join(b"X-%d: v\r\n" % i for i in range(MAX_RESPONSE_HEAD_BYTES // 8))

    async def answer(_request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\n")
        if shape == "one header":
            writer.write(b"X-Big: " + big + b"\r\nContent-Length: 0\r\n\r\n")
        elif shape == "many headers":
            writer.write(many + b"Content-Length: 0\r\n\r\n")
        else:
            writer.write(b"X-Endless: ")
            for _ in range(256):  # up to 16 MB, while the proxy reads
                writer.write(b"a" * 65536)
                await writer.drain()
        await writer.drain()
        await asyncio.Event().wait()
        return False

    (status, _, _), rec = await _one(tmp_path, answer)
    assert status == 502
    assert rec["error_kind"] == "protocol"


async def test_a_hostile_shadow_leaves_the_primary_served(tmp_path: Path) -> None:
    """A mirror whose candidate sends endless interim answers: the shadow fails as
    ``protocol``, the primary's answers all come, one record per side."""
    early = b"HTTP/1.1 103 Early Hints\r\n\r\n"

    async def hostile(_request: bytes, writer: asyncio.StreamWriter) -> bool:
        for _ in range(2_000):
            writer.write(early * 64)
            await writer.drain()
        await asyncio.Event().wait()
        return False

    good, bad = RawUpstream(fixed(OK)), RawUpstream(hostile)
    async with (
        good.running() as b,
        bad.running() as c,
        rig(tmp_path, baseline=b, candidate=c, mode="mirror") as r,
        connect(r.url) as (reader, writer),
    ):
        for _ in range(5):
            writer.write(chat_post())
            status, _, body = await read_response(reader)
            assert (status, body) == (200, CHAT_BODY)
        found = await records_when(tmp_path, 10)
    shadows = [rec for rec in found if rec["shadow"]]
    assert len(shadows) == 5 and {rec["error_kind"] for rec in shadows} == {"protocol"}


@pytest.mark.parametrize("path", PATHS)
async def test_response_header_bytes_reach_the_client_as_sent(tmp_path: Path, path: str) -> None:
    """Bytes that are not UTF-8 in an upstream header (found by the socket fuzz: the lean
    path failed on them) are answered on both paths, unchanged on the lean one (aiohttp's
    writer drops them)."""
    raw = b"caf\xe9 \xee\xff"
    answer = fixed(OK.replace(b"\r\n\r\n", b"\r\nX-Odd: " + raw + b"\r\n\r\n", 1))
    async with _proxy(tmp_path, answer) as (url, _), connect(url) as (reader, writer):
        writer.write(request(path, "Host: 127.0.0.1\r\n"))
        head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    if path == "lean":
        assert b"\r\nX-Odd: " + raw + b"\r\n" in head


@pytest.mark.parametrize("count", [-1, 2**70, 1.5, True], ids=["negative", "huge", "float", "bool"])
async def test_a_token_count_that_is_no_count_is_ignored(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], count: object
) -> None:
    """An upstream ``usage`` whose token counts are not non-negative JSON integers (within
    JSON's exact range): the answer is relayed, the record is written without them, and the
    metrics raise nothing (a negative count failed Prometheus's counter; found by the long
    socket fuzz)."""
    body = orjson.loads(CHAT_BODY)
    body["usage"] = {"prompt_tokens": count, "completion_tokens": count, "total_tokens": count}
    (status, _, got), rec = await _one(tmp_path, fixed(unary(json.dumps(body).encode())))
    assert status == 200 and json.loads(got)["usage"] == body["usage"]
    assert rec["error_kind"] is None
    assert rec["completion_tokens"] is None and rec["prompt_tokens"] is None
    assert "metrics_failed" not in capfd.readouterr().out
