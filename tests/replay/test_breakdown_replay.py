"""End to end on the simulator: a replay whose report.json carries the input-length,
output-length and category breakdowns and the candidate's step histogram, with the
candidate's draft configured (SIMULATED) to lose acceptance past 2048 prompt tokens."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay
from specproxy.report.write import write_reports
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import fast_sim

STEPS = {"decode_step_ms": 2.0, "verify_step_ms": 3.0}


def _trace(path: Path, n: int) -> Path:
    """Half short prompts (200-400 tokens), half long ones (2600-3400), 32 output tokens."""
    rng = random.Random(5)
    lines = []
    for i in range(n):
        long = i % 2 == 1
        lines.append({
            "t": i * 0.05,
            "input_tokens": rng.randint(2600, 3400) if long else rng.randint(200, 400),
            "output_tokens": 32,
            "category": "long-context" if long else "short-context",
        })  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


async def _replay(tmp_path: Path, route: str, n: int) -> dict[str, Any]:
    candidate = fast_sim(
        speculative_algorithm="EAGLE", accept_prob=0.85, long_prompt_tokens=2048,
        long_accept_prob=0.05, **STEPS,
    )  # fmt: skip
    async with (
        serve_in_background(fast_sim(**STEPS)) as base_url,
        serve_in_background(candidate) as cand_url,
    ):
        outcome = await run_replay(
            ReplayConfig(
                traces=(str(_trace(tmp_path / "trace.jsonl", n)),),
                baseline=base_url,
                candidate=cand_url,
                mode="mirror",
                rate=20.0,
                arrival="constant",
                route=route,
                ignore_eos=True,
                seed=2,
                run_dir=str(tmp_path / "runs"),
            )
        )
    written = write_reports([outcome.run_dir], tmp_path / "report")
    report_json = next(p for p in written if p.suffix == ".json")
    doc: dict[str, Any] = json.loads(report_json.read_text())
    doc["_written"] = [str(p) for p in written]
    return doc


async def test_long_prompts_show_in_the_input_length_breakdown(tmp_path: Path) -> None:
    """The long-prompt bin's E2E ratio is worse (above the short bin's interval) and its
    accept length lower; the category breakdown agrees; the histogram is EXACT."""
    doc = await _replay(tmp_path, "generate", 80)
    b = doc["breakdown"]
    groups = b["by_input_tokens"]["groups"]
    assert len(groups) >= 2
    short = [g for g in groups if g["low"] < 2048]
    long = [g for g in groups if g["low"] >= 2048]
    assert short and long and sum(g["n"] for g in groups) == 80
    worst_short = max(g["e2e"]["high"] for g in short)
    assert all(g["e2e"]["low"] > worst_short for g in long), groups
    assert max(g["mean_accept_length"] for g in long) < min(g["mean_accept_length"] for g in short)
    accept = dict(
        zip((g["low"] for g in groups), b["by_input_tokens"]["accept_length"], strict=True)
    )
    assert max(accept[g["low"]]["high"] for g in long) < min(accept[g["low"]]["low"] for g in short)
    cats = {g["label"]: g for g in b["by_category"]["groups"]}
    assert cats["long-context"]["e2e"]["point"] > 1.0 > cats["short-context"]["e2e"]["point"]
    assert [g["label"] for g in b["by_output_tokens"]["groups"]] == ["32–63"]
    (hist,) = b["step_acceptance"]
    assert hist["label"] == "exact" and hist["side"] == "candidate"
    assert "spec_correct_drafts_histogram" in hist["source"] and "meta_info 80" in hist["source"]
    rates = hist["position_rates"]
    assert rates == sorted(rates, reverse=True) and 0 < rates[-1] < rates[0] < 1
    assert abs(sum(hist["shares"]) - 1.0) < 1e-9
    text = Path(next(p for p in doc["_written"] if p.endswith(".txt"))).read_text()
    assert "Where the gain goes" in text and "EXACT" in text and "SIMULATED" in text


async def test_a_chat_stream_gives_an_estimated_histogram(tmp_path: Path) -> None:
    """Chat streams of 0.5.16 carry no spec fields: the histogram comes from the bursts
    (exact tokens per chunk from continuous usage) and says ESTIMATED."""
    doc = await _replay(tmp_path, "chat", 24)
    (hist,) = doc["breakdown"]["step_acceptance"]
    assert hist["label"] == "estimated"
    assert "stream bursts" in hist["source"]
    assert hist["requests"] == 24 and hist["steps"] > 0
    rates = hist["position_rates"]
    # Steps of short prompts accept a draft with probability 0.85, of long ones 0.05.
    assert 0.05 < rates[0] < 0.85
    assert rates == sorted(rates, reverse=True)
