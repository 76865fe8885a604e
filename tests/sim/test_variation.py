"""The simulator's optional server drift: regimes of median 1 and drift episodes, seeded."""

from __future__ import annotations

import asyncio
import itertools
import math
import statistics

import pytest

from specproxy.errors import ConfigError
from specproxy.runtime import spawn
from specproxy.sim.config import SimConfig
from specproxy.sim.engine import Engine, LatencyModel, SimJob
from specproxy.sim.text import OutputPlan
from specproxy.sim.variation import Variation, VariationSettings
from tests.sim.helpers import NoObserver, VirtualClock


def test_regime_factors_have_median_one_and_hold_for_a_regime() -> None:
    """Each 2 s regime keeps one factor; over 2,000 regimes the factors' median is about 1
    and their log standard deviation the setting; the same seed gives the same factors."""
    settings = VariationSettings(regime_sigma=0.2, regime_s=2.0)
    v = Variation(settings, seed=3, origin_unix_s=0.0)
    factors = [v.factor(2.0 * k + 0.5) for k in range(2000)]
    assert all(v.factor(2.0 * k + 1.9) == f for k, f in enumerate(factors[:50]))
    assert statistics.median(factors) == pytest.approx(1.0, abs=0.03)
    assert statistics.stdev(math.log(f) for f in factors) == pytest.approx(0.2, abs=0.02)
    again = Variation(settings, seed=3, origin_unix_s=0.0)
    assert [again.factor(2.0 * k + 0.5) for k in range(50)] == factors[:50]
    other = Variation(settings, seed=4, origin_unix_s=0.0)
    assert [other.factor(2.0 * k + 0.5) for k in range(50)] != factors[:50]


def test_drift_episodes_slow_the_server_for_their_length() -> None:
    """Inside an episode the factor is 1 + slowdown, outside it 1; episodes last drift_s and
    are listed as Unix times from the origin."""
    settings = VariationSettings(drift_every_s=30.0, drift_slowdown=0.8, drift_s=5.0)
    v = Variation(settings, seed=1, origin_unix_s=1000.0)
    episodes = v.episodes(600.0)
    assert len(episodes) >= 5
    for start, end in episodes:
        assert end - start == pytest.approx(5.0)
        assert v.factor(start - 1000.0 + 2.5) == pytest.approx(1.8)
    gaps = [b[0] - a[1] for a, b in itertools.pairwise(episodes)]
    assert min(gaps) > 0
    assert v.factor(episodes[0][0] - 1000.0 - 0.01) == 1.0


def test_variation_is_off_by_default_and_validated() -> None:
    """A default SimConfig adds no variation; negative or zero settings are refused by name."""
    assert not VariationSettings().active
    with pytest.raises(ConfigError, match="regime_sigma"):
        SimConfig(regime_sigma=-0.1)
    with pytest.raises(ConfigError, match="drift_s"):
        SimConfig(drift_s=0.0)


async def test_an_engine_steps_slower_inside_a_drift_episode() -> None:
    """Each 2 ms step that starts inside a drift episode (slowdown 1.0) takes 4 ms: steps
    before the first episode keep their cost, steps after its start double."""
    latency = LatencyModel.from_ms(
        decode_step_ms=2.0, verify_step_ms=2.0, prefill_us_per_token=0.0, contention=0.0
    )
    settings = VariationSettings(drift_every_s=0.01, drift_slowdown=1.0, drift_s=10.0)
    variation = Variation(settings, seed=0, origin_unix_s=0.0)
    engine = Engine(latency=latency, max_running=1, acceptance=None, observer=NoObserver(),
                    prefix_caching=False, clock=VirtualClock(), variation=variation)  # fmt: skip
    job = SimJob(rid="r", prompt_ids=[1], plan=OutputPlan(tuple(range(40)), "length"))
    engine.submit(job)
    task = spawn(engine.run(), name="variation-test-engine")
    try:
        await asyncio.wait_for(job.ended.wait(), 5)
    finally:
        task.cancel()
    steps = list(itertools.pairwise(job.emit_ns))
    expected = [4_000_000 if variation.factor(a / 1e9) == 2.0 else 2_000_000 for a, _ in steps]
    assert [b - a for a, b in steps] == expected
    assert {2_000_000, 4_000_000} <= set(expected)  # the episode starts mid-job
