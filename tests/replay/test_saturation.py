"""Server saturation is reported apart from the sender's load, and a closed loop is judged by
the concurrency it held, not by the send lag of its own start-up ramp."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specproxy.core.records.model import Role
from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay
from specproxy.replay.saturation import SaturationTally
from specproxy.report.write import write_reports
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import fast_sim


def _prompts(path: Path, n: int) -> str:
    path.write_text("".join(json.dumps({"prompt": f"Question {i}: why?"}) + "\n" for i in range(n)))
    return str(path)


async def _open_loop(tmp_path: Path, name: str, **sim: Any) -> dict[str, Any]:
    """24 requests at a constant 40/s to one simulator; the run's summary."""
    async with serve_in_background(fast_sim(**sim)) as baseline:
        cfg = ReplayConfig(
            traces=(_prompts(tmp_path / f"{name}.jsonl", 24),),
            baseline=baseline,
            rate=40.0,
            arrival="constant",
            output_len=16,
            max_lag_ms=50.0,
            run_dir=str(tmp_path / name),
        )
        outcome = await run_replay(cfg)
    return outcome.summary | {"text": outcome.text}


async def test_a_server_that_cannot_keep_up_is_saturated_while_load_is_met(tmp_path: Path) -> None:
    """A simulator serving 2 requests at a time at 10 ms a token answers about 12/s of the 40/s
    offered: the sender met its load, the server is flagged saturated with its queue seen; a
    fast simulator at the same rate is not flagged; the report names it in its notes."""
    slow = await _open_loop(tmp_path, "slow", decode_step_ms=10.0, max_running_requests=2)
    fast = await _open_loop(tmp_path, "fast")
    assert slow["load_met"] is True
    s = slow["saturation"]["baseline"]
    assert s["saturated"] is True and slow["servers_saturated"] is True
    assert s["achieved_per_s"] < 0.5 * s["offered_per_s"]
    assert s["in_flight_late"] > s["in_flight_early"]
    assert s["queue_max"] > 0
    assert "server baseline: SERVER SATURATED; answered" in slow["text"]
    assert fast["load_met"] is True
    f = fast["saturation"]["baseline"]
    assert f["saturated"] is False and f["reasons"] == []
    assert f["achieved_per_s"] > 0.9 * f["offered_per_s"]
    assert "server baseline: kept up" in fast["text"]
    stored = json.loads((tmp_path / "slow" / "experiment.json").read_text())
    assert stored["summary"]["saturation"]["baseline"]["saturated"] is True
    paths = write_reports([tmp_path / "slow"], tmp_path / "report", formats=("json", "html"))
    notes = json.loads(paths[0].read_text())["notes"]
    kept_up = [n for n in notes if "server did not keep up" in n]
    assert len(kept_up) == 1 and "the baseline server" in kept_up[0]
    assert "the baseline server did not keep up" in paths[1].read_text()
    fast_report = write_reports([tmp_path / "fast"], tmp_path / "r2", formats=("json",))
    assert not any("keep up" in n for n in json.loads(fast_report[0].read_text())["notes"])


async def test_closed_loop_is_judged_by_the_concurrency_it_held(tmp_path: Path) -> None:
    """At concurrency 256 no send has an intended time (its start-up ramp is no send lag), so
    the run is judged by the time-weighted number in flight, which held 256: not flagged."""
    async with serve_in_background(fast_sim(decode_step_ms=20.0)) as baseline:
        cfg = ReplayConfig(
            traces=(_prompts(tmp_path / "many.jsonl", 288),),
            baseline=baseline,
            concurrency=256,
            output_len=4,
            run_dir=str(tmp_path / "closed"),
        )
        outcome = await run_replay(cfg)
    lines = (outcome.run_dir / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 288
    assert all(json.loads(line)["intended_send_us"] is None for line in lines)
    s = outcome.summary["saturation"]["baseline"]
    assert s["closed_loop"] is True and s["concurrency"] == 256
    assert 0.95 * 256 <= s["held_in_flight"] <= 256 and s["held"] is True
    assert outcome.summary["load_met"] is True
    assert "LOAD NOT MET" not in outcome.text
    assert "closed loop: in flight baseline" in outcome.text


def test_closed_loop_below_its_concurrency_is_not_held() -> None:
    """A closed loop whose time-weighted mean in flight fell under 95% of N did not hold its
    load; windows are weighted by their span, and no window at N says nothing."""
    tally = SaturationTally()
    tally.held(Role.BASELINE, (100.0, 1_000))
    tally.held(Role.BASELINE, (40.0, 1_000))
    tally.held(Role.CANDIDATE, None)
    base = tally.summary(Role.BASELINE, closed_loop=True, concurrency=100)
    assert base["held_in_flight"] == 70.0 and base["held"] is False
    cand = tally.summary(Role.CANDIDATE, closed_loop=True, concurrency=100)
    assert cand["held_in_flight"] is None and cand["held"] is None
    assert base["saturated"] is False  # the sender's load, not the server's saturation
