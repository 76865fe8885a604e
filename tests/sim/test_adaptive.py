"""The simulated ``--speculative-adaptive``: SGLang's EMA step rule, its cost and its counters."""

from __future__ import annotations

import json

import aiohttp

from specproxy.sim.adaptive import AdaptiveSteps
from specproxy.sim.config import SimConfig
from specproxy.sim.engine import LatencyModel
from specproxy.sim.server import serve_in_background
from tests.sim.helpers import post_json

EAGLE = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3,
         "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}  # fmt: skip


def test_steps_rise_with_high_acceptance_and_fall_with_low() -> None:
    """Every draft accepted lifts the EMA past 3 - 0.5 and the steps go 3 -> 7; none accepted
    drops it to 1 - 0.75 and below, and the steps go down to 1; nothing moves in warm-up."""
    up = AdaptiveSteps(3)
    for _ in range(10):
        up.update([3, 3])
    assert up.steps == 3  # warm-up: 10 verify steps, no decision
    for _ in range(20):
        up.update([up.steps] * 2)
    assert up.steps == 7
    down = AdaptiveSteps(3)
    for _ in range(30):
        down.update([0, 0, 0])
    assert down.steps == 1
    assert down.ema < 0.25


def test_a_start_outside_the_candidates_snaps_to_the_middle() -> None:
    assert AdaptiveSteps(4).steps == 3
    assert AdaptiveSteps(4).ema == 2.0
    assert AdaptiveSteps(5, candidates=(2, 5, 9)).steps == 5


def test_the_step_cost_follows_the_steps_of_the_step() -> None:
    """With ``steps`` given, draft tokens are steps + 1 and the draft cost steps x one step."""
    model = LatencyModel.from_ms(decode_step_ms=5, verify_step_ms=5, prefill_us_per_token=0,
                                 contention=0, per_token_us=100, draft_step_ms=0.5,
                                 num_steps=3, num_draft_tokens=4)  # fmt: skip
    assert model.step_us(8, speculative=True) == 5000 + 100 * 8 * 4 + 1500
    assert model.step_us(8, speculative=True, steps=7) == 5000 + 100 * 8 * 8 + 3500
    assert model.step_us(8, speculative=True, steps=1) == 5000 + 100 * 8 * 2 + 500


def test_adaptive_runs_only_for_eagle_at_topk_1() -> None:
    """As SGLang: EAGLE/EAGLE3 at topk 1 adapt; STANDALONE or topk 4 keep static settings."""
    assert SimConfig(**EAGLE, speculative_adaptive=True).spec.adaptive  # type: ignore[arg-type, union-attr]
    standalone = {**EAGLE, "speculative_algorithm": "STANDALONE",
                  "speculative_draft_model_path": "sim/draft"}  # fmt: skip
    assert not SimConfig(**standalone, speculative_adaptive=True).spec.adaptive  # type: ignore[arg-type, union-attr]
    tree = {**EAGLE, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8}
    assert not SimConfig(**tree, speculative_adaptive=True).spec.adaptive  # type: ignore[arg-type, union-attr]


async def test_an_adaptive_server_moves_to_more_steps_when_every_draft_is_accepted() -> None:
    """Over loopback: with acceptance 1 a long request's accept length passes what 3 steps
    allow (4 tokens a verify step), and /server_info says adaptive is on."""
    config = SimConfig(**EAGLE, speculative_adaptive=True, accept_prob=1.0,  # type: ignore[arg-type]
                       decode_step_ms=0.0, verify_step_ms=0.0, prefill_us_per_token=0.0)  # fmt: skip
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        body = {"text": "hello", "sampling_params": {"max_new_tokens": 400, "temperature": 0}}
        status, raw = await post_json(session, url + "/generate", body)
        assert status == 200
        meta = json.loads(raw)["meta_info"]
        async with session.get(url + "/server_info") as resp:
            info = await resp.json()
    assert info["speculative_adaptive"] is True
    assert meta["spec_accept_length"] > 4.0
    assert meta["spec_num_proposed_drafts"] > 3 * meta["spec_verify_ct"]
    # every draft accepted but those past the request's last token (its last verify step)
    assert 0 <= meta["spec_num_proposed_drafts"] - meta["spec_num_correct_drafts"] <= 7
