"""Issue 11's "Done when": on two simulators with a known crossover, the sweep finds it.

The simulators are the setup of ``crossover_setup`` (every cost x4, which leaves the
crossover where it is), each in its own process. The true per-token crossover is
derived here from the simulator's cost formula (``core.load.crossover.closed_form_crossover``),
and the ladder is placed around it: well below, on each side, and well above.

One sweep's 95% interval misses the truth in a share of runs by design (more here, since a
closed loop runs each batch a little under n: ``closed_loop_crossover``), so this test
checks what must hold in every run: the direction at both ends, a crossing, and an
estimate near the closed form whose interval lies between the two levels around it.
How often the interval covers the truth is measured over seeded sweeps by
``bench/sweep_coverage.py`` (figure in the README), not asserted here.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from specproxy.sweep.config import SweepConfig
from specproxy.sweep.run import run_sweep
from specproxy.testing.crossover_setup import (
    closed_loop_crossover,
    crossover_sims,
    true_crossover,
    write_trace,
)

pytestmark = pytest.mark.slow


@pytest.mark.timeout(600)
def test_sweep_finds_the_known_crossover(tmp_path: Path) -> None:
    """Faster at low concurrency, slower at high, and a TPOT crossing found near the closed form."""
    truth = true_crossover()
    assert 30 < truth < 55  # the setup's crossover: "near 40 concurrent streams"
    ladder = [round(truth / 5), round(truth * 0.55), round(truth * 1.5), round(truth * 3)]
    trace = write_trace(tmp_path / "trace.jsonl", 1000, 32)
    with crossover_sims(scale=4.0, seed=5) as (base, cand):
        cfg = SweepConfig(
            traces=(str(trace),), baseline=base, candidate=cand,
            concurrency=",".join(str(n) for n in ladder), pairs=192, block_size=16,
            output_len=32, run_dir=str(tmp_path / "sweep"), snapshots=False,
        )  # fmt: skip
        outcome = asyncio.run(run_sweep(cfg))
    doc = json.loads((outcome.root / "sweep.json").read_text())
    levels = doc["levels"]
    assert levels[0]["verdict"] == "faster"
    assert levels[-1]["verdict"] == "slower"
    tpot = doc["settings"][0]["crossovers"]["tpot"]
    assert tpot["status"] == "crossed"
    low, high = tpot["ci"]
    seen = (truth, tpot, [(lv["level"], lv["tpot_ci"]) for lv in levels])
    assert ladder[0] < low <= tpot["estimate"] <= high < ladder[-1], seen
    # Within a factor 1.5 of the per-token closed form, or of its closed-loop correction.
    assert truth / 1.5 <= tpot["estimate"] <= closed_loop_crossover(32) * 1.5, seen
    assert doc["crossover"]["metric"] == "e2e" and doc["crossover"]["status"] == "crossed"
