"""`--declare KEY=VALUE`: identity facts the servers cannot report reach both launch configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specproxy.cli import main
from specproxy.core.launch.config import parse_declarations
from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay


def test_declarations_parse_and_reject_unknown_keys() -> None:
    """Known keys parse (dashes allowed); an unknown key or a bare word is refused by name."""
    assert parse_declarations(["gpu=NVIDIA H200", "target-revision=abc123"]) == {
        "gpu": "NVIDIA H200",
        "target_revision": "abc123",
    }
    with pytest.raises(ValueError, match="unknown key 'colour'"):
        parse_declarations(["colour=red"])
    with pytest.raises(ValueError, match="not KEY=VALUE"):
        parse_declarations(["gpu"])


async def test_replay_records_declared_facts_in_both_launch_configs(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path
) -> None:
    """Declared gpu and revision appear in experiment.json for both sides."""
    baseline, candidate = sim_pair
    cfg = ReplayConfig(
        traces=(str(traces_dir / "sample_native.jsonl"),),
        baseline=baseline,
        candidate=candidate,
        mode="alternate",
        block_size=6,
        speed=20.0,
        run_dir=str(tmp_path / "run"),
        declare=("gpu=NVIDIA H200", "target_revision=abc123"),
    )
    outcome = await run_replay(cfg)
    exp = json.loads((outcome.run_dir / "experiment.json").read_text())
    for side in ("baseline", "candidate"):
        facts = exp[side]["launch"]["facts"]
        assert facts["gpu"] == "NVIDIA H200"
        assert facts["target_revision"] == "abc123"


def test_a_bad_declaration_is_a_usage_error(tmp_path: Path) -> None:
    """An unknown --declare key exits with status 2 before anything is sent."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"prompt": "hi"}\n', encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["replay", str(trace), "--baseline", "http://127.0.0.1:9", "--declare", "colour=red"])
    assert exc.value.code == 2
