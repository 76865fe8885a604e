"""``--fresh-prompts``: each batch continues the trace, so no trace request is sent twice."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.ladder import TRACE_USED, TraceCursor
from specproxy.sweep.run import run_sweep
from specproxy.testing.crossover_setup import write_trace

SIM = {"decode_step_ms": 0.5, "verify_step_ms": 0.7, "prefill_us_per_token": 0.0,
       "contention": 0.0}  # fmt: skip


async def _sweep(folder: Path, requests: int, *, fresh: bool) -> dict[str, Any]:
    trace = write_trace(folder / "trace.jsonl", requests, 8)
    async with (
        serve_in_background(SimConfig(**SIM)) as base,  # type: ignore[arg-type]
        serve_in_background(SimConfig(**SIM, speculative_algorithm="EAGLE")) as cand,  # type: ignore[arg-type]
    ):
        cfg = SweepConfig(traces=(str(trace),), baseline=base, candidate=cand,
                          concurrency="1,2", pairs=24, block_size=8, output_len=8,
                          fresh_prompts=fresh, run_dir=str(folder / "sweep"))  # fmt: skip
        outcome = await run_sweep(cfg)
    doc: dict[str, Any] = json.loads((outcome.root / "sweep.json").read_text())
    log = (outcome.root / "experiments.jsonl").read_text().splitlines()
    doc["closed"] = [json.loads(line)["closed"] for line in log]
    return doc


def _sent(doc: dict[str, Any]) -> dict[str, Counter[int]]:
    """Trace indexes sent per side over every batch of every level (warm-up/cool-down too)."""
    sent: dict[str, Counter[int]] = {"baseline": Counter(), "candidate": Counter()}
    for lv in doc["levels"]:
        for batch in Path(lv["run_dir"]).glob("batch-*"):
            for line in (batch / "requests.jsonl").read_text().splitlines():
                rec = json.loads(line)
                sent[rec["side"]][rec["trace_index"]] += 1
    return sent


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Three small sweeps (levels 1 and 2): fresh on 400 requests and on 20, and the default."""
    out = {}
    for name, requests, fresh in (("fresh", 400, True), ("short", 20, True), ("same", 400, False)):
        out[name] = asyncio.run(_sweep(tmp_path_factory.mktemp(name), requests, fresh=fresh))
    return out


def test_fresh_prompts_send_each_trace_request_once_per_side(
    runs: dict[str, dict[str, Any]],
) -> None:
    """With fresh prompts every trace index goes once to each side, from 0 on without a gap."""
    sent = _sent(runs["fresh"])
    for side in ("baseline", "candidate"):
        assert set(sent[side].values()) == {1}
        assert sorted(sent[side]) == list(range(len(sent[side])))
    assert sent["baseline"].keys() == sent["candidate"].keys()
    assert len(sent["candidate"]) > 2 * 8  # more than one batch's worth: the cursor moved on


def test_default_sweep_replays_the_trace_from_its_start(runs: dict[str, dict[str, Any]]) -> None:
    """Without fresh prompts every batch starts at trace request 0, so requests repeat."""
    sent = _sent(runs["same"])
    batches = sum(1 for lv in runs["same"]["levels"] for _ in Path(lv["run_dir"]).glob("batch-*"))
    assert batches >= 2
    assert sent["candidate"][0] == batches


def test_a_used_up_trace_closes_the_open_levels(runs: dict[str, dict[str, Any]]) -> None:
    """A 20-request trace is spread over the levels and then closes those still open."""
    doc = runs["short"]
    sent = _sent(doc)
    assert sorted(sent["candidate"]) == list(range(20))
    assert set(sent["candidate"].values()) == {1}
    assert TRACE_USED in doc["closed"]
    assert doc["status"] == "completed"


def test_cursor_hands_out_consecutive_slices_until_the_trace_ends() -> None:
    """TraceCursor.take gives (skip, limit) slices back to back and None once nothing is left."""
    cursor = TraceCursor(10)
    assert cursor.take(4) == (0, 4)
    assert cursor.take(4) == (4, 4)
    assert cursor.take(4) == (8, 2)
    assert cursor.take(4) is None


def test_sweep_json_says_which_prompt_rule_it_ran(runs: dict[str, dict[str, Any]]) -> None:
    """sweep.json's header names the prompt rule: fresh (one cursor) or the same prompts."""
    assert runs["fresh"]["prompts"].startswith("fresh:")
    assert runs["same"]["prompts"].startswith("same:")
