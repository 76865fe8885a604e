"""The proxy records what sampling clients asked for, and honours the warm-up header."""

from __future__ import annotations

from pathlib import Path

import orjson

from specproxy.core.protocol.shaping import requested_temperature
from specproxy.core.records.model import Route
from specproxy.proxy.sampling import SamplingTally
from specproxy.sim.config import SimConfig
from specproxy.testing.harness import chat, records, rig

SIM = SimConfig(decode_step_ms=0.2, verify_step_ms=0.3, prefill_us_per_token=1.0)
SPEC = SimConfig(
    speculative_algorithm="NGRAM", decode_step_ms=0.2, verify_step_ms=0.3, prefill_us_per_token=1.0
)


def test_temperature_is_read_where_each_route_puts_it() -> None:
    """OpenAI routes carry `temperature` at the top, /generate inside sampling_params."""
    assert requested_temperature(Route.CHAT, {"temperature": 0}) == "0"
    assert requested_temperature(Route.COMPLETIONS, {"temperature": 0.7}) == "0.7"
    assert requested_temperature(Route.GENERATE, {"sampling_params": {"temperature": 0.0}}) == "0"
    assert requested_temperature(Route.GENERATE, {"temperature": 0}) == "default"
    assert requested_temperature(Route.CHAT, {"temperature": True}) == "default"
    assert requested_temperature(Route.CHAT, {}) == "default"


def test_greedy_only_when_every_request_was_greedy() -> None:
    """One non-greedy (or unspecified) request makes the run's sampling non-greedy."""
    tally = SamplingTally()
    assert tally.to_dict()["greedy"] is None
    tally[requested_temperature(Route.CHAT, {"temperature": 0})] += 1
    assert tally.to_dict() == {
        "source": "clients",
        "temperatures": {"0": 1},
        "temperature": 0.0,
        "greedy": True,
    }
    tally[requested_temperature(Route.CHAT, {})] += 1
    assert tally.to_dict()["greedy"] is False
    assert tally.to_dict()["temperature"] is None


async def test_experiment_records_sampling_and_warmup_stays_out_of_stats(tmp_path: Path) -> None:
    """A warm-up request is recorded with warmup=true; experiment.json says the run was greedy."""
    async with rig(tmp_path, baseline=SIM, candidate=SPEC, mode="mirror") as r:
        status, _ = await r.post(chat("warm"), **{"x-specproxy-warmup": "1"})
        assert status == 200
        for i in range(3):
            status, _ = await r.post(chat(f"question {i}"))
            assert status == 200
    found = records(tmp_path)
    assert len(found) == 8
    assert sum(rec["warmup"] for rec in found) == 2
    experiment = orjson.loads((tmp_path / "experiment.json").read_bytes())
    assert experiment["sampling"]["greedy"] is True
    assert experiment["sampling"]["temperatures"] == {"0": 4}
