"""Shared fixtures of the replay tests: the bundled traces and simulated servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background

TRACES = Path(__file__).resolve().parents[2] / "traces"


def fast_sim(**overrides: object) -> SimConfig:
    """A simulator with small step times, so tests finish quickly."""
    settings: dict[str, object] = {
        "decode_step_ms": 0.5,
        "verify_step_ms": 0.7,
        "prefill_us_per_token": 0.0,
        "contention": 0.0,
    }
    settings.update(overrides)
    return SimConfig(**settings)  # type: ignore[arg-type]


@pytest.fixture
def traces_dir() -> Path:
    return TRACES


@pytest.fixture
async def sim_pair() -> AsyncIterator[tuple[str, str]]:
    """A simulated baseline and a simulated EAGLE candidate on loopback."""
    async with (
        serve_in_background(fast_sim()) as baseline,
        serve_in_background(fast_sim(speculative_algorithm="EAGLE")) as candidate,
    ):
        yield baseline, candidate
