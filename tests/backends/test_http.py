"""HttpBackend over real loopback HTTP: one measurement per request, whatever happens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import orjson
import pytest
from aiohttp import web

from specproxy.backends.base import BackendSpec, Timeouts, UpstreamRequest
from specproxy.backends.http import HttpBackend
from specproxy.core import injected_events
from specproxy.core.model import AcceptanceSource, ErrorKind, Measurement, Role, Route
from specproxy.errors import BackendUnreachable
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.testing.harness import closed_port_url, serve_app

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


class _Sink:
    def __init__(self, fail_after: int | None = None) -> None:
        self.status: int | None = None
        self.headers: Mapping[str, str] = {}
        self.chunks: list[bytes] = []
        self.ended = False
        self._fail_after = fail_after

    async def on_headers(self, status: int, headers: Mapping[str, str]) -> None:
        self.status = status
        self.headers = headers

    async def on_bytes(self, data: bytes) -> None:
        if self._fail_after is not None and len(self.chunks) >= self._fail_after:
            raise ConnectionResetError("client went away")
        self.chunks.append(data)

    async def on_end(self) -> None:
        self.ended = True


@pytest.fixture
async def backend() -> AsyncIterator[HttpBackend]:
    async with serve_in_background(SimConfig(speculative_algorithm="EAGLE", **FAST)) as url:
        started = HttpBackend(BackendSpec(url=url, role=Role.CANDIDATE))
        await started.start()
        try:
            yield started
        finally:
            await started.close()


async def test_streamed_generate_is_measured_with_exact_acceptance(backend: HttpBackend) -> None:
    """A /generate stream yields TTFT, E2E, tokens and meta_info acceptance, reported once."""
    done: list[Measurement] = []
    body = {"text": "a b c", "sampling_params": {"max_new_tokens": 20, "temperature": 0}}
    req = UpstreamRequest(route=Route.GENERATE, body=orjson.dumps(body), stream=False)
    m = await backend.send(req, on_done=done.append)
    assert done == [m]
    assert m.ok and m.status == 200
    assert m.completion_tokens == 20
    assert m.acceptance is not None and m.acceptance.source is AcceptanceSource.META_INFO
    body["stream"] = True
    req = UpstreamRequest(route=Route.GENERATE, body=orjson.dumps(body), stream=True)
    m2 = await backend.send(req, on_done=done.append)
    assert m2.ok and m2.ttft_us is not None and m2.e2e_us is not None
    assert m2.ttft_us <= m2.e2e_us
    assert sum(m2.chunk_tokens) == 20
    assert m2.acceptance is not None and m2.acceptance.verify_ct is not None
    assert m2.output_sha256 == m.output_sha256  # same greedy output either way
    assert backend.in_flight == 0


async def test_sink_gets_the_exact_bytes_and_filter_drops_only_chosen_events(
    backend: HttpBackend,
) -> None:
    """Without a filter the sink sees every byte; with one, only the usage-only event goes."""
    sink = _Sink()
    req = _chat(True, stream_options={"include_usage": True})
    m = await backend.send(req, on_done=lambda _m: None, sink=sink)
    raw = b"".join(sink.chunks)
    assert sink.status == 200 and sink.ended and m.ok
    assert raw.endswith(b"data: [DONE]\n\n")
    assert b'"choices":[]' in raw
    filtered = _Sink()
    m2 = await backend.send(
        req, on_done=lambda _m: None, sink=filtered, drop_event=injected_events.is_usage_only_event
    )
    got = b"".join(filtered.chunks)
    assert m2.ok and m2.completion_tokens == m.completion_tokens == 12
    assert b'"choices":[]' not in got
    assert got.endswith(b"data: [DONE]\n\n")
    assert len(got) < len(raw)


async def test_content_length_reaches_the_sink_only_when_no_event_can_be_withheld() -> None:
    """A stream with a declared length keeps it unfiltered; filtered, the length is removed."""
    content = b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n'
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n'
    done = b"data: [DONE]\n\n"
    events = content + usage + done

    async def fixed_length(_req: web.Request) -> web.Response:
        return web.Response(body=events, content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", fixed_length)
    async with serve_app(app) as url:
        backend = HttpBackend(BackendSpec(url=url, role=Role.BASELINE))
        await backend.start()
        try:
            whole, filtered = _Sink(), _Sink()
            await backend.send(_chat(True), on_done=lambda _m: None, sink=whole)
            drop = injected_events.is_usage_only_event
            await backend.send(_chat(True), on_done=lambda _m: None, sink=filtered, drop_event=drop)
        finally:
            await backend.close()
    assert whole.headers["Content-Length"] == str(len(events)) == str(len(b"".join(whole.chunks)))
    assert "Content-Length" not in filtered.headers
    assert b"".join(filtered.chunks) == content + done


async def test_client_disconnect_is_recorded_as_client_cancelled(backend: HttpBackend) -> None:
    """When the sink's client goes away the request ends as client_cancelled, once."""
    done: list[Measurement] = []
    long_stream = _chat(True, max_tokens=400)
    m = await backend.send(long_stream, on_done=done.append, sink=_Sink(fail_after=2))
    assert done == [m]
    assert m.error_kind is ErrorKind.CLIENT_CANCELLED


async def test_refused_connection_is_a_connect_failure_not_an_exception() -> None:
    """A server that is down gives a `connect` measurement and on_done still runs once."""
    backend = HttpBackend(BackendSpec(url=closed_port_url(), role=Role.BASELINE))
    await backend.start()
    done: list[Measurement] = []
    m = await backend.send(_chat(False), on_done=done.append)
    assert done == [m] and m.error_kind is ErrorKind.CONNECT
    with pytest.raises(BackendUnreachable):
        await backend.get("/server_info")
    await backend.close()


async def test_http_error_and_timeout_are_classified() -> None:
    """An upstream 503 is http_5xx with its message; no headers before the deadline is timeout."""
    release = asyncio.Event()

    async def slow(_req: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({})

    async def broken(_req: web.Request) -> web.Response:
        return web.json_response({"object": "error", "message": "overloaded"}, status=503)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", broken)
    app.router.add_post("/generate", slow)
    async with serve_app(app, on_stop=release) as url:
        backend = HttpBackend(
            BackendSpec(url=url, role=Role.BASELINE, timeouts=Timeouts(first_byte_s=0.2))
        )
        await backend.start()
        try:
            m = await backend.send(_chat(False), on_done=lambda _m: None)
            assert m.error_kind is ErrorKind.HTTP_5XX and m.status == 503
            assert m.error_message is not None and "overloaded" in m.error_message
            gen = UpstreamRequest(route=Route.GENERATE, body=b"{}", stream=False)
            m2 = await backend.send(gen, on_done=lambda _m: None)
            assert m2.error_kind is ErrorKind.TIMEOUT
        finally:
            await backend.close()


async def test_cancelling_the_sender_still_reports_one_measurement(backend: HttpBackend) -> None:
    """Cancelling the task mid-request calls on_done once with client_cancelled, then cancels."""
    done: list[Measurement] = []
    first_bytes = asyncio.Event()

    class _Notify(_Sink):
        async def on_bytes(self, data: bytes) -> None:
            first_bytes.set()
            await super().on_bytes(data)

    body = {"text": "x", "sampling_params": {"max_new_tokens": 2000}, "stream": True}
    req = UpstreamRequest(route=Route.GENERATE, body=orjson.dumps(body), stream=True)
    task = asyncio.get_running_loop().create_task(
        backend.send(req, on_done=done.append, sink=_Notify())
    )
    await first_bytes.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(done) == 1 and done[0].error_kind is ErrorKind.CLIENT_CANCELLED
    assert backend.in_flight == 0
