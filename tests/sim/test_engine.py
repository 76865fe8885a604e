"""The latency model, batching, queueing, aborts and scale of the simulated scheduler."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import aiohttp

from specproxy.runtime import spawn
from specproxy.sim.config import SimConfig
from specproxy.sim.engine import Engine, LatencyModel, SimJob
from specproxy.sim.server import serve_in_background
from specproxy.sim.text import OutputPlan
from tests.sim.helpers import NoObserver, VirtualClock, get, post_json, sse_payloads

NO_COST = {"decode_step_ms": 0.0, "verify_step_ms": 0.0, "prefill_us_per_token": 0.0}


def generate_body(prompt: str, tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "text": prompt,
        "sampling_params": {"max_new_tokens": tokens, "temperature": 0},
        **extra,
    }


async def generate_meta(session: aiohttp.ClientSession, url: str, prompt: str, tokens: int) -> Any:
    status, raw = await post_json(session, url + "/generate", generate_body(prompt, tokens))
    assert status == 200
    return json.loads(raw)["meta_info"]


def test_latency_model_scales_step_time_with_running_requests() -> None:
    """A step costs base x (1 + contention x (running - 1)); prefill costs per uncached token."""
    model = LatencyModel.from_ms(
        decode_step_ms=10, verify_step_ms=15, prefill_us_per_token=30, contention=0.1
    )
    assert model.step_us(1, speculative=False) == 10_000
    assert model.step_us(11, speculative=False) == 20_000
    assert model.step_us(1, speculative=True) == 15_000
    assert model.prefill_us(1000) == 30_000


async def test_requests_over_max_running_requests_wait_in_the_queue() -> None:
    """With max_running_requests 2, the third and fourth request wait until a slot frees."""
    config = SimConfig(max_running_requests=2, decode_step_ms=5.0, prefill_us_per_token=0.0)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        metas = await asyncio.gather(
            *(generate_meta(session, url, f"prompt {i}", 10) for i in range(4))
        )
    queue_times = sorted(m["queue_time"] for m in metas)
    # the queued pair waits at least for 9 decode steps of 5 ms of the first pair
    assert queue_times[2] >= 0.045
    assert queue_times[1] < queue_times[2]


async def test_speculation_with_full_acceptance_is_faster_than_the_baseline() -> None:
    """Equal step costs and 4 tokens per verify step make the speculative request ~4x faster."""
    costs = {"decode_step_ms": 10.0, "verify_step_ms": 10.0, "prefill_us_per_token": 0.0}
    spec = SimConfig(
        **costs,
        speculative_algorithm="STANDALONE",
        speculative_draft_model_path="draft",
        accept_prob=1.0,
    )
    async with (
        serve_in_background(SimConfig(**costs)) as base_url,
        serve_in_background(spec) as spec_url,
        aiohttp.ClientSession() as session,
    ):
        base = await generate_meta(session, base_url, "same prompt", 21)
        fast = await generate_meta(session, spec_url, "same prompt", 21)
    assert base["e2e_latency"] >= 0.2  # 20 decode steps of 10 ms
    assert fast["spec_verify_ct"] == 5  # 20 tokens after prefill, 4 per verify step
    assert fast["e2e_latency"] < base["e2e_latency"] / 2


async def test_step_time_grows_with_the_running_batch() -> None:
    """With contention 1.0, a decode step of four running requests lasts exactly four single steps."""
    latency = LatencyModel.from_ms(
        decode_step_ms=2.0, verify_step_ms=2.0, prefill_us_per_token=0.0, contention=1.0
    )

    async def step_gaps(running: int) -> set[int]:
        engine = Engine(
            latency=latency,
            max_running=running,
            acceptance=None,
            observer=NoObserver(),
            prefix_caching=False,
            clock=VirtualClock(),
        )
        jobs = [
            SimJob(rid=f"r{i}", prompt_ids=[i], plan=OutputPlan(tuple(range(11)), "length"))
            for i in range(running)
        ]
        for job in jobs:
            engine.submit(job)
        task = spawn(engine.run(), name="step-time-test-engine")
        try:
            await asyncio.gather(*(job.ended.wait() for job in jobs))
        finally:
            task.cancel()
        assert all(len(job.emit_ns) == 11 for job in jobs)  # one prefill token, then 10 steps
        return {b - a for job in jobs for a, b in itertools.pairwise(job.emit_ns)}

    assert await step_gaps(1) == {2_000_000}
    assert await step_gaps(4) == {8_000_000}


async def test_hundreds_of_concurrent_streams_complete_with_zero_step_cost() -> None:
    """300 concurrent chat streams finish, each with its [DONE], when steps cost nothing."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 32,
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    async def one(session: aiohttp.ClientSession, url: str) -> int:
        status, raw = await post_json(session, url + "/v1/chat/completions", body)
        events = sse_payloads(raw)
        assert status == 200
        assert events[-1] == "[DONE]"
        return int(events[-2]["usage"]["completion_tokens"])

    connector = aiohttp.TCPConnector(limit=0)
    async with (
        serve_in_background(SimConfig(**NO_COST)) as url,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        counts = await asyncio.gather(*(one(session, url) for _ in range(300)))
    assert counts == [32] * 300  # how fast: bench/replay_load.py (closed loop), not a unit test


async def test_token_ids_beyond_32_bits_do_not_stop_the_engine() -> None:
    """input_ids of any integer size are served, and the requests after them are served too."""
    huge = {"input_ids": [2**40, -(2**40), 5], "sampling_params": {"max_new_tokens": 3}}
    async with (
        serve_in_background(SimConfig(**NO_COST)) as url,
        aiohttp.ClientSession() as session,
        asyncio.timeout(10),
    ):
        status, raw = await post_json(session, url + "/generate", huge)
        after = await generate_meta(session, url, "after", 3)
    assert status == 200
    assert json.loads(raw)["meta_info"]["prompt_tokens"] == 3
    assert after["completion_tokens"] == 3


async def test_abort_request_ends_a_running_stream_with_finish_reason_abort() -> None:
    """POST /abort_request with the rid finishes that stream with an abort final event and [DONE]."""
    config = SimConfig(decode_step_ms=5.0, prefill_us_per_token=0.0)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        body = generate_body("long answer", 2000, stream=True, rid="to-abort")
        async with session.post(url + "/generate", json=body) as response:
            first = await response.content.readuntil(b"\n\n")
            assert first.startswith(b"data: {")
            status, _ = await post_json(session, url + "/abort_request", {"rid": "to-abort"})
            assert status == 200
            rest = await response.read()
    events = sse_payloads(first + rest)
    assert events[-1] == "[DONE]"
    final = events[-2]["meta_info"]
    assert final["finish_reason"]["type"] == "abort"
    assert final["completion_tokens"] < 2000


async def test_a_client_that_disconnects_frees_its_batch_slot() -> None:
    """Closing a stream mid-way aborts it, so a queued request runs without waiting for it."""
    config = SimConfig(max_running_requests=1, decode_step_ms=2.0, prefill_us_per_token=0.0)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        response = await session.post(url + "/generate", json=generate_body("a", 5000, stream=True))
        await response.content.readuntil(b"\n\n")
        response.close()
        start = time.perf_counter()
        meta = await generate_meta(session, url, "b", 5)
        assert time.perf_counter() - start < 2.0  # the first request alone would take 10 s
        assert meta["finish_reason"]["type"] == "length"
        _, loads = await get(session, url + "/v1/loads")
    assert json.loads(loads)["loads"][0]["num_running_reqs"] == 0


async def test_health_generate_answers_while_the_batch_is_full() -> None:
    """/health_generate returns 200 as soon as the engine makes progress, even with a queue."""
    config = SimConfig(max_running_requests=1, decode_step_ms=2.0, prefill_us_per_token=0.0)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        response = await session.post(url + "/generate", json=generate_body("a", 500, stream=True))
        await response.content.readuntil(b"\n\n")
        status, body = await get(session, url + "/health_generate")
        response.close()
    assert status == 200
    assert body == b""
