"""The batch-dependent step cost: the formula, the engine's measured steps and the closed form."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from specproxy.core.load.crossover import SideCost, closed_form_crossover, expected_tokens_per_step
from specproxy.runtime import spawn
from specproxy.sim.acceptance import AcceptanceModel, SpecCounts
from specproxy.sim.config import SimConfig
from specproxy.sim.engine import Engine, LatencyModel, SimJob
from specproxy.sim.text import OutputPlan, seeded_rng
from tests.sim.helpers import NoObserver, VirtualClock

# The issue's setup: baseline 5 ms + 100 us/token; STANDALONE 3 steps, topk 1, 4 draft tokens.
DECODE_MS, VERIFY_MS, PER_TOKEN_US, DRAFT_MS = 5.0, 5.0, 100.0, 0.5
STEPS, DRAFT_TOKENS, ACCEPT = 3, 4, 0.7


def issue_latency(contention: float = 0.0) -> LatencyModel:
    return LatencyModel.from_ms(
        decode_step_ms=DECODE_MS,
        verify_step_ms=VERIFY_MS,
        prefill_us_per_token=0.0,
        contention=contention,
        per_token_us=PER_TOKEN_US,
        draft_step_ms=DRAFT_MS,
        num_steps=STEPS,
        num_draft_tokens=DRAFT_TOKENS,
    )


def formula_us(running: int, *, speculative: bool, contention: float) -> float:
    """The documented formula, written out: fixed x contention + per-token compute + drafts."""
    base_us = (VERIFY_MS if speculative else DECODE_MS) * 1000
    tokens = running * (DRAFT_TOKENS if speculative else 1)
    drafts_us = STEPS * DRAFT_MS * 1000 if speculative else 0.0
    return base_us * (1 + contention * (running - 1)) + PER_TOKEN_US * tokens + drafts_us


@pytest.mark.parametrize("contention", [0.0, 0.01])
@pytest.mark.parametrize("running", [1, 2, 8, 40, 64, 200])
def test_step_cost_follows_the_formula(running: int, contention: float) -> None:
    """Baseline and verify steps cost exactly the documented formula at every batch size."""
    model = issue_latency(contention)
    for speculative in (False, True):
        expected = formula_us(running, speculative=speculative, contention=contention)
        assert model.step_us(running, speculative=speculative) == round(expected)


def test_without_the_new_costs_the_step_cost_is_unchanged() -> None:
    """With --per-token-us and --draft-step-ms at 0 a step costs base x contention factor only."""
    model = LatencyModel.from_ms(
        decode_step_ms=10, verify_step_ms=15, prefill_us_per_token=30, contention=0.1
    )
    assert SimConfig().per_token_us == 0.0 and SimConfig().draft_step_ms == 0.0
    for running in (1, 11, 50):
        factor = 1 + 0.1 * (running - 1)
        assert model.step_us(running, speculative=False) == round(10_000 * factor)
        assert model.step_us(running, speculative=True) == round(15_000 * factor)


async def run_batch(running: int, *, speculative: bool) -> list[SimJob]:
    """``running`` equal requests of 200 tokens, admitted in one prefill, stepped to the end."""
    acceptance = AcceptanceModel(ACCEPT, STEPS) if speculative else None
    engine = Engine(
        latency=issue_latency(),
        max_running=running,
        acceptance=acceptance,
        observer=NoObserver(),
        prefix_caching=False,
        clock=VirtualClock(),
    )
    jobs = [
        SimJob(rid=f"r{i}", prompt_ids=[i, 1, 2], plan=OutputPlan(tuple(range(200)), "length"))
        for i in range(running)
    ]
    for job in jobs:
        if speculative:
            job.acceptance_rng = seeded_rng("latency-test", job.rid)
            job.spec = SpecCounts(DRAFT_TOKENS)
        engine.submit(job)
    task = spawn(engine.run(), name="latency-test-engine")
    try:
        await asyncio.gather(*(job.ended.wait() for job in jobs))
    finally:
        task.cancel()
    return jobs


@pytest.mark.parametrize("speculative", [False, True])
@pytest.mark.parametrize("running", [8, 64])
async def test_measured_step_time_at_a_fixed_batch_is_the_formula(
    running: int, *, speculative: bool
) -> None:
    """Every step while the whole batch runs lasts exactly the formula's time for that batch."""
    jobs = await run_batch(running, speculative=speculative)
    full_until = min(job.emit_ns[-1] for job in jobs)  # the first finish: the batch shrinks after
    expected_ns = round(formula_us(running, speculative=speculative, contention=0.0)) * 1000
    gaps = [
        later - earlier
        for job in jobs
        for earlier, later in itertools.pairwise(job.emit_ns)
        if later <= full_until
    ]
    assert len(gaps) >= running * 40  # at least 40 steps measured per request
    assert set(gaps) == {expected_ns}
    sizes = {e - s for job in jobs for s, e in itertools.pairwise(job.emissions)}
    # one token per baseline step (its ITL is the step time); 1 to steps + 1 per verify step
    assert sizes == ({1} if not speculative else set(range(1, STEPS + 2)))


def test_closed_form_uses_the_simulator_step_cost() -> None:
    """The closed form's step time equals the engine's at every batch, with or without contention."""
    spec = SimConfig(
        speculative_algorithm="STANDALONE",
        speculative_draft_model_path="draft",
        speculative_num_steps=STEPS,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=DRAFT_TOKENS,
    ).spec
    assert spec is not None
    for contention in (0.0, 0.01):
        model = issue_latency(contention)
        base = SideCost.baseline(
            decode_step_ms=DECODE_MS, per_token_us=PER_TOKEN_US, contention=contention
        )
        cand = SideCost.speculative(
            verify_step_ms=VERIFY_MS,
            num_steps=STEPS,
            num_draft_tokens=DRAFT_TOKENS,
            accept_prob=ACCEPT,
            max_accepted=spec.max_accepted_drafts,
            draft_step_ms=DRAFT_MS,
            per_token_us=PER_TOKEN_US,
            contention=contention,
        )
        for running in (1, 7, 42, 100):
            assert base.step_time_us(running) == pytest.approx(
                model.step_us(running, speculative=False), abs=0.5
            )
            assert cand.step_time_us(running) == pytest.approx(
                model.step_us(running, speculative=True), abs=0.5
            )
        crossing = closed_form_crossover(base, cand)
        assert crossing is not None
        assert base.per_token_time_us(crossing) == pytest.approx(cand.per_token_time_us(crossing))


def test_the_closed_form_tokens_per_step_is_the_acceptance_model_mean() -> None:
    """The mean tokens per verify step of the sim's acceptance model is 1 + p + ... + p^m."""
    model = AcceptanceModel(ACCEPT, STEPS)
    rng = seeded_rng("acceptance-mean")
    draws = [model.draw(rng) + 1 for _ in range(40_000)]
    mean = sum(draws) / len(draws)
    spread = (sum((d - mean) ** 2 for d in draws) / len(draws)) ** 0.5
    expected = expected_tokens_per_step(ACCEPT, STEPS)
    assert abs(mean - expected) < 4 * spread / len(draws) ** 0.5
