"""The simulator's per-request step histogram as SGLang 0.5.16 sends it, checked against the
stream bursts of the same response, and its SIMULATED long-prompt acceptance drop."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from specproxy.core.measurement.acceptance import burst_histogram
from specproxy.errors import ConfigError
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from tests.sim.helpers import FAST, post_json, sse_payloads

PROMPTS = [f"prompt {i}: say something about drafts and verifiers, number {i}" for i in range(8)]


def _config(**overrides: Any) -> SimConfig:
    return SimConfig(**{**FAST, "speculative_algorithm": "EAGLE", **overrides})


def _without_one(hist: list[int], index: int) -> list[int]:
    out = list(hist)
    out[index] -= 1
    while out and out[-1] == 0:
        out.pop()
    return out


async def test_bursts_match_the_histogram_but_the_last_step() -> None:
    """Per stream: the bursts (chunk tokens - 1) of every step but the last equal the
    server's histogram less one step, at an index no lower than the last burst's."""
    async with serve_in_background(_config(accept_prob=0.7)) as url, aiohttp.ClientSession() as s:
        for prompt in PROMPTS:
            body = {"text": prompt, "sampling_params": {"max_new_tokens": 61}, "stream": True}
            _, raw = await post_json(s, url + "/generate", body)
            events = [e for e in sse_payloads(raw) if e != "[DONE]"]
            counts = [e["meta_info"]["completion_tokens"] for e in events]
            tokens = [b - a for a, b in zip([0, *counts], counts, strict=False)]
            meta = events[-1]["meta_info"]
            hist = meta["spec_correct_drafts_histogram"]
            assert hist == meta["spec_accept_histogram"]
            estimate = burst_histogram(tokens)
            assert estimate is not None
            assert sum(estimate) + 1 == meta["spec_verify_ct"]
            mine = list(estimate)
            while mine and mine[-1] == 0:
                mine.pop()
            assert any(
                hist[k] and _without_one(hist, k) == mine for k in range(tokens[-1] - 1, len(hist))
            ), (hist, estimate)


async def test_a_cut_last_step_counts_its_verified_drafts_as_sglang_does() -> None:
    """accept_prob 1 and 5 drafts a step: 10 tokens are the prefill token, one full step
    (6 tokens) and a step cut to 3; the server counts 5 drafts in both steps."""
    async with serve_in_background(_config(accept_prob=1.0)) as url, aiohttp.ClientSession() as s:
        body = {"text": PROMPTS[0], "sampling_params": {"max_new_tokens": 10}}
        _, raw = await post_json(s, url + "/generate", body)
    meta = json.loads(raw)["meta_info"]
    assert meta["completion_tokens"] == 10
    assert meta["spec_verify_ct"] == 2
    assert meta["spec_correct_drafts_histogram"] == [0, 0, 0, 0, 0, 2]
    assert meta["spec_num_correct_drafts"] == 10


async def test_long_prompts_lose_acceptance_when_configured() -> None:
    """SIMULATED: past long_prompt_tokens a request draws with long_accept_prob (0 here:
    every step keeps no draft); shorter prompts keep the normal acceptance."""
    config = _config(accept_prob=0.9, long_prompt_tokens=200, long_accept_prob=0.0)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as s:
        metas = []
        for text in (PROMPTS[0], " ".join(["long"] * 600)):
            body = {"text": text, "sampling_params": {"max_new_tokens": 40}}
            _, raw = await post_json(s, url + "/generate", body)
            metas.append(json.loads(raw)["meta_info"])
    short, long = metas
    assert short["prompt_tokens"] <= 200 < long["prompt_tokens"]
    assert long["spec_correct_drafts_histogram"] == [long["spec_verify_ct"]]
    assert sum(short["spec_correct_drafts_histogram"][1:]) > 0


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"long_prompt_tokens": 0}, "long_prompt_tokens"),
        ({"long_accept_prob": 2.0}, "long_accept_prob"),
    ],
)
def test_long_prompt_options_are_checked(options: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        SimConfig(**options)
