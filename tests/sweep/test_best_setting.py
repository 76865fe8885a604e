"""A setting sweep on simulator processes whose best step count changes with load.

``cli.demo_schedule``: 4 steps win at 1 stream, 1 step at 8 streams, and neither
pays at 32 streams (closed-form per-token ratios 0.56 / 0.68, 1.02 / 0.89, 1.31 / 1.03).
The sweep walks ``speculative-num-steps=1,4,adaptive`` with fresh prompts, ``OUTPUT_LEN``
tokens a request (enough verify steps a request that its E2E ratio sits near the per-token
one; see ``cli.demo_schedule``). The simulator's adaptive mode (``sim.adaptive``: SGLang's
EMA rule over steps 1, 3, 7, one tracker for every batch size) settles on 3 steps at this
acceptance (mean accepted drafts 1.95 < 2.5), whatever the load: ratio 0.57 at 1 stream,
0.95 at 8, 1.21 at 32, so it loses to the best fixed value where load matters.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from specproxy.cli.demo_schedule import OUTPUT_LEN, ScheduleSims, expected_ratio
from specproxy.report.sweep_schedule import schedule_glance
from specproxy.report.sweep_write import render_sweep
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.run import run_sweep
from specproxy.testing.crossover_setup import write_trace

STEPS = "speculative-num-steps"
pytestmark = pytest.mark.timeout(420)  # the module's one sweep: three values, about 2 minutes


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("schedule")
    trace = write_trace(folder / "trace.jsonl", 4000, OUTPUT_LEN)
    cfg = SweepConfig(traces=(str(trace),), launch="sims", concurrency="1,8,32", pairs=48,
                      block_size=16, output_len=OUTPUT_LEN, ignore_eos=True, fresh_prompts=True,
                      run_dir=str(folder / "sweep"),
                      vary=(f"{STEPS}=1,4,adaptive",))  # fmt: skip
    outcome = asyncio.run(run_sweep(cfg, launcher=ScheduleSims()))
    return outcome.root, json.loads((outcome.root / "sweep.json").read_text())


def test_the_closed_form_puts_the_best_value_where_the_test_expects_it() -> None:
    """The setup itself: 4 steps best at 1 stream, 1 step at 8, both above 1 at 32."""
    assert expected_ratio(1, 4) < expected_ratio(1, 1) < 1
    assert expected_ratio(8, 1) < 0.95 < 1 < expected_ratio(8, 4)
    assert 1 < expected_ratio(32, 1) < expected_ratio(32, 4)


def test_the_best_value_differs_between_low_and_high_load(
    swept: tuple[Path, dict[str, Any]],
) -> None:
    """E2E decides: 4 steps at 1 stream, 1 step at 8, off at 32; each best beats the baseline
    and points below its runner-up (whether the contrast is told apart varies with the host)."""
    _, doc = swept
    rows = {r["level"]: r for r in doc["best_settings"]["e2e"]["levels"]}
    assert [rows[lv]["chosen"] for lv in (1, 8, 32)] == [f"{STEPS}=4", f"{STEPS}=1", "off"]
    assert rows[1]["setting"] == {STEPS: "4"}
    assert rows[32]["setting"] is None
    for level in (1, 8):
        best = rows[level]["best"]
        assert best["verdict"] == "faster"
        assert best["ci"][1] < 0.98
        assert rows[level]["vs_runner_up"]["ratio"] < 1
    assert rows[8]["runner_up"]["label"] == f"{STEPS}=4"
    assert rows[32]["nearest"]["label"] == f"{STEPS}=1"
    assert rows[32]["nearest"]["verdict"] != "faster"
    assert [r["level"] for r in doc["best_settings"]["tpot"]["levels"]] == [1, 8, 32]


def test_the_schedule_files_hold_the_choice(swept: tuple[Path, dict[str, Any]]) -> None:
    """schedule.json maps each level to its setting or off; the adaptive config holds the
    steps per batch-size range and says that off could not be written."""
    root, doc = swept
    plain = json.loads((root / "schedule.json").read_text())
    assert plain["schedule"] == {"1": {STEPS: "4"}, "8": {STEPS: "1"}, "32": "off"}
    assert plain["kind"] == "concurrency"
    assert plain["simulated"] is True
    config = json.loads((root / "speculative-adaptive-config.json").read_text())
    assert config == {"1": {"candidate_steps": [4]}, "3": {"candidate_steps": [1]}}
    assert doc["schedule"]["adaptive_config"] == config
    assert any("off at 32" in m for m in doc["schedule"]["not_expressed"])


def test_the_adaptive_value_runs_and_is_compared_with_the_best(
    swept: tuple[Path, dict[str, Any]],
) -> None:
    """The candidate ran with --speculative-adaptive at topk 1; at every level the report has
    its ratio and its contrast with the best fixed value; at 32 streams (off: the nearest) it
    is slower, since the simulated controller keys on acceptance, not on load."""
    root, doc = swept
    entry = next(e for e in doc["settings"] if e["setting"] == {STEPS: "adaptive"})
    assert entry["status"] == "completed"
    assert entry["candidate_args"]["speculative-adaptive"] == "True"
    assert entry["candidate_args"]["speculative-eagle-topk"] == "1"
    rows = {r["level"]: r for r in doc["best_settings"]["e2e"]["levels"]}
    for row in rows.values():
        assert row["adaptive"]["label"] == f"{STEPS}=adaptive"
        assert row["adaptive_vs_best"] is not None
        assert row["chosen"] != f"{STEPS}=adaptive"
    assert rows[32]["adaptive_vs_best"]["label"] == "slower"
    assert rows[32]["adaptive_vs_best"]["says"] == "adaptive is slower"
    text = render_sweep(root, "text")
    assert "adaptive / best [95% CI]" in text
    assert "best setting by the median per-pair E2E ratio (decides the schedule)" in text
    assert "best setting per load" in render_sweep(root, "html")


def test_the_kept_baseline_never_sees_a_prompt_twice(swept: tuple[Path, dict[str, Any]]) -> None:
    """With fresh prompts the trace cursor carries across values: over the three values' ladders
    every trace index went once to the baseline (and once to a candidate)."""
    _, doc = swept
    sent: dict[str, Counter[int]] = {"baseline": Counter(), "candidate": Counter()}
    values = set()
    for lv in doc["levels"]:
        values.add(json.dumps(lv["setting"]))
        for batch in Path(lv["run_dir"]).glob("batch-*"):
            for line in (batch / "requests.jsonl").read_text().splitlines():
                rec = json.loads(line)
                sent[rec["side"]][rec["trace_index"]] += 1
    assert len(values) == 3
    assert set(sent["baseline"].values()) == {1}
    assert sent["baseline"].keys() == sent["candidate"].keys()
    assert sorted(sent["baseline"]) == list(range(len(sent["baseline"])))
    assert doc["prompts"].startswith("fresh:")


def test_the_glance_names_each_level_s_choice(swept: tuple[Path, dict[str, Any]]) -> None:
    """The demo's few lines: one per level, the choice and its interval, off where off."""
    _, doc = swept
    lines = schedule_glance(doc)
    assert lines[0].startswith("best setting per load (SIMULATED;")
    assert lines[1].startswith(f"  1 stream: {STEPS}=4 ")
    assert lines[2].startswith(f"  8 streams: {STEPS}=1 ")
    assert lines[3].startswith("  32 streams: off (nearest ")
    assert lines[4] == "  written: schedule.json, speculative-adaptive-config.json"
