"""On SGLang >= 0.5.19 the replayer asks the OpenAI routes for exact per-request spec stats."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import fast_sim


@pytest.mark.parametrize(
    ("version", "source"), [("0.5.23", "sglext"), ("0.5.16", "chunk_estimate")]
)
async def test_chat_replay_acceptance_is_exact_where_the_server_can_say(
    traces_dir: Path, tmp_path: Path, version: str, source: str
) -> None:
    """0.5.23 servers give sglext acceptance on streamed chat; 0.5.16 only the chunk estimate."""
    base_cfg = fast_sim(sglang_version=version)
    cand_cfg = fast_sim(sglang_version=version, speculative_algorithm="EAGLE")
    async with serve_in_background(base_cfg) as base, serve_in_background(cand_cfg) as cand:
        cfg = ReplayConfig(
            traces=(str(traces_dir / "mtbench_question.jsonl"),),
            baseline=base,
            candidate=cand,
            mode="mirror",
            limit=6,
            rate=50.0,
            route="chat",
            output_len=24,
            run_dir=str(tmp_path / "run"),
        )
        outcome = await run_replay(cfg)
    lines = (outcome.run_dir / "requests.jsonl").read_text().splitlines()
    candidate = [json.loads(x) for x in lines if json.loads(x)["side"] == "candidate"]
    assert len(candidate) == 6
    assert {r["acceptance"]["source"] for r in candidate} == {source}
    exp = json.loads((outcome.run_dir / "experiment.json").read_text())
    assert exp["sampling"]["return_spec_tokens_details"] is (source == "sglext")
