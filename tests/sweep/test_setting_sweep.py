"""The setting sweep on simulator processes: one key walked, a refused value, the log lines."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specproxy.backends.base import BackendKind
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.launchers import ServerCommand, free_port, override_flags
from specproxy.sweep.run import run_sweep
from specproxy.testing.crossover_setup import write_trace

FAST = ["--decode-step-ms", "0.5", "--verify-step-ms", "0.7", "--contention", "0",
        "--prefill-us-per-token", "0", "--model-path", "sim/target", "--random-seed", "3",
        "--max-running-requests", "64"]  # fmt: skip
SPEC = ["--algorithm", "eagle", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]  # fmt: skip


@dataclass(frozen=True, slots=True)
class SimLauncher:
    """Simulator processes standing in for a server launcher (same protocol as SGLang's)."""

    kind: BackendKind = BackendKind.SGLANG
    health_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0

    def _command(self, extra: list[str]) -> ServerCommand:
        port = free_port()
        argv = [sys.executable, "-m", "specproxy", "sim", "--port", str(port), *FAST, *extra]
        return ServerCommand(tuple(argv), f"http://127.0.0.1:{port}")

    def baseline(self) -> ServerCommand:
        return self._command([])

    def candidate(self, setting: Mapping[str, str]) -> ServerCommand:
        return self._command(override_flags(SPEC, setting))

    def candidate_args(self, setting: Mapping[str, str]) -> dict[str, str]:
        argv = override_flags(SPEC, setting)
        return {argv[i][2:]: argv[i + 1] for i in range(0, len(argv), 2)}

    def check_key(self, key: str) -> None:
        if not key.startswith("speculative-"):
            raise ValueError(f"--vary {key}: not a speculative setting")


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A setting sweep over num-draft-tokens = 2, 4 and an invalid value, at concurrency 2."""
    folder = tmp_path_factory.mktemp("settings")
    trace = write_trace(folder / "trace.jsonl", 50, 8)
    cfg = SweepConfig(traces=(str(trace),), launch="sims", concurrency="2", pairs=8,
                      block_size=4, output_len=8, run_dir=str(folder / "sweep"),
                      vary=("speculative-num-draft-tokens=2,4,many",))  # fmt: skip
    outcome = asyncio.run(run_sweep(cfg, launcher=SimLauncher()))
    return outcome.root, json.loads((outcome.root / "sweep.json").read_text())


def _lines(root: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (root / "experiments.jsonl").read_text().splitlines()]


def test_each_value_is_an_experiment_and_the_refused_one_is_rejected(
    swept: tuple[Path, dict[str, Any]],
) -> None:
    """Both valid values run the ladder; the invalid value is `rejected` with the server's error."""
    root, doc = swept
    assert doc["status"] == "completed"
    assert [e["status"] for e in doc["settings"]] == ["completed", "completed", "rejected"]
    lines = _lines(root)
    assert [line["status"] for line in lines] == ["completed", "completed", "rejected"]
    assert [line["setting"] for line in lines] == [
        {"speculative-num-draft-tokens": v} for v in ("2", "4", "many")
    ]
    rejected = lines[2]
    assert "many" in rejected["error"] and "not a valid integer" in rejected["error"]
    experiment = json.loads((Path(rejected["run_dir"]) / "experiment.json").read_text())
    assert experiment["status"] == "rejected" and "many" in experiment["error"]


def test_launch_diff_is_against_the_previous_value(swept: tuple[Path, dict[str, Any]]) -> None:
    """The second value's line names exactly the key that changed, from 2 to 4."""
    root, _ = swept
    lines = _lines(root)
    assert lines[0]["launch_diff"] == []
    assert lines[1]["launch_diff"] == [
        {"key": "speculative-num-draft-tokens", "from": "2", "to": "4"}
    ]
    assert lines[1]["candidate"]["algorithm"] == "EAGLE"
    assert lines[1]["baseline"]["speculation"] is False


def test_the_baseline_stays_up_and_only_the_candidate_changes(
    swept: tuple[Path, dict[str, Any]],
) -> None:
    """Every batch of every value ran against one baseline server and a per-value candidate."""
    _, doc = swept
    urls: dict[str, set[str]] = {"baseline": set(), "candidate": set()}
    for entry in doc["settings"][:2]:
        for lv in entry["levels"]:
            for batch in Path(lv["run_dir"]).glob("batch-*"):
                for line in (batch / "requests.jsonl").read_text().splitlines():
                    record = json.loads(line)
                    urls[record["side"]].add(record["backend_url"])
    assert len(urls["baseline"]) == 1
    assert len(urls["candidate"]) == 2
    assert doc["levels"][0]["setting"] == {"speculative-num-draft-tokens": "2"}
