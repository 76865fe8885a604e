"""Deterministic output: lossless greedy speculation, injected disagreement, byte-identical replies."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.sim.text import tokenize
from tests.sim.helpers import FAST, post_json, sse_payloads

PROMPTS = [f"Summarise chapter {i} of the operations manual in three lines." for i in range(5)]


async def generate_ids(url: str, prompts: list[str], **params: Any) -> list[list[int]]:
    out = []
    async with aiohttp.ClientSession() as session:
        for prompt in prompts:
            body = {"text": prompt, "sampling_params": {"max_new_tokens": 48, **params}}
            status, raw = await post_json(session, url + "/generate", body)
            assert status == 200
            out.append(json.loads(raw)["output_ids"])
    return out


async def test_greedy_output_is_the_same_on_baseline_and_speculative_servers() -> None:
    """Greedy tokens and text do not depend on the speculative configuration (lossless)."""
    speculative = SimConfig(**FAST, speculative_algorithm="EAGLE", seed=11, accept_prob=0.5)
    async with (
        serve_in_background(SimConfig(**FAST)) as base,
        serve_in_background(speculative) as spec,
        aiohttp.ClientSession() as session,
    ):
        assert await generate_ids(base, PROMPTS, temperature=0) == await generate_ids(
            spec, PROMPTS, temperature=0
        )
        chat = {
            "model": "m",
            "messages": [{"role": "user", "content": PROMPTS[0]}],
            "max_tokens": 32,
            "temperature": 0,
        }
        _, base_chat = await post_json(session, base + "/v1/chat/completions", chat)
        _, spec_chat = await post_json(session, spec + "/v1/chat/completions", chat)
    content = [json.loads(b)["choices"][0]["message"]["content"] for b in (base_chat, spec_chat)]
    assert content[0] == content[1]
    assert len(content[0].split()) == 32


async def test_different_prompts_give_different_outputs() -> None:
    """Outputs depend on the prompt, so agreement checks downstream are not trivially true."""
    async with serve_in_background(SimConfig(**FAST)) as url:
        outputs = await generate_ids(url, PROMPTS, temperature=0)
    assert len({tuple(o) for o in outputs}) == len(PROMPTS)


async def test_disagree_rate_makes_speculative_output_diverge_after_a_position() -> None:
    """With --disagree-rate 1 every greedy output leaves the baseline's after a common prefix."""
    disagreeing = SimConfig(**FAST, speculative_algorithm="EAGLE", disagree_rate=1.0)
    async with (
        serve_in_background(SimConfig(**FAST)) as base,
        serve_in_background(disagreeing) as spec,
    ):
        expected = await generate_ids(base, PROMPTS, temperature=0)
        got = await generate_ids(spec, PROMPTS, temperature=0)
    for mine, theirs in zip(got, expected, strict=True):
        assert len(mine) == len(theirs) == 48
        first_difference = next(
            i for i, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b
        )
        assert first_difference >= 1


async def test_prompt_token_counts_agree_between_tokenize_and_usage() -> None:
    """/tokenize's count is the prompt_tokens of /generate and completions; chat adds the template's 4."""
    prompt = "one two three four five " * 7
    async with serve_in_background(SimConfig(**FAST)) as url, aiohttp.ClientSession() as session:
        _, tok = await post_json(session, url + "/tokenize", {"model": "m", "prompt": prompt})
        _, gen = await post_json(
            session, url + "/generate", {"text": prompt, "sampling_params": {"max_new_tokens": 2}}
        )
        _, comp = await post_json(
            session, url + "/v1/completions", {"model": "m", "prompt": prompt, "max_tokens": 2}
        )
        chat_body = {
            "model": "m",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 2,
        }
        _, chat = await post_json(session, url + "/v1/chat/completions", chat_body)
    count = json.loads(tok)["count"]
    assert count == 35 == len(tokenize(prompt))
    assert json.loads(gen)["meta_info"]["prompt_tokens"] == count
    assert json.loads(comp)["usage"]["prompt_tokens"] == count
    assert json.loads(chat)["usage"]["prompt_tokens"] == count + 4


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/generate", {"text": "hello there", "sampling_params": {"max_new_tokens": 24}}),
        (
            "/generate",
            {"text": "hello there", "sampling_params": {"max_new_tokens": 24}, "stream": True},
        ),
        ("/v1/completions", {"model": "m", "prompt": "hello", "max_tokens": 24, "stream": True}),
        (
            "/v1/chat/completions",
            {
                "model": "m",
                "messages": [{"role": "user", "content": "hello"}],
                "max_tokens": 24,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
    ],
)
async def test_deterministic_ids_make_repeated_requests_byte_identical(
    path: str, body: dict[str, Any]
) -> None:
    """With deterministic_ids the same request twice gives the same bytes, on a speculative server."""
    config = SimConfig(**FAST, speculative_algorithm="EAGLE", deterministic_ids=True)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        first = await post_json(session, url + path, body)
        second = await post_json(session, url + path, body)
    assert first[0] == 200
    assert first[1] == second[1]


async def test_client_rid_becomes_the_response_id() -> None:
    """A client's rid is echoed as the OpenAI id and as meta_info.id, as SGLang does."""
    async with serve_in_background(SimConfig(**FAST)) as url, aiohttp.ClientSession() as session:
        _, chat = await post_json(
            session,
            url + "/v1/chat/completions",
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "rid": "my-request-1"},
        )
        body = {"text": "x", "rid": "my-request-2", "stream": True}
        _, stream = await post_json(session, url + "/generate", body)
    assert json.loads(chat)["id"] == "my-request-1"
    events = [e for e in sse_payloads(stream) if e != "[DONE]"]
    assert {e["meta_info"]["id"] for e in events} == {"my-request-2"}


async def test_requests_without_a_limit_stop_naturally_on_end_of_text() -> None:
    """Without max_tokens a request ends with finish_reason stop and matched_stop = end-of-text."""
    async with serve_in_background(SimConfig(**FAST)) as url, aiohttp.ClientSession() as session:
        body = {"model": "m", "messages": [{"role": "user", "content": "tell me a story"}]}
        _, raw = await post_json(session, url + "/v1/chat/completions", body)
    choice = json.loads(raw)["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert choice["matched_stop"] == 1
    assert 16 <= json.loads(raw)["usage"]["completion_tokens"] < 256
