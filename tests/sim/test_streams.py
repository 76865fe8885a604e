"""Less common request options: continuous usage stats, echo, token-id prompts, PUT, loads formats."""

from __future__ import annotations

import json

import aiohttp

from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from tests.sim.helpers import FAST, post_json, sse_payloads

CONTINUOUS = {"include_usage": True, "continuous_usage_stats": True}


async def test_continuous_usage_stats_put_running_counts_on_content_events() -> None:
    """continuous_usage_stats: completions chunks and chat content chunks carry counts so far."""
    chat = {
        "model": "m",
        "messages": [{"role": "user", "content": "q"}],
        "max_tokens": 12,
        "stream": True,
        "stream_options": CONTINUOUS,
    }
    completion = {
        "model": "m",
        "prompt": "q",
        "max_tokens": 12,
        "stream": True,
        "stream_options": CONTINUOUS,
    }
    config = SimConfig(**FAST, speculative_algorithm="EAGLE")
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        _, chat_raw = await post_json(session, url + "/v1/chat/completions", chat)
        _, comp_raw = await post_json(session, url + "/v1/completions", completion)
    chat_events = [e for e in sse_payloads(chat_raw)[:-1] if e["choices"]]
    content = [e for e in chat_events if e["choices"][0]["delta"].get("content")]
    counts = [e["usage"]["completion_tokens"] for e in content]
    assert counts == sorted(counts)
    assert counts[-1] == 12
    assert "usage" not in chat_events[0]  # the role chunk
    comp_events = [e for e in sse_payloads(comp_raw)[:-1] if e["choices"]]
    assert all(e["usage"]["prompt_tokens"] == 1 for e in comp_events)
    assert comp_events[-1]["usage"]["completion_tokens"] == 12


async def test_echo_and_token_id_prompts() -> None:
    """echo prepends the prompt to the first completion text; token-id prompts count their ids."""
    async with serve_in_background(SimConfig(**FAST)) as url, aiohttp.ClientSession() as session:
        echo = {"model": "m", "prompt": "Once upon", "max_tokens": 3, "echo": True, "stream": True}
        _, raw = await post_json(session, url + "/v1/completions", echo)
        ids = {"model": "m", "prompt": [11, 12, 13, 14], "max_tokens": 3}
        _, id_raw = await post_json(session, url + "/v1/completions", ids)
        native = {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3}}
        async with session.put(url + "/generate", json=native) as response:
            put_status, put_body = response.status, await response.json()
    assert sse_payloads(raw)[0]["choices"][0]["text"].startswith("Once upon")
    assert json.loads(id_raw)["usage"]["prompt_tokens"] == 4
    assert put_status == 200
    assert put_body["meta_info"]["prompt_tokens"] == 3


async def test_v1_loads_reports_running_and_waiting_and_a_prometheus_format() -> None:
    """/v1/loads counts running requests, and format=prometheus renders sglang_<key> gauges."""
    config = SimConfig(max_running_requests=1, decode_step_ms=2.0, prefill_us_per_token=0.0)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        body = {"text": "a", "sampling_params": {"max_new_tokens": 1000}, "stream": True}
        first = await session.post(url + "/generate", json=body)
        await first.content.readuntil(b"\n\n")
        second = await session.post(url + "/generate", json=body)
        async with session.get(url + "/v1/loads") as response:
            load = (await response.json())["loads"][0]
        async with session.get(url + "/v1/loads?format=prometheus") as response:
            text = await response.text()
        first.close()
        second.close()
    assert load["num_running_reqs"] == 1
    assert load["num_waiting_reqs"] == 1
    assert load["max_running_requests"] == 1
    assert 'sglang_num_running_reqs{dp_rank="0"} 1.0' in text
