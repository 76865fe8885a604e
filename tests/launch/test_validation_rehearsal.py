"""The GPU validation scripts (docs/validation/) rehearsed end to end against the simulator."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from specproxy.cli import main

REPO = Path(__file__).resolve().parents[2]
SIM_UNKNOWN = ("attention-backend", "sampling-backend", "grammar-backend", "cuda-graph-backend")


def _simulated(source: Path, target: Path) -> Path:
    """The description with `specproxy sim` as the server and the flags it lacks removed."""
    lines = [
        line
        for line in source.read_text().splitlines()
        if not line.startswith(SIM_UNKNOWN) and not line.startswith("health_timeout_s")
    ]
    text = "\n".join(lines)
    launch = (
        f'\nserver_module = "specproxy sim"\npython = "{sys.executable}"\nhealth_timeout_s = 60\n'
    )
    text = re.sub(r"^\[launch\]$", "[launch]" + launch, text, flags=re.MULTILINE)
    if "[launch]" not in text:
        text += "\n[launch]" + launch
    target.write_text(text)
    return target


def _launch(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(["launch", *args])
    return int(exit_info.value.code or 0)


@pytest.mark.slow
def test_the_validation_run_passes_against_simulated_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpu_run.sh's two launches, the pair checks and summarize.py agree: VALIDATION OK."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SPECPROXY_VALIDATION_KEY", "sk-rehearsal-key-55")
    pair = _simulated(REPO / "deploy/sglang/tiny-standalone.toml", tmp_path / "pair.toml")
    refused = _simulated(
        REPO / "docs/validation/tiny-refused-partial-tuning.toml", tmp_path / "refused.toml"
    )
    runs = tmp_path / "runs"
    checks = ["--", "sh", "docs/validation/pair_checks.sh"]
    assert _launch([str(pair), "--run-dir", str(runs / "pair"), *checks]) == 0
    assert _launch([str(refused), "--run-dir", str(runs / "refused")]) == 1
    summary = subprocess.run(
        [sys.executable, "bench/gpu/summarize_checks.py", str(runs), "sk-rehearsal-key-55"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert summary.returncode == 0, summary.stdout
    assert summary.stdout.strip().endswith("VALIDATION OK")
