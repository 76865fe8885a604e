"""The simulator answers the captured exchanges of real SGLang 0.5.16 servers with the same shapes.

Each test replays one captured server's exchange list (``index.json``: same method,
path and request body, in the same order) against a simulator launched like that
server, then compares every response with the capture: status, content type, the
keys and value types of every JSON object (recursively), the SSE framing and the
order of event kinds, and the Prometheus metric names.
"""

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp
import pytest

from specproxy.sim.server import serve_in_background
from tests.sim.helpers import (
    PRIMED,
    captured_config,
    event_kind,
    load_index,
    raw_capture,
    shape_differences,
    sse_events,
    sse_payloads,
)

SERVERS = ("base", "sa_copy", "ngram", "base_c", "nextn_c")
PRIMER = {
    "text": "Tell me about the history of the printing press. " * 8,
    "sampling_params": {"max_new_tokens": 48, "temperature": 0},
}
"""Traffic a run-C server had served before its captures began (SGLang's own start-up
warm-up, then the preflight's greedy decodes, twice, of one prompt): sent twice, it closes
a decode-log window (``avg_spec_accept_length`` appears) and repeats a prompt (cached
tokens are counted)."""


def collapsed(kinds: list[str]) -> list[str]:
    out: list[str] = []
    for kind in kinds:
        if not out or out[-1] != kind:
            out.append(kind)
    return out


def metric_names(text: str) -> set[str]:
    return {re.split(r"[{ ]", line)[0] for line in text.splitlines() if line and line[0] != "#"}


async def replay(url: str, exchange: dict[str, Any]) -> tuple[aiohttp.ClientResponse, bytes]:
    """Send one captured exchange's request; the response (headers, status) and its body."""
    async with aiohttp.ClientSession() as session:
        method = exchange["method"]
        body = exchange["request_body"]
        async with session.request(method, url + exchange["path"], json=body) as response:
            return response, await response.read()


def compare_stream(server: str, exchange: dict[str, Any], sim_body: bytes) -> list[str]:
    real = sse_payloads(raw_capture(server, exchange["file"]))
    sim = sse_payloads(sim_body)
    problems = []
    real_kinds = collapsed([event_kind(p) for p in real])
    sim_kinds = collapsed([event_kind(p) for p in sim])
    if real_kinds != sim_kinds:
        problems.append(f"event order: capture {real_kinds}, simulated {sim_kinds}")
    by_kind_real: dict[str, list[Any]] = {}
    by_kind_sim: dict[str, list[Any]] = {}
    for payload in real:
        by_kind_real.setdefault(event_kind(payload), []).append(payload)
    for payload in sim:
        by_kind_sim.setdefault(event_kind(payload), []).append(payload)
    for kind, events in by_kind_real.items():
        if kind == "done" or kind not in by_kind_sim:
            continue
        # first and last of each kind: /generate's first event differs from the middle ones
        for index in (0, 1, -1):
            if len(events) > abs(index) and len(by_kind_sim[kind]) > abs(index):
                diff = shape_differences(
                    events[index], by_kind_sim[kind][index], f"{kind}[{index}]"
                )
                problems += diff
    return problems


def framing_problems(body: bytes) -> list[str]:
    problems = []
    events = sse_events(body)
    if not events or events[-1] != b"data: [DONE]\n\n":
        problems.append("stream does not end with data: [DONE]")
    pattern = re.compile(rb"data: (\{.*\}|\[DONE\])\n\n", flags=re.DOTALL)
    problems += [f"bad event framing: {raw[:60]!r}" for raw in events if not pattern.fullmatch(raw)]
    return problems


@pytest.mark.parametrize("server", SERVERS)
async def test_every_captured_exchange_has_the_captured_shape(server: str) -> None:
    """Replaying a captured server's exchanges gives the same statuses, keys, types, framing and order."""
    problems: list[str] = []
    async with serve_in_background(captured_config(server)) as url:
        for _ in range(2 if server in PRIMED else 0):  # a repeated prompt: cached tokens too
            await replay(url, {"method": "POST", "path": "/generate", "request_body": PRIMER})
        for exchange in load_index(server):
            name = exchange["name"]
            response, body = await replay(url, exchange)
            real_status = int(exchange["status_line"].split()[1])
            if response.status != real_status:
                problems.append(f"{name}: status {response.status}, captured {real_status}")
            real_type = {k.lower(): v for k, v in exchange["headers"]}.get("content-type", "")
            if real_type and response.headers.get("Content-Type") != real_type:
                problems.append(f"{name}: content type {response.headers.get('Content-Type')!r}")
            if response.headers.get("x-specproxy-simulated") != "true":
                problems.append(f"{name}: no x-specproxy-simulated header")
            if "json" in exchange:
                sim_json = json.loads(body)
                if isinstance(sim_json, dict) and "internal_states" in sim_json:
                    assert sim_json.pop("simulated") is True
                problems += [f"{name}: {d}" for d in shape_differences(exchange["json"], sim_json)]
            elif real_type.startswith("text/event-stream"):
                problems += [f"{name}: {d}" for d in framing_problems(body)]
                problems += [f"{name}: {d}" for d in compare_stream(server, exchange, body)]
            elif name.startswith("metrics"):
                real_names, sim_names = metric_names(exchange["text"]), metric_names(body.decode())
                if real_names != sim_names:
                    missing, extra = sorted(real_names - sim_names), sorted(sim_names - real_names)
                    problems.append(f"{name}: metric names missing {missing} extra {extra}")
            else:
                assert body == exchange["text"].encode(), name
    assert problems == []


async def test_avg_spec_accept_length_appears_only_after_traffic_as_captured() -> None:
    """Like the capture, server info lacks avg_spec_accept_length before traffic and has it after."""
    index = {e["name"]: e for e in load_index("sa_copy")}
    before = index["get_server_info_before"]["json"]["internal_states"][0]
    after = index["get_server_info_after"]["json"]["internal_states"][0]
    assert "avg_spec_accept_length" not in before
    assert "avg_spec_accept_length" in after
    async with serve_in_background(captured_config("sa_copy")) as url:
        _, first_raw = await replay(url, index["get_server_info_before"])
        first = json.loads(first_raw)
        assert "avg_spec_accept_length" not in first["internal_states"][0]
        for name in ("generate", "generate_stream", "completions", "chat"):
            await replay(url, index[name])
        _, later_raw = await replay(url, index["get_server_info_after"])
        later = json.loads(later_raw)
        assert later["internal_states"][0]["avg_spec_accept_length"] >= 1.0


@pytest.mark.parametrize("server", SERVERS)
async def test_spec_metric_exists_only_on_speculative_servers(server: str) -> None:
    """sglang:spec_verify_calls_total is exported by speculative simulators only, as captured."""
    async with (
        serve_in_background(captured_config(server)) as url,
        aiohttp.ClientSession() as s,
        s.get(url + "/metrics") as response,
    ):
        names = metric_names(await response.text())
    assert ("sglang:spec_verify_calls_total" in names) == (server not in ("base", "base_c"))
    assert "sglang:spec_accept_length" in names
    assert "sglang:generation_tokens_total" in names
