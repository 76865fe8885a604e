"""Preflight names a candidate whose accept thresholds are below 1.0 as lossy by configuration."""

from __future__ import annotations

import dataclasses

from specproxy.backends.base import BackendSpec
from specproxy.core.records.model import Role
from specproxy.launch.checks import CheckStatus
from specproxy.launch.preflight import run_preflight
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background

BASE = SimConfig(max_running_requests=48, random_seed=1)
STANDALONE = SimConfig(
    speculative_algorithm="STANDALONE",
    speculative_draft_model_path="sim/draft",
    max_running_requests=48,
    random_seed=1,
)


async def _lossless_row(candidate: SimConfig) -> tuple[CheckStatus, str]:
    async with serve_in_background(BASE) as b, serve_in_background(candidate) as c:
        outcome = await run_preflight(BackendSpec(b, Role.BASELINE), BackendSpec(c, Role.CANDIDATE))
    row = next(r for r in outcome.checks if r.name == "lossless_acceptance")
    assert row.side == "candidate"
    return row.status, row.detail


async def test_default_thresholds_pass_as_lossless() -> None:
    """Thresholds 1.0 (SGLang's default) pass: acceptance is lossless."""
    status, detail = await _lossless_row(STANDALONE)
    assert status is CheckStatus.PASS
    assert "lossless" in detail


async def test_relaxed_thresholds_are_named_lossy_by_configuration() -> None:
    """Thresholds 0.3 are a WARN naming both flags and how to measure the shift."""
    relaxed = dataclasses.replace(
        STANDALONE,
        speculative_accept_threshold_single=0.3,
        speculative_accept_threshold_acc=0.3,
    )
    status, detail = await _lossless_row(relaxed)
    assert status is CheckStatus.WARN
    assert detail.startswith(
        "lossy by configuration: --speculative-accept-threshold-single 0.3, "
        "--speculative-accept-threshold-acc 0.3 below 1.0"
    )
    assert "--score-requests" in detail
