"""`specproxy demo --sweep`: a SIMULATED load sweep across a crossover the demo can name."""

from __future__ import annotations

import json
from pathlib import Path

from specproxy.cli.demo_sweep import demo_crossover, run_sweep_demo, sweep_pair


async def test_demo_sweep_writes_a_simulated_sweep_and_names_the_true_crossover(
    tmp_path: Path,
) -> None:
    """The demo leaves sweep.json, the log and the page, all SIMULATED, with N* printed."""
    root, text = await run_sweep_demo(tmp_path / "demo", pairs=32)
    doc = json.loads((root / "sweep.json").read_text())
    assert doc["status"] == "completed" and doc["simulated"] is True
    assert doc["recommendation"] == "simulated"
    assert len(doc["levels"]) == 4
    assert (root / "experiments.jsonl").read_text().count("\n") == 4
    assert "SIMULATED" in text and "closed-form per-token crossover" in text
    assert f"{demo_crossover():.3g} concurrent streams" in text
    assert "SIMULATED" in (root / "report.html").read_text()
    # the capacity answer at a glance, printed last
    glance = text.rstrip().splitlines()[-2:]
    assert glance[0].startswith("SIMULATED capacity: within your SLO (p90 TPOT <= 20 ms)")
    assert "with speculation and" in glance[0] and "streams with speculation" in glance[1]
    cap = doc["capacity"]
    for side in ("baseline", "candidate"):
        assert cap[side]["load"]["status"] in ("within", "above_top", "below_lowest")
        assert cap[side]["load"]["ci"] is not None


def test_demo_pair_differs_only_in_speculative_settings() -> None:
    """The two simulators share every setting except the candidate's speculative ones."""
    base, cand = sweep_pair()
    assert base.speculative_algorithm is None and cand.speculative_algorithm == "STANDALONE"
    for name in ("model_path", "max_running_requests", "random_seed", "decode_step_ms",
                 "per_token_us", "contention", "prefill_us_per_token"):  # fmt: skip
        assert getattr(base, name) == getattr(cand, name), name
