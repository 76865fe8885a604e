"""HttpBackend over real loopback HTTP and HTTPS (a TLS relay in front of the server,
its certificate from a test CA): one measurement per request, whatever happens."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
import trustme
from aiohttp import web

from specproxy.backends.base import BackendSpec, Timeouts, UpstreamRequest
from specproxy.backends.exchange import measure_exchange
from specproxy.backends.http import HttpBackend, open_backend
from specproxy.backends.send import send
from specproxy.core.records.model import AcceptanceSource, ErrorKind, Measurement, Role, Route
from specproxy.errors import BackendUnreachable
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.testing.harness import CHAT_EVENTS, closed_port_url, serve_app

FAST = {"decode_step_ms": 0.2, "verify_step_ms": 0.3, "prefill_us_per_token": 1.0}


def _chat(stream: bool, **extra: object) -> UpstreamRequest:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "one two three"}],
        "max_tokens": 12,
        "temperature": 0,
        "stream": stream,
        **extra,
    }
    return UpstreamRequest(route=Route.CHAT, body=orjson.dumps(body), stream=stream)


TIMING = ("headers_us", "ttft_us", "e2e_us", "tpot_us", "server_e2e_us")
SERVER_STATE = ("cached_tokens",)  # the second send of a prompt finds it cached


@contextlib.asynccontextmanager
async def _tls_front(url: str, ca: trustme.CA) -> AsyncIterator[str]:
    """``url`` behind TLS: a loopback relay that ends TLS (a certificate for 127.0.0.1 from
    ``ca``) and pipes the bytes both ways; yields its ``https://`` URL."""
    target = urlsplit(url)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    tasks: set[asyncio.Task[Any]] = set()

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        assert target.hostname is not None and target.port is not None
        up_r, up_w = await asyncio.open_connection(target.hostname, target.port)
        both = asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))
        tasks.add(both)
        await both

    server = await asyncio.start_server(relay, "127.0.0.1", 0, ssl=server_ctx)
    try:
        yield f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await server.wait_closed()


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


Reach = Callable[[str], contextlib.AbstractAsyncContextManager[str]]


@pytest.fixture(params=["http", "https"])
def reach(
    request: pytest.FixtureRequest, ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Reach:
    """How a test reaches a loopback server: as it is (``http``), or behind TLS (``https``:
    the backend trusts the test's CA through ``SSL_CERT_FILE``)."""
    if request.param == "http":
        return contextlib.nullcontext
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    monkeypatch.setenv("SSL_CERT_FILE", str(pem))
    return lambda url: _tls_front(url, ca)


@pytest.fixture
async def backend(reach: Reach) -> AsyncIterator[HttpBackend]:
    sim = SimConfig(speculative_algorithm="EAGLE", **FAST)
    async with (
        serve_in_background(sim) as plain,
        reach(plain) as url,
        open_backend(BackendSpec(url, Role.CANDIDATE)) as b,
    ):
        yield b


def _generate(stream: bool, tokens: int) -> UpstreamRequest:
    body = {"text": "a b c", "stream": stream, "sampling_params": {"max_new_tokens": tokens}}
    return UpstreamRequest(route=Route.GENERATE, body=orjson.dumps(body), stream=stream)


def _content(m: Measurement) -> Measurement:
    """``m`` without its times (the chunks' count kept) and the server's cache hits."""
    offsets = tuple(range(len(m.chunk_offsets_us)))
    return dataclasses.replace(m, chunk_offsets_us=offsets, **dict.fromkeys(TIMING + SERVER_STATE))


async def test_streamed_generate_is_measured_with_exact_acceptance(backend: HttpBackend) -> None:
    """A /generate stream yields TTFT, E2E, tokens and meta_info acceptance, reported once."""
    done: list[Measurement] = []
    body = {"text": "a b c", "sampling_params": {"max_new_tokens": 20, "temperature": 0}}
    req = UpstreamRequest(route=Route.GENERATE, body=orjson.dumps(body), stream=False)
    m = await send(backend, req, on_done=done.append)
    assert done == [m]
    assert m.ok and m.status == 200
    assert m.completion_tokens == 20
    assert m.acceptance is not None and m.acceptance.source is AcceptanceSource.META_INFO
    body["stream"] = True
    req = UpstreamRequest(route=Route.GENERATE, body=orjson.dumps(body), stream=True)
    m2 = await send(backend, req, on_done=done.append)
    assert m2.ok and m2.ttft_us is not None and m2.e2e_us is not None
    assert m2.ttft_us <= m2.e2e_us
    assert sum(m2.chunk_tokens) == 20
    assert m2.acceptance is not None and m2.acceptance.verify_ct is not None
    assert m2.output_sha256 == m.output_sha256  # same greedy output either way
    assert backend.in_flight == 0


@pytest.mark.parametrize("stream", [True, False])
async def test_both_schemes_measure_a_response_alike(
    stream: bool, ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same answers, reached over plain HTTP and over TLS, fold to the same
    Measurements (times and cache hits aside), one per send."""
    pem = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    monkeypatch.setenv("SSL_CERT_FILE", str(pem))
    sim = SimConfig(speculative_algorithm="EAGLE", **FAST)
    async with (
        serve_in_background(sim) as url,
        _tls_front(url, ca) as tls_url,
        open_backend(BackendSpec(url, Role.CANDIDATE)) as plain,
        open_backend(BackendSpec(tls_url, Role.CANDIDATE)) as tls,
    ):
        for request in (_chat(stream), _generate(stream, 24)):
            done: list[Measurement] = []
            by_plain = await send(plain, request, on_done=done.append)
            by_tls = await send(tls, request, on_done=done.append)
            assert done == [by_plain, by_tls]
            assert by_plain.ok and by_plain.status == 200 and by_plain.output_sha256
            assert len(by_plain.chunk_offsets_us) == len(by_plain.chunk_tokens)
            assert _content(by_plain) == _content(by_tls)


async def test_a_server_whose_certificate_is_not_trusted_is_a_connect_failure(
    ca: trustme.CA,
) -> None:
    """TLS is verified: a certificate from a CA the backend does not trust fails the send
    as ``connect``, before anything is written."""
    async with (
        serve_app(web.Application()) as url,
        _tls_front(url, ca) as tls_url,
        open_backend(BackendSpec(tls_url, Role.BASELINE)) as backend,
    ):
        m = await send(backend, _chat(False), on_done=lambda _m: None)
    assert m.error_kind is ErrorKind.CONNECT and m.status is None
    assert "CERTIFICATE_VERIFY_FAILED" in (m.error_message or "")


async def test_the_answers_head_reaches_on_head(backend: HttpBackend) -> None:
    heads: list[tuple[int, str]] = []
    m = await send(
        backend,
        _chat(True),
        on_done=lambda _m: None,
        on_head=lambda status, h: heads.append((status, h["Content-Type"].split(";")[0])),
    )
    assert m.ok and heads == [(200, "text/event-stream")]


@pytest.mark.parametrize("scheme", ["http", "https"])
async def test_refused_connection_is_a_connect_failure_not_an_exception(scheme: str) -> None:
    """A server that is down gives a `connect` measurement and on_done still runs once."""
    url = closed_port_url().replace("http:", f"{scheme}:", 1)
    async with open_backend(BackendSpec(url=url, role=Role.BASELINE)) as backend:
        done: list[Measurement] = []
        m = await send(backend, _chat(False), on_done=done.append)
        assert done == [m] and m.error_kind is ErrorKind.CONNECT
        with pytest.raises(BackendUnreachable):
            await backend.get("/server_info")
        assert backend.in_flight == 0


async def test_http_error_and_timeouts_are_classified(reach: Reach) -> None:
    """An upstream 503 is http_5xx with its message; no headers before the deadline is a
    timeout, and so is a body that stops coming for longer than ``idle_s``."""
    release = asyncio.Event()

    async def slow(_req: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({})

    async def broken(_req: web.Request) -> web.Response:
        return web.json_response({"object": "error", "message": "overloaded"}, status=503)

    async def stalls(req: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(req)
        await resp.write(CHAT_EVENTS[0])
        await release.wait()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", broken)
    app.router.add_post("/generate", slow)
    app.router.add_post("/v1/completions", stalls)
    async with serve_app(app, on_stop=release) as plain, reach(plain) as url:
        timeouts = Timeouts(first_byte_s=0.2, idle_s=0.2)
        async with open_backend(BackendSpec(url, Role.BASELINE, timeouts=timeouts)) as backend:
            m = await send(backend, _chat(False), on_done=lambda _m: None)
            assert m.error_kind is ErrorKind.HTTP_5XX and m.status == 503
            assert m.error_message is not None and "overloaded" in m.error_message
            gen = UpstreamRequest(route=Route.GENERATE, body=b"{}", stream=False)
            m2 = await send(backend, gen, on_done=lambda _m: None)
            assert m2.error_kind is ErrorKind.TIMEOUT and m2.status is None
            stalled = UpstreamRequest(route=Route.COMPLETIONS, body=b"{}", stream=True)
            m3 = await send(backend, stalled, on_done=lambda _m: None)
            assert m3.error_kind is ErrorKind.TIMEOUT and m3.status == 200
            assert m3.error_message == "no data from server before deadline"
            assert backend.in_flight == 0


async def test_cancelling_the_sender_still_reports_one_measurement(backend: HttpBackend) -> None:
    """Cancelling the task mid-request calls on_done once with client_cancelled, then cancels."""
    done: list[Measurement] = []
    heads: list[int] = []
    task = asyncio.get_running_loop().create_task(
        send(
            backend,
            _generate(True, 5000),
            on_done=done.append,
            on_head=lambda status, _h: heads.append(status),
        )
    )
    while not heads:
        await asyncio.sleep(0)  # until the answer has begun
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(done) == 1 and done[0].error_kind is ErrorKind.CLIENT_CANCELLED
    assert backend.in_flight == 0


async def test_a_paused_exchange_reads_nothing_until_resumed(backend: HttpBackend) -> None:
    """Backpressure through the seam: paused as its head comes in, an exchange takes at
    most the read in hand and does not end; resumed, it reads the rest and ends cleanly."""
    request = _generate(True, 64)
    with backend.counted():
        ex = await backend.open_exchange(request, time.perf_counter_ns())
        ex.pause_reading()
        held = len(ex.chunks)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(ex.ended), 0.3)
        assert len(ex.chunks) <= held + 1  # the read already in hand, at most
        ex.resume_reading()
        await asyncio.wait_for(ex.ended, 10)
    m = measure_exchange(request.route, True, ex, None, 0, keep_text=False)
    assert m.ok and m.completion_tokens == 64
