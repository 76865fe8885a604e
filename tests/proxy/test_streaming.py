"""Faithful relaying: the client gets the primary's bytes, status and content type, event by event."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from specproxy.sim.config import SimConfig
from specproxy.testing.harness import chat, records, rig, serve_app

SIM_16 = SimConfig(deterministic_ids=True, decode_step_ms=0.2, prefill_us_per_token=1.0)
SIM_23 = SimConfig(
    deterministic_ids=True,
    speculative_algorithm="EAGLE",
    sglang_version="0.5.23",
    verify_step_ms=0.3,
    prefill_us_per_token=1.0,
)

BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": chat("Tell me about lighthouses.", rid="fixed-chat"),
    "/v1/completions": {
        "model": "m",
        "prompt": "Lighthouses are",
        "max_tokens": 12,
        "temperature": 0,
        "rid": "fixed-completion",
    },
    "/generate": {
        "text": "Lighthouses are",
        "sampling_params": {"max_new_tokens": 12, "temperature": 0},
        "rid": "fixed-generate",
    },
}


async def _fetch(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any]
) -> tuple[int, str | None, bytes]:
    async with session.post(url, json=body) as resp:
        return resp.status, resp.headers.get("Content-Type"), await resp.read()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
@pytest.mark.parametrize("route", list(BODIES))
async def test_proxy_bytes_equal_direct_bytes(tmp_path: Path, route: str, stream: bool) -> None:
    """The same deterministic request, direct and through the proxy, gives identical bytes."""
    body = {**BODIES[route], "stream": stream}
    async with rig(tmp_path, baseline=SIM_16, mode="passthrough") as r:
        assert r.baseline is not None
        direct = await _fetch(r.session, r.baseline + route, body)
        proxied = await _fetch(r.session, r.url + route, body)
    assert direct[0] == 200
    assert proxied == direct
    if stream:
        assert direct[2].endswith(b"data: [DONE]\n\n")
    (record,) = records(tmp_path)
    assert record["error_kind"] is None
    assert record["completion_tokens"] == 12  # exact: usage was requested upstream and stripped


@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/completions"])
async def test_spec_details_are_requested_and_stripped_on_0_5_23(
    tmp_path: Path, route: str
) -> None:
    """Against SGLang 0.5.23 the proxy reads per-request acceptance from sglext the client never sees."""
    body = {**BODIES[route], "stream": True}
    async with rig(tmp_path, candidate=SIM_23, mode="passthrough", primary="candidate") as r:
        assert r.candidate is not None
        direct = await _fetch(r.session, r.candidate + route, body)
        proxied = await _fetch(r.session, r.url + route, body)
        asked = {**body, "return_spec_tokens_details": True}
        direct_with_ext = await _fetch(r.session, r.candidate + route, asked)
    assert proxied == direct
    assert b'"sglext"' not in proxied[2]
    assert b'"usage":{' not in proxied[2]
    assert b'"sglext"' in direct_with_ext[2]  # the simulator does emit it when asked
    (record,) = records(tmp_path)
    assert record["acceptance"]["source"] == "sglext"
    assert record["acceptance"]["verify_ct"] > 0
    assert record["completion_tokens"] == 12


async def test_client_that_asks_for_usage_and_sglext_gets_them(tmp_path: Path) -> None:
    """A client that asks for include_usage and spec details receives both events unchanged."""
    body = {
        **BODIES["/v1/chat/completions"],
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_spec_tokens_details": True,
    }
    async with rig(tmp_path, candidate=SIM_23, mode="passthrough", primary="candidate") as r:
        assert r.candidate is not None
        direct = await _fetch(r.session, r.candidate + "/v1/chat/completions", body)
        proxied = await _fetch(r.session, r.url + "/v1/chat/completions", body)
    assert proxied == direct
    assert b'"sglext"' in proxied[2]
    assert b'"usage":{' in proxied[2]


async def test_mirror_sends_one_body_and_strips_for_the_client(tmp_path: Path) -> None:
    """In mirror mode with a 0.5.16 primary the client's stream equals the primary's direct stream."""
    body = {**BODIES["/v1/chat/completions"], "stream": True}
    async with rig(tmp_path, baseline=SIM_16, candidate=SIM_23, mode="mirror") as r:
        assert r.baseline is not None
        direct = await _fetch(r.session, r.baseline + "/v1/chat/completions", body)
        proxied = await _fetch(r.session, r.url + "/v1/chat/completions", body)
    assert proxied == direct
    by_side = {rec["side"]: rec for rec in records(tmp_path)}
    assert by_side["candidate"]["completion_tokens"] == 12
    assert by_side["candidate"]["acceptance"]["source"] == "chunk_estimate"  # 0.5.16 in the pair


class _Stepper:
    """An upstream that sends one event, then waits until the test has seen it arrive."""

    def __init__(self) -> None:
        self.client_saw_first = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"text": "a", "meta_info": {"completion_tokens": 1}}\n\n')
        await self.client_saw_first.wait()
        await resp.write(b'data: {"text": "ab", "meta_info": {"completion_tokens": 2}}\n\n')
        await resp.write(b"data: [DONE]\n\n")
        return resp

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        app = web.Application()
        app.router.add_post("/generate", self.handle)
        async with serve_app(app, on_stop=self.client_saw_first) as url:
            yield url


async def test_each_event_reaches_the_client_before_the_next_is_sent(tmp_path: Path) -> None:
    """The upstream withholds event two until the client has event one: only unbuffered relaying passes."""
    stepper = _Stepper()
    body = {"text": "x", "stream": True}
    async with (
        stepper.running() as upstream,
        rig(tmp_path, baseline=upstream, mode="passthrough") as r,
        asyncio.timeout(10),
        r.session.post(r.url + "/generate", json=body) as resp,
    ):
        first = await resp.content.readuntil(b"\n\n")
        stepper.client_saw_first.set()
        rest = await resp.read()
    assert first == b'data: {"text": "a", "meta_info": {"completion_tokens": 1}}\n\n'
    assert rest.endswith(b"data: [DONE]\n\n")


async def test_headers_passed_through_and_request_id_added(tmp_path: Path) -> None:
    """Content type and length of a unary answer pass through; the proxy adds its request id."""
    body = {**BODIES["/v1/chat/completions"], "stream": False}
    async with rig(tmp_path, baseline=SIM_16, mode="passthrough") as r:
        assert r.baseline is not None
        async with r.session.post(r.baseline + "/v1/chat/completions", json=body) as resp:
            direct_headers = resp.headers.copy()
            await resp.read()
        async with r.session.post(r.url + "/v1/chat/completions", json=body) as resp:
            proxied_headers = resp.headers.copy()
            await resp.read()
    assert proxied_headers["Content-Type"] == direct_headers["Content-Type"]
    assert proxied_headers["Content-Length"] == direct_headers["Content-Length"]
    (record,) = records(tmp_path)
    assert proxied_headers["x-specproxy-request-id"] == record["request_id"]
