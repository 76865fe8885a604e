"""Replay options that used to do nothing silently now act or say why they cannot."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specproxy.cli import main
from specproxy.core.records.model import SendMode
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.server import serve_proxy_in_background
from specproxy.replay.config import ReplayConfig
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import TRACES, fast_sim

MTBENCH = str(TRACES / "mtbench_question.jsonl")
NATIVE = str(TRACES / "sample_native.jsonl")


@pytest.fixture
async def pair() -> AsyncIterator[tuple[str, str]]:
    async with (
        serve_in_background(fast_sim()) as baseline,
        serve_in_background(fast_sim(speculative_algorithm="EAGLE")) as candidate,
    ):
        yield baseline, candidate


async def _replay(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specproxy",
        "replay",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_via_a_mirror_proxy_points_to_its_run_dir(
    pair: tuple[str, str], tmp_path: Path
) -> None:
    """--via a mirror proxy names the proxy's run directory, where the pairs are."""
    baseline, candidate = pair
    proxy_dir = tmp_path / "proxy"
    cfg = ProxyConfig(
        baseline=baseline, candidate=candidate, mode=SendMode.MIRROR, port=0, run_dir=proxy_dir
    )
    async with serve_proxy_in_background(cfg) as proxy:
        args = ("--via", proxy, "--route", "chat", "--output-len", "8", "--rate", "50")
        code, out, err = await _replay(
            MTBENCH, *args, "--max-requests", "6", "--run-dir", str(tmp_path / "client")
        )
    assert code == 0, err
    text = " ".join(out.split())  # the pointer is the result: on stdout, no empty verdict
    assert f"comparison: in the mirror proxy's run directory {proxy_dir}" in text
    assert f"`specproxy report {proxy_dir}`" in text
    assert "it compares nothing itself" in text
    assert "INCONCLUSIVE" not in out and "over 0 pairs" not in out
    assert "run directory" not in err
    experiment = json.loads((tmp_path / "client" / "experiment.json").read_text())
    assert experiment["workload"]["requests_planned"] == 6
    assert experiment["workload"]["records_read"] > 6
    lines = (tmp_path / "client" / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 6


async def test_direct_run_has_no_proxy_note(pair: tuple[str, str], tmp_path: Path) -> None:
    """Without --via there is no proxy to point to; --max-requests still caps the sends."""
    baseline, candidate = pair
    code, _out, err = await _replay(
        MTBENCH,
        *("--baseline", baseline, "--candidate", candidate, "--route", "chat"),
        *("--output-len", "8", "--rate", "50", "--max-requests", "3"),
        *("--run-dir", str(tmp_path / "run")),
    )
    assert code == 0, err
    assert "run directory" not in err
    lines = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 6  # 3 per side, mirror mode


async def test_reference_lengths_without_references(pair: tuple[str, str], tmp_path: Path) -> None:
    """--output-len-from-reference on a trace without reference answers is a one-line error."""
    baseline, _candidate = pair
    code, _out, err = await _replay(
        NATIVE, "--baseline", baseline, "--output-len-from-reference", "--run-dir", str(tmp_path)
    )
    assert code == 2
    assert "Traceback" not in err
    ours = [line for line in err.splitlines() if line.startswith("specproxy:")]
    assert len(ours) == 1 and "--output-len-from-reference: none of the" in ours[0]


def test_limit_and_max_requests_say_what_they_count(capsys: pytest.CaptureFixture[str]) -> None:
    """--help says --limit counts records read, and offers --max-requests for requests sent."""
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Read at most N trace records (counted before the context" in text
    assert (
        "--max-requests INTEGER Send at most N requests per side, counted after the filters" in text
    )
    with pytest.raises(ValueError, match="max_requests must be > 0"):
        ReplayConfig(traces=("t",), baseline="http://127.0.0.1:1", max_requests=0)


async def test_max_context_skips_text_prompts(pair: tuple[str, str], tmp_path: Path) -> None:
    """--max-context applies to text prompts too: those whose tokens plus output exceed it
    are skipped and counted; a roomy limit skips none."""
    baseline, _candidate = pair
    planned = {}
    for limit in ("60", "100000"):
        run_dir = tmp_path / limit
        code, _out, err = await _replay(
            MTBENCH,
            *("--baseline", baseline, "--route", "chat", "--output-len", "8", "--rate", "200"),
            *("--max-context", limit, "--run-dir", str(run_dir)),
        )
        assert code == 0, err
        workload = json.loads((run_dir / "experiment.json").read_text())["workload"]
        skipped = workload["over_context"]["skipped"]
        assert workload["requests_planned"] == workload["records_read"] - skipped
        planned[limit] = skipped
    assert planned["60"] > 0 and planned["100000"] == 0
