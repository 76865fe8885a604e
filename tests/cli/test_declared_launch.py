"""A server that does not report its launch command (SGLang 0.5.16) can be given one:
declared on the command line or read from its process on this host; where it came from
is recorded and the recommendation's condition accepts it, naming the source (issue 33,
item 18). Over loopback with the simulator."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from specproxy.recording.local_process import is_loopback, process_command
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import TRACES, fast_sim

MTBENCH = str(TRACES / "mtbench_question.jsonl")
MODEL = "simulated/Llama-3.1-8B-Instruct"  # what the simulator reports as its model_path
SERVER = "python -m sglang.launch_server --model-path " + MODEL
REVISIONS = ("--declare", "target_revision=abc123", "--declare", "draft_revision=def456")


@pytest.fixture
async def sim_pair() -> AsyncIterator[tuple[str, str]]:
    async with (
        serve_in_background(fast_sim()) as baseline,
        serve_in_background(fast_sim(speculative_algorithm="EAGLE")) as candidate,
    ):
        yield baseline, candidate


async def _replay(run_dir: Path, *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specproxy", "replay", MTBENCH, "--route", "chat",
        "--output-len", "4", "--rate", "100", "--max-requests", "4",
        "--run-dir", str(run_dir), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


def _read(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    experiment = json.loads((run_dir / "experiment.json").read_text())
    report = json.loads((run_dir / "report.json").read_text())
    conditions = {c["key"]: c for c in report["recommendation"]["conditions"]}
    return experiment, report, conditions["launch_configs_complete"]


async def test_declared_commands_complete_the_launch_and_say_so(
    sim_pair: tuple[str, str], tmp_path: Path
) -> None:
    """Both commands declared (one with an API key): recorded redacted with source
    "declared", shown in the launch table, and the condition is met naming the source."""
    baseline, candidate = sim_pair
    run_dir = tmp_path / "run"
    code, err = await _replay(
        run_dir, "--baseline", baseline, "--candidate", candidate, *REVISIONS,
        "--baseline-launch", SERVER,
        "--candidate-launch", SERVER + " --speculative-algorithm EAGLE --api-key SECRETKEY",
    )  # fmt: skip
    assert code == 0, err
    experiment, report, condition = _read(run_dir)
    for side in ("baseline", "candidate"):
        assert experiment[side]["launch_source"] == "declared"
        assert experiment[side]["launch"]["launcher"]["source"] == "declared"
    assert experiment["candidate"]["launch"]["launcher"]["command"][-1] == "[redacted]"
    assert "SECRETKEY" not in (run_dir / "experiment.json").read_text()
    assert condition["met"], condition
    assert condition["detail"].endswith("(commands from: baseline declared, candidate declared)")
    rows = {r[0]: r[1:] for r in report["launch_table"]}
    assert rows["launch command from"] == ["declared", "declared"]


async def test_a_declared_command_that_disagrees_is_named(
    sim_pair: tuple[str, str], tmp_path: Path
) -> None:
    """A declared NGRAM command for a server that runs EAGLE is not taken on trust."""
    baseline, candidate = sim_pair
    code, err = await _replay(
        tmp_path / "run", "--baseline", baseline, "--candidate", candidate, *REVISIONS,
        "--baseline-launch", SERVER,
        "--candidate-launch", SERVER + " --speculative-algorithm NGRAM",
    )  # fmt: skip
    assert code == 0, err
    _experiment, _report, condition = _read(tmp_path / "run")
    assert not condition["met"]
    assert condition["detail"] == (
        "candidate: the supplied launch command disagrees with the server:"
        " speculative_algorithm: command NGRAM, server EAGLE"
    )


async def test_without_a_command_the_condition_says_how_to_give_one(
    sim_pair: tuple[str, str], tmp_path: Path
) -> None:
    baseline, candidate = sim_pair
    code, err = await _replay(
        tmp_path / "run", "--baseline", baseline, "--candidate", candidate, *REVISIONS
    )
    assert code == 0, err
    experiment, _report, condition = _read(tmp_path / "run")
    assert experiment["baseline"]["launch_source"] is None
    assert not condition["met"]
    assert "baseline: full launch command not recorded" in condition["detail"]
    assert "give --baseline-launch COMMAND, or --launch-from-process" in condition["detail"]


@contextlib.asynccontextmanager
async def _sim_process(*args: str) -> AsyncIterator[str]:
    """`specproxy sim --port 0 ARGS` as its own process; yields its URL."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specproxy", "sim", "--port", "0", "--decode-step-ms", "0.5",
        *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(60):
            line = (await proc.stdout.readline()).decode()
        match = re.search(r"at (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        yield match.group(1)
    finally:
        proc.terminate()
        await proc.wait()


async def test_the_command_is_read_from_the_process_on_this_host(tmp_path: Path) -> None:
    """--launch-from-process: each server's own argv, found by its listening port, is the
    recorded command (source "process")."""
    async with (
        _sim_process() as baseline,
        _sim_process("--algorithm", "EAGLE") as candidate,
    ):
        argv = process_command(candidate)
        assert argv is not None and argv[1:4] == ["-m", "specproxy", "sim"]
        assert "--algorithm" in argv
        code, err = await _replay(
            tmp_path / "run", "--baseline", baseline, "--candidate", candidate,
            "--launch-from-process", *REVISIONS,
        )  # fmt: skip
    assert code == 0, err
    experiment, _report, _condition = _read(tmp_path / "run")
    for side, url_argv in (("baseline", "sim"), ("candidate", "EAGLE")):
        assert experiment[side]["launch_source"] == "process"
        assert url_argv in experiment[side]["launch"]["launcher"]["command"]


def test_only_loopback_urls_are_read() -> None:
    """A server elsewhere is never looked up among this host's processes."""
    assert is_loopback("http://127.0.0.1:30000") and is_loopback("http://[::1]:30000")
    assert is_loopback("http://localhost:30000")
    assert not is_loopback("http://10.0.0.5:30000") and not is_loopback("http://gpu-box:30000")
    assert process_command("http://10.0.0.5:30000") is None


async def test_a_command_that_is_not_shell_text_is_a_usage_error(tmp_path: Path) -> None:
    code, err = await _replay(
        tmp_path / "run", "--baseline", "http://127.0.0.1:1",
        "--baseline-launch", "python -m sglang.launch_server --model-path 'unclosed",
    )  # fmt: skip
    assert code == 2
    ours = [line for line in err.splitlines() if line.startswith("specproxy")]
    assert len(ours) == 1 and "baseline_launch: launch command cannot be read" in ours[0]


async def test_serve_records_a_declared_command(sim_pair: tuple[str, str], tmp_path: Path) -> None:
    """`serve --baseline-launch ...`: the proxy's experiment.json names the source too."""
    from specproxy.proxy.config import ProxyConfig
    from specproxy.proxy.server import serve_proxy_in_background

    baseline, candidate = sim_pair
    cfg = ProxyConfig(
        baseline=baseline, candidate=candidate, port=0, run_dir=tmp_path / "proxy",
        baseline_launch=SERVER, launch_from_process=False,
    )  # fmt: skip
    async with serve_proxy_in_background(cfg):
        experiment = json.loads((tmp_path / "proxy" / "experiment.json").read_text())
    assert experiment["baseline"]["launch_source"] == "declared"
    assert experiment["baseline"]["launch"]["launcher"]["command"][-1] == MODEL
    assert experiment["candidate"]["launch_source"] is None
