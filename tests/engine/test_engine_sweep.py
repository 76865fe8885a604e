"""`--vary` on the real llama.cpp engine: two draft settings walked, an invalid value refused.

The sweep starts its own llama.cpp baseline (target alone) and, per value, a candidate
with the exact-copy draft; ``spec-draft-n-max`` takes 2 then 4, and ``spec-draft-n-min``
takes a value llama-server cannot parse, which must end as a ``rejected`` experiment
carrying the engine's own error. One level (one request in flight) with a few pairs
keeps it short on two CPU cores; the verdict at so few pairs is not the point here.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from specproxy.sweep.config import SweepConfig
from specproxy.sweep.run import run_sweep
from tests.engine.llama_http import PROMPTS
from tools.engine.launcher import LlamaCppLauncher
from tools.engine.llamacpp import EnginePaths, ServerSpec

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def swept(
    engine_paths: EnginePaths, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, Any]]:
    """Run the setting sweep once for the module; returns its directory and sweep.json."""
    folder = tmp_path_factory.mktemp("engine-sweep")
    trace = folder / "prompts.jsonl"
    lines = [json.dumps({"prompt": f"{PROMPTS[i % len(PROMPTS)]} ({i})"}) for i in range(16)]
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = engine_paths.model("target")
    launcher = LlamaCppLauncher(
        engine_paths.server_bin,
        ServerSpec("baseline", target),
        ServerSpec("candidate", target, draft=engine_paths.model("draft-same")),
    )
    cfg = SweepConfig(
        traces=(str(trace),), format="prompts", route="chat", launch="llama.cpp",
        vary=("spec-draft-n-max=2,4", "spec-draft-n-min=not-a-number"), concurrency="1",
        pairs=6, block_size=3, output_len=8, run_dir=str(folder / "sweep"),
    )  # fmt: skip
    outcome = asyncio.run(run_sweep(cfg, launcher=launcher))
    return outcome.root, json.loads((outcome.root / "sweep.json").read_text())


def test_two_draft_settings_are_walked_and_logged(swept: tuple[Path, dict[str, Any]]) -> None:
    """Each draft-max value ran the ladder on the engine and has its line in experiments.jsonl."""
    root, doc = swept
    lines = [json.loads(x) for x in (root / "experiments.jsonl").read_text().splitlines()]
    ran = [x for x in lines if x["status"] == "completed"]
    assert [x["setting"] for x in ran] == [{"spec-draft-n-max": "2"}, {"spec-draft-n-max": "4"}]
    for line in ran:
        assert line["pairs"] >= 2
        assert line["candidate_args"]["spec-draft-n-max"] == line["setting"]["spec-draft-n-max"]
    assert ran[1]["launch_diff"] == [{"key": "spec-draft-n-max", "from": "2", "to": "4"}]
    assert [e["status"] for e in doc["settings"]] == ["completed", "completed", "rejected"]


def test_an_invalid_value_is_rejected_with_the_engines_error(
    swept: tuple[Path, dict[str, Any]],
) -> None:
    """The unparsable draft-min value is `rejected`, and the error is llama-server's own text."""
    _, doc = swept
    rejected = doc["settings"][2]
    assert rejected["setting"] == {"spec-draft-n-min": "not-a-number"}
    log = (Path(rejected["run_dir"]) / "logs" / "candidate.log").read_text()
    assert 'error while handling argument "--spec-draft-n-min"' in rejected["error"]
    assert rejected["error"].startswith("exit status ")
    assert rejected["error"].splitlines()[-1] in log
    experiment = json.loads((Path(rejected["run_dir"]) / "experiment.json").read_text())
    assert experiment["status"] == "rejected"
