"""The simulator's target model under sampling, its lossy mode and its scoring answers, over
loopback HTTP."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.sim.target import (
    TARGET_IDS,
    expected_shift,
    relaxation,
    token_logprob,
)
from tests.sim.helpers import FAST, get, post_json

EAGLE: dict[str, Any] = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
SAMPLED = {"max_new_tokens": 48, "temperature": 0.7}


async def _generate(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Any:
    status, raw = await post_json(session, url + "/generate", body)
    assert status == 200, raw
    return json.loads(raw)


async def test_sampled_output_tokenizes_back_and_scores_with_the_models_logprobs() -> None:
    """A sampled output's text tokenizes back to its ids, and a teacher-forced request returns
    the target's raw log-probability of every output token and generates nothing."""
    async with serve_in_background(SimConfig(**FAST)) as url, aiohttp.ClientSession() as s:
        out = await _generate(s, url, {"text": "Tell me a story", "sampling_params": SAMPLED})
        _, raw = await post_json(s, url + "/tokenize", {"prompt": "Tell me a story"})
        prompt = json.loads(raw)["tokens"]
        _, raw = await post_json(s, url + "/tokenize", {"prompt": out["text"]})
        assert json.loads(raw)["tokens"] == out["output_ids"]
        ids = prompt + out["output_ids"]
        body = {
            "input_ids": ids,
            "sampling_params": {"max_new_tokens": 0, "temperature": 0.7},
            "return_logprob": True,
            "logprob_start_len": len(prompt) - 1,
        }
        scored = await _generate(s, url, body)
    meta = scored["meta_info"]
    assert scored["output_ids"] == [] and meta["completion_tokens"] == 0
    entries = meta["input_token_logprobs"]
    assert len(entries) == len(out["output_ids"]) + 1
    tail = entries[-len(out["output_ids"]) :]
    assert [e[1] for e in tail] == out["output_ids"]
    want = [token_logprob(ids[i - 1], ids[i]) for i in range(len(prompt), len(ids))]
    assert [e[0] for e in tail] == pytest.approx(want)


async def test_lossy_mode_changes_sampled_outputs_only() -> None:
    """Accept threshold 0.5 on a speculative server departs from the target's samples; greedy
    outputs and a lossless candidate's samples stay the baseline's."""
    async with (
        serve_in_background(SimConfig(**FAST)) as base,
        serve_in_background(SimConfig(**FAST, **EAGLE)) as lossless,
        serve_in_background(
            SimConfig(**FAST, **EAGLE, speculative_accept_threshold_acc=0.5)
        ) as lossy,
        aiohttp.ClientSession() as s,
    ):
        sampled = {"text": "A question", "sampling_params": SAMPLED}
        greedy = {"text": "A question", "sampling_params": {"max_new_tokens": 48, "temperature": 0}}
        outs = {
            name: await _generate(s, u, sampled)
            for name, u in (("b", base), ("ok", lossless), ("x", lossy))
        }
        greedy_outs = {(await _generate(s, u, greedy))["text"] for u in (base, lossless, lossy)}
        _, raw = await get(s, lossy + "/server_info")
    assert outs["ok"]["output_ids"] == outs["b"]["output_ids"]
    assert outs["x"]["output_ids"] != outs["b"]["output_ids"]
    assert len(greedy_outs) == 1
    info = json.loads(raw)
    assert info["speculative_accept_threshold_acc"] == 0.5
    assert info["speculative_accept_threshold_single"] == 1.0


def test_the_lossy_modes_effect_is_negative_and_proportional() -> None:
    """relax = 1 - min(thresholds); the documented shift is linear in it and lowers the
    target's mean log-probability (drafts come from a flatter distribution)."""
    assert relaxation(1.0, 1.0) == 0.0
    assert relaxation(0.3, 0.95) == pytest.approx(0.7)
    one = expected_shift(0.7, 0.05)
    assert one < -0.05
    assert expected_shift(0.7, 0.1) == pytest.approx(2 * one)
    assert expected_shift(0.7, 0.0) == 0.0
    assert token_logprob(TARGET_IDS[0], 5) is None  # outside the vocabulary: no logprob


async def test_sample_seeds_make_servers_sample_independently() -> None:
    """With --sample-seed, two servers (and two requests to one) draw different samples for one
    prompt; without it every server returns the prompt's one sample."""
    sampled = {"text": "A question", "sampling_params": SAMPLED}
    async with (
        serve_in_background(SimConfig(**FAST, sample_seed=1)) as one,
        serve_in_background(SimConfig(**FAST, sample_seed=2)) as two,
        serve_in_background(SimConfig(**FAST)) as plain,
        serve_in_background(SimConfig(**FAST)) as plain2,
        aiohttp.ClientSession() as s,
    ):
        first = (await _generate(s, one, sampled))["output_ids"]
        again = (await _generate(s, one, sampled))["output_ids"]
        other = (await _generate(s, two, sampled))["output_ids"]
        same = {tuple((await _generate(s, u, sampled))["output_ids"]) for u in (plain, plain2)}
    assert first != again and first != other
    assert len(same) == 1
