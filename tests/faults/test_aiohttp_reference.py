"""The socket fuzz's oracle (``specproxy/testing/aiohttp_reference.py``) answers raw bytes
by the proxy's rules, over loopback; and the fuzz's comparison (``socket_fuzz``) reads the
proxy's answers as it says."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
import pytest

from specproxy.core.protocol.limits import MAX_FIELD_BYTES, MAX_HEADERS
from specproxy.core.records.model import Role
from specproxy.proxy import admin
from specproxy.proxy.routes import RELAYED
from specproxy.testing.aiohttp_reference import RELAYED_BODY, reference_app, serving
from specproxy.testing.fuzz_known import (
    OTHER_BODY,
    RELAYED_STATUS,
    body_short,
    first_request,
    head_alone,
    known_difference,
    seen,
    spaced_head,
)
from specproxy.testing.harness import chat
from specproxy.testing.hostile import (
    chat_post,
    closed,
    connect,
    exchange,
    post,
    read_response,
    request,
)

HOST = "Host: 127.0.0.1\r\n"
LIMIT = 1000


@asynccontextmanager
async def _reference(api_key: str | None = None) -> AsyncIterator[str]:
    app = reference_app(max_body_bytes=LIMIT, api_key=api_key, sides=[Role.BASELINE])
    async with serving(app) as url:
        yield url


def _raw(method: str, path: str, body: bytes = b"", extra: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\n{HOST}Content-Length: {len(body)}\r\n{extra}\r\n"
    return head.encode() + body


async def test_a_relayed_route_is_200_when_its_body_and_headers_can_be_used() -> None:
    async with _reference() as url:
        status, _, body = await exchange(url, chat_post())
        assert (status, body) == (200, RELAYED_BODY)
        chunked = request("aiohttp", HOST)  # the same body, chunked
        assert (await exchange(url, chunked))[0] == 200
        put = _raw("PUT", "/generate", b'{"text": "a"}')
        assert (await exchange(url, put))[0] == 200


@pytest.mark.parametrize(
    ("body", "extra"),
    [
        (b"", ""),
        (b'{"model": ', ""),
        (b"[1]", ""),
        (orjson.dumps(chat(stream="maybe")), ""),
        (orjson.dumps(chat()), "X-Specproxy-Side: neither\r\n"),
        (orjson.dumps(chat()), "X-Specproxy-Side: candidate\r\n"),  # not configured
        (orjson.dumps(chat()), "X-Specproxy-Category: \x7f\r\n"),
    ],
    ids=["empty", "broken", "array", "stream", "side", "unconfigured", "category"],
)
async def test_a_relayed_route_refuses_what_the_proxy_refuses(body: bytes, extra: str) -> None:
    async with _reference() as url:
        status, _, answer = await exchange(url, post(body, extra=extra))
    assert status == 400
    assert b"error" in answer


async def test_a_body_over_the_limit_is_413() -> None:
    big = b'{"a": "' + b"x" * LIMIT + b'"}'
    async with _reference() as url:
        async with connect(url) as (reader, writer):  # at once, from the Content-Length alone
            writer.write(_raw("POST", "/v1/completions", big)[: -len(big)])
            status, headers, _ = await read_response(reader)
            assert (status, headers.get("connection")) == (413, "close")
        chunked = request("aiohttp", HOST, big)
        assert (await exchange(url, chunked))[0] == 413
        assert (await exchange(url, _raw("POST", "/tokenize", big)))[0] == 413


@pytest.mark.parametrize("method_path", sorted(RELAYED), ids=" ".join)
async def test_every_relayed_route_of_the_product_is_served(method_path: tuple[str, str]) -> None:
    method, path = method_path
    async with _reference() as url:
        assert (await exchange(url, _raw(method, path, b'{"a": 1}')))[0] == 200


async def test_the_other_tables_of_the_product_are_served() -> None:
    async with _reference() as url:
        reads = [p.replace("{model}", "m") for p in admin.READ_PATHS]
        for path in ("/health", "/_specproxy/status", "/_specproxy/metrics", *reads):
            assert (await exchange(url, _raw("GET", path)))[0] == 200, path
            assert (await exchange(url, _raw("POST", path, b"{}")))[0] == 405, path
        for path, methods in admin.ADMIN_ROUTES.items():
            for method in methods:
                assert (await exchange(url, _raw(method, path, b'{"a": 1}')))[0] == 200, path
                assert (await exchange(url, _raw(method, path, b"x")))[0] == 400, path
                assert (await exchange(url, _raw(method, path)))[0] == 200, path
        for path in admin.REFUSED_PATHS:
            assert (await exchange(url, _raw("POST", path, b"{}")))[0] == 403, path
        assert (await exchange(url, _raw("GET", "/v1/chat/completions")))[0] == 405
        assert (await exchange(url, _raw("POST", "/v2/chat")))[0] == 404


async def test_with_a_key_only_the_open_routes_need_none() -> None:
    good = "Authorization: Bearer k1\r\n"
    async with _reference(api_key="k1") as url:
        assert (await exchange(url, chat_post()))[0] == 401
        assert (await exchange(url, chat_post(extra="Authorization: Bearer k2\r\n")))[0] == 401
        assert (await exchange(url, chat_post(extra=good)))[0] == 200
        assert (await exchange(url, _raw("GET", "/_specproxy/status")))[0] == 401
        assert (await exchange(url, _raw("GET", "/health")))[0] == 200
        assert (await exchange(url, _raw("GET", "/_specproxy/metrics")))[0] == 200


async def test_expect_is_100_continue_on_http_1_1_else_417() -> None:
    body = orjson.dumps(chat())
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\n{HOST}Content-Length: {len(body)}\r\n"
        "Expect: 100-continue\r\n\r\n"
    ).encode()
    async with _reference() as url:
        async with connect(url) as (reader, writer):
            writer.write(head)
            assert (await read_response(reader))[0] == 100
            writer.write(body)
            assert (await read_response(reader))[0] == 200
        odd = chat_post(extra="Expect: X\r\n").replace(b"Expect: X", b"Expect: \xff-continue")
        assert (await exchange(url, odd))[0] == 417
        old = chat_post(extra="Expect: 100-continue\r\n").replace(b"HTTP/1.1", b"HTTP/1.0", 1)
        assert (await exchange(url, old))[0] == 417


@pytest.mark.parametrize(
    "extra",
    [
        "X-Big: " + "a" * (MAX_FIELD_BYTES + 1) + "\r\n",
        "".join(f"X-H{i}: v\r\n" for i in range(MAX_HEADERS + 1)),
        "Host: again\r\n",
        "X-Bad\x01: v\r\n",
    ],
    ids=["field", "headers", "host-twice", "control"],
)
async def test_a_head_aiohttp_cannot_take_is_a_quiet_400(
    extra: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with _reference() as url, connect(url) as (reader, writer):
        writer.write(chat_post(extra=extra))
        status, _, body = await read_response(reader)
        assert (status, await closed(reader)) == (400, True)
    assert b"X-" not in body and b"again" not in body  # nothing of the request is quoted
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_fuzz_reads_an_answer_from_the_upstream_as_relayed() -> None:
    side = {"x-specproxy-side": "baseline"}
    assert seen(200, side, b"{}", relayed=True) == RELAYED_STATUS
    assert seen(502, side, b"{}", relayed=True) == RELAYED_STATUS  # the upstream's failure
    assert seen(404, {}, OTHER_BODY, relayed=True) == RELAYED_STATUS  # a relayed admin call
    assert seen(404, {}, OTHER_BODY) == 404
    assert seen(404, {}, b"404: Not Found", relayed=True) == 404  # the proxy's own
    assert seen(400, {}, b"{}", relayed=True) == 400
    assert seen(500, {}, b"", relayed=True) == -500  # the proxy's own failure
    assert seen(500, side, b"", relayed=True) == RELAYED_STATUS


def test_the_first_request_is_cut_where_its_body_ends() -> None:
    one = chat_post()
    assert first_request(one + b"GARBAGE") == one
    assert first_request(one + one) == one
    assert first_request(one) is None  # nothing follows it
    get = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    assert first_request(get + one) == get
    assert first_request(b"GET /_s\n\r\nGET / HTTP/1.1\r\n\r\n") == b"GET /_s\n\r\n"  # 0.9
    assert first_request(b"GET /_s\r\n\r\nGET / HTTP/1.1\r\n\r\n") == b"GET /_s\r\n\r\n"
    chunked = request("chunked", HOST)
    assert first_request(chunked + one) == chunked  # its end where the proxy finds it
    assert first_request(chunked[:-3] + one) is None  # no last chunk: not one whole
    two = one.replace(b"Content-Length:", b"Content-Length: 1\r\nContent-Length:")
    assert first_request(two + one) is None
    assert first_request(one.replace(b"Content-Length: ", b"Content-Length: -") + one) is None


async def test_the_known_differences_are_shown_by_the_reference_itself() -> None:
    one = chat_post()
    closing = chat_post(extra="Connection: close\r\n")
    broken = chat_post(extra="X-Bad\x01: v\r\n")  # aiohttp refuses this one alone
    names = f"X-{'a' * 5000}: 1\r\nX-{'b' * 5000}: 2\r\n"  # each name within the limit
    async with _reference() as url:
        assert (await exchange(url, chat_post(extra=names)))[0] == 400  # aiohttp's rule
        known = [
            await known_difference(url, closing + one, (RELAYED_STATUS,), (400,)),
            await known_difference(url, one + b"GARBAGE\r\n\r\n", (200, 400), (400,)),
            await known_difference(url, chat_post(extra=names), (200,), (400,)),
            await known_difference(url, chat_post(extra=names) + b"x\r\n\r\n", (200, 400), (400,)),
        ]
        assert known == [
            "tail refused first",
            "tail refused first",
            "name carried over",
            "tail refused first, name carried over",
        ]
        for proxy, refused, data in [
            ((200,), (400,), broken + one),  # refused alone too: a difference
            ((200,), (400,), chat_post(extra=f"X-{'a' * 9000}: 1\r\nX-b: 2\r\n")),
            ((404,), (400,), one + b"x"),  # the first request alone is not a 404
            ((200,), (404,), one + b"x"),
            ((400,), (400,), one + b"x"),
        ]:
            assert await known_difference(url, data, proxy, refused) is None, data[:60]


def test_a_spacer_header_follows_each_long_header_line_of_the_first_head() -> None:
    head = b"POST / HTTP/1.1\r\nA: " + b"a" * 100 + b"\r\nB: b\r\nC: c\r\n\r\nbody"
    spaced = b"POST / HTTP/1.1\r\nA: " + b"a" * 100 + b"\r\nX: a\r\nB: b\r\nC: c\r\n\r\nbody"
    assert spaced_head(head) == spaced
    assert spaced_head(chat_post()) is None  # no long line
    assert spaced_head(b"GET / HTTP/1.1\r\nA: " + b"a" * 200) is None  # no head end


async def test_a_path_that_is_no_route_is_a_known_difference_when_its_body_breaks() -> None:
    """The proxy answers a path that is no route on its head (404, the body unread); the
    reference reads the body first and answers a broken one 400. The head alone, given
    to the reference, is its 404 too: the known difference. A head the reference would
    refuse anyway stays a difference."""
    broken = b"zz\r\nnot a chunk\r\n"
    head = b"POST /no/such/route HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert head_alone(head + broken) == b"POST /no/such/route HTTP/1.1\r\nHost: x\r\n\r\n"
    assert head_alone(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") is None  # no body to drop
    async with _reference() as url:
        assert (await exchange(url, head + broken))[0] == 400
        assert await known_difference(url, head + broken, (404,), (400,)) == (
            "no route, body unread"
        )
        doubled = head.replace(b"Host: x\r\n", b"Host: x\r\nHost: y\r\n")
        assert await known_difference(url, doubled + broken, (404,), (400,)) is None


async def test_a_request_whose_body_is_not_all_in_is_a_known_difference() -> None:
    """The proxy waits for a declared body (it answers nothing yet); the reference answers a
    GET at once. Counted apart only when the declared body is short in the bytes sent."""
    short = b"GET /_specproxy/status HTTP/1.1\r\nContent-Length: 99999\r\nHost: x\r\n\r\n"
    assert body_short(short) and not body_short(chat_post())
    assert body_short(short.replace(b"Content-Length: 99999", b"Transfer-Encoding: chunked"))
    assert not body_short(request("chunked", HOST))  # its chunks all in
    async with _reference() as url:
        assert await known_difference(url, short, (), (200,)) == "waits for the body"
        assert await known_difference(url, chat_post(), (), (200,)) is None
