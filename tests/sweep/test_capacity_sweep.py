"""``specproxy sweep --slo tpot_p90_ms=...`` on two simulators over loopback: each side's
capacity and their ratio, with intervals, head sweep.json and the report.

The candidate keeps 90% of its drafts and its verify step costs about what a decode step
does, so per token it is far cheaper at every tested load: its p90 TPOT stays under the
bound to a much higher concurrency than the baseline's. The test asserts that direction, not
figures. Against the 10 ms bound the baseline's TPOT is 8.8 ms at 1 stream and 11.2 ms at 4
by the formula (it crosses near 2.3 streams), the candidate's p90 about 7.5 ms at 4 streams
and 20 ms at 16 (it crosses near 6.5), so each crossing lies between two levels with 10% or
more to spare on either side. The simulators share the sweep's event loop, whose lateness lands
on the TPOT: with 4 ms steps, 200 us a token and a 5 ms bound the baseline's p90 at 1 stream
(4.2 ms by the formula) reached 4.65 ms on a loaded 2-core machine, and at 4 streams (4.8 ms)
it fell on either side of the bound.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

from specproxy.report.sweep_html import render_sweep_html
from specproxy.report.sweep_report import render_sweep_md, render_sweep_text
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.run import run_sweep
from specproxy.testing.crossover_setup import write_trace

SLO = "tpot_p90_ms=10"


def _sim(**overrides: object) -> SimConfig:
    settings: dict[str, object] = {"decode_step_ms": 8.0, "per_token_us": 800.0,
                                   "prefill_us_per_token": 0.0, "contention": 0.0,
                                   "max_running_requests": 256}  # fmt: skip
    settings.update(overrides)
    return SimConfig(**settings)  # type: ignore[arg-type]


async def _sweep(folder: Path) -> dict[str, Any]:
    trace = write_trace(folder / "trace.jsonl", 400, 16)
    candidate = _sim(speculative_algorithm="EAGLE", speculative_num_steps=3,
                     speculative_eagle_topk=1, speculative_num_draft_tokens=4,
                     accept_prob=0.9, verify_step_ms=8.0, draft_step_ms=0.4)  # fmt: skip
    async with serve_in_background(_sim()) as base, serve_in_background(candidate) as cand:
        cfg = SweepConfig(traces=(str(trace),), baseline=base, candidate=cand,
                          concurrency="1,4,16", pairs=32, block_size=8, output_len=16,
                          ignore_eos=True, run_dir=str(folder / "sweep"), slo=SLO)  # fmt: skip
        outcome = await run_sweep(cfg)
    return outcome.doc


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return asyncio.run(_sweep(tmp_path_factory.mktemp("capacity")))


def _ci(est: dict[str, Any]) -> tuple[float, float]:
    low, high = est["ci"]
    return float(low), math.inf if high is None else float(high)


def test_sweep_json_carries_both_capacities_and_the_ratio_with_intervals(
    doc: dict[str, Any],
) -> None:
    cap = doc["capacity"]
    assert doc["status"] == "completed" and cap == doc["settings"][0]["capacity"]
    assert cap["slo"] == [{"key": "tpot_p90_ms", "metric": "tpot", "percentile": 90.0,
                           "limit_ms": 10.0}]  # fmt: skip
    assert [lv["load"] for lv in cap["levels"]] == [1.0, 4.0, 16.0]
    assert all(lv["units"] >= 6 for lv in cap["levels"])
    base, cand = cap["baseline"], cap["candidate"]
    assert base["load"]["status"] == "within"
    assert 1.0 < base["load"]["estimate"] < 16.0
    # the direction: speculation holds the SLO to a clearly higher load
    c_low, _ = _ci(cand["load"])
    _, b_high = _ci(base["load"])
    assert c_low > b_high, (base["load"], cand["load"])
    for est in (base["load"], cand["load"], base["requests_per_s"], cand["requests_per_s"],
                cap["ratio"], cap["load_ratio"]):  # fmt: skip
        low, high = _ci(est)
        assert low <= (est["estimate"] if est["estimate"] is not None else math.inf) <= high
    assert cap["ratio"]["ci"][0] > 1.0 and cap["load_ratio"]["ci"][0] > 1.0
    assert base["requests_per_s"]["estimate"] > 0
    # the per-level percentiles the fit rests on rise with load on the baseline
    p90 = [lv["percentiles_ms"]["baseline"]["tpot_p90_ms"] for lv in cap["levels"]]
    assert p90[0] < 10.0 < p90[-1]
    assert doc["slo"] is None  # no goodput bound was given: no goodput figures
    json.dumps(doc, allow_nan=False)  # no infinity leaks into the file


def test_the_answer_heads_every_report_format(doc: dict[str, Any]) -> None:
    text = render_sweep_text(doc)
    first = text.splitlines()[2]
    assert first.startswith("within your SLO (p90 TPOT <= 10 ms), one GPU serves ")
    assert "with speculation and" in first and "ratio " in first
    assert "highest concurrency within the SLO" in text.splitlines()[3]
    md = render_sweep_md(doc)
    assert "**within your SLO (p90 TPOT <= 10 ms)" in md.split("\n- status")[0]
    page = render_sweep_html(doc)
    assert page.index("within your SLO") < page.index("recommendation:")
    assert "p90 TPOT vs load" in page
