"""Injected faults: errors, stalls, truncated streams and a slow startup, in SGLang's shapes."""

from __future__ import annotations

import asyncio
import itertools
import json
import time

import aiohttp
import pytest

from specproxy.sim.config import SimConfig
from specproxy.sim.faults import FaultInjector, FaultRates
from specproxy.sim.server import serve_in_background
from tests.sim.helpers import FAST, get, post_json, sse_payloads

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16}
COMPLETION = {"model": "m", "prompt": "hello", "max_tokens": 16}
GENERATE = {"text": "hello", "sampling_params": {"max_new_tokens": 16}}


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/chat/completions", CHAT), ("/v1/completions", COMPLETION)],
)
async def test_failing_openai_requests_get_sglang_error_bodies(path: str, body: dict) -> None:
    """fail_rate 1: HTTP 500 with the flat error object; streams get an error event, then [DONE]."""
    async with (
        serve_in_background(SimConfig(**FAST, fail_rate=1.0)) as url,
        aiohttp.ClientSession() as session,
    ):
        status, raw = await post_json(session, url + path, body)
        stream_status, stream = await post_json(session, url + path, {**body, "stream": True})
    error = json.loads(raw)
    assert status == 500
    assert error == {
        "object": "error",
        "message": error["message"],
        "type": "InternalServerError",
        "param": None,
        "code": 500,
    }
    events = sse_payloads(stream)
    assert stream_status == 200
    assert events[-1] == "[DONE]"
    assert events[-2] == {"error": error}


async def test_failing_generate_requests_use_the_native_error_shapes() -> None:
    """/generate failures: {"error": {"message"}} with 500, in-stream error with code 400."""
    async with (
        serve_in_background(SimConfig(**FAST, fail_rate=1.0)) as url,
        aiohttp.ClientSession() as session,
    ):
        status, raw = await post_json(session, url + "/generate", GENERATE)
        _, stream = await post_json(session, url + "/generate", {**GENERATE, "stream": True})
    assert status == 500
    assert set(json.loads(raw)["error"]) == {"message"}
    events = sse_payloads(stream)
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["code"] == 400
    assert events[-2]["error"]["retryable"] is False


async def test_truncated_streams_end_without_done() -> None:
    """truncate_rate 1: the connection closes mid-stream and [DONE] never arrives."""
    async with (
        serve_in_background(SimConfig(**FAST, truncate_rate=1.0)) as url,
        aiohttp.ClientSession() as session,
    ):
        received: list[bytes] = []

        async def read_stream() -> None:
            async with session.post(
                url + "/v1/completions", json={**COMPLETION, "stream": True}
            ) as r:
                received.extend([chunk async for chunk in r.content.iter_any()])

        with pytest.raises(aiohttp.ClientPayloadError):
            await read_stream()
        status, _ = await get(session, url + "/health")
    assert b"[DONE]" not in b"".join(received)
    assert status == 200  # the server survives


async def test_stalled_streams_pause_between_two_events() -> None:
    """stall_rate 1 with stall_s 0.3 leaves a gap of at least 0.3 s inside the stream."""
    config = SimConfig(**FAST, stall_rate=1.0, stall_s=0.3)
    async with (
        serve_in_background(config) as url,
        aiohttp.ClientSession() as session,
        session.post(url + "/generate", json={**GENERATE, "stream": True}) as r,
    ):
        arrivals = [time.perf_counter() async for _ in r.content.iter_any()]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert max(gaps) >= 0.3


async def test_startup_delay_answers_503_until_ready() -> None:
    """During the startup delay /health and generation routes answer 503, then 200."""
    # long enough that the first requests come inside it on a loaded 2-core machine
    config = SimConfig(**FAST, startup_delay_s=3.0)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        assert (await get(session, url + "/health"))[0] == 503
        assert (await post_json(session, url + "/v1/chat/completions", CHAT))[0] == 503
        assert (await get(session, url + "/server_info"))[0] == 200
        deadline = time.monotonic() + 15
        while (await get(session, url + "/health"))[0] != 200:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)  # polling a condition, not synchronising on time
        assert (await post_json(session, url + "/v1/chat/completions", CHAT))[0] == 200


def test_fault_rates_apply_to_about_that_share_of_requests() -> None:
    """A 0.3 fail rate fails about 30% of 2000 planned requests, reproducibly for one seed."""
    injector = FaultInjector(FaultRates(fail_rate=0.3), seed=5)
    plans = [injector.plan(10) for _ in range(2000)]
    failing = sum(plan.fail_at is not None for plan in plans)
    assert 500 < failing < 700
    again = FaultInjector(FaultRates(fail_rate=0.3), seed=5)
    assert [again.plan(10) for _ in range(2000)] == plans
