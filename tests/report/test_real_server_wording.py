"""The wordings the GPU testbed found unclear (issue 33, item 17), each asserted as it now
reads: over loopback with the simulator where a server is involved."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specproxy.core.compare.launch_checks import other_differences, read_side
from specproxy.core.records.model import Role
from specproxy.launch.preflight import PROBE_TOKENS
from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay
from specproxy.report.build import build_report
from specproxy.report.load import load_run_dir
from specproxy.report.render_text import render_text
from specproxy.report.write import write_reports
from specproxy.sim.server import serve_in_background
from specproxy.sweep.recommend import recommend_sweep
from specproxy.testing.fabricate import experiment, make_records, write_run_dir
from tests.replay.conftest import TRACES, fast_sim
from tests.sweep.test_recommend_render import CROSSING, _candidate

MTBENCH = str(TRACES / "mtbench_question.jsonl")


@pytest.fixture
async def sim_pair() -> AsyncIterator[tuple[str, str]]:
    async with (
        serve_in_background(fast_sim()) as baseline,
        serve_in_background(fast_sim(speculative_algorithm="EAGLE")) as candidate,
    ):
        yield baseline, candidate


async def _cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specproxy", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_check_says_how_many_tokens_its_greedy_comparison_covered(
    sim_pair: tuple[str, str],
) -> None:
    """`check`'s greedy agreement names its reach: 8 tokens of one prompt, not the run's."""
    baseline, candidate = sim_pair
    code, out, err = await _cli("check", "--baseline", baseline, "--candidate", candidate, "--json")
    assert code in (0, 1), err  # the two simulators' launch differences may fail a check
    found = [c for c in json.loads(out)["checks"] if c["name"] == "greedy_agreement"]
    assert [c["detail"] for c in found] == [
        f"identical greedy outputs over {PROBE_TOKENS} tokens of one short prompt"
        " (the report compares every request)"
    ]


def test_a_sweep_level_is_named_with_its_unit() -> None:
    """ "the candidate at 1": at 1 concurrent stream (singular), at 8 concurrent streams."""
    one = _candidate("the candidate", [(1.0, 0.7), (2.0, 0.9)], missing=("matched_baseline",))
    found = recommend_sweep([one], kind="concurrency", status="completed")
    assert found.reason == (
        "the candidate at 1 concurrent stream: conditions not met: matched_baseline"
    )
    eight = _candidate("k=4", CROSSING, missing=("matched_baseline",))
    found = recommend_sweep([eight], kind="concurrency", status="completed")
    assert found.reason.startswith("k=4 at 8 concurrent streams: conditions not met")


def test_a_missing_condition_is_named_once(tmp_path: Path) -> None:
    """A real-server report missing launch_configs_complete names it once in its sentence."""
    recs = make_records(n_pairs=40, true_ratio=0.8, seed=5)
    exp = experiment(simulated=False)
    exp["baseline"]["launch"] = None  # a server that did not report its launch
    run = write_run_dir(tmp_path / "run", recs, exp)
    text = " ".join(render_text(build_report([load_run_dir(run)])).split())
    start = text.index("No recommendation")
    sentence = text[start : text.index("(conditions below).", start)]
    assert "conditions not met: launch_configs_complete" in sentence, sentence
    assert sentence.count("launch_configs_complete") == 1, sentence
    assert "Missing:" not in sentence


async def test_cool_down_requests_are_called_cool_down(
    sim_pair: tuple[str, str], tmp_path: Path
) -> None:
    """An alternate run with --warmup 0 and a cool-down of 2 per block (as a sweep's
    concurrency level sends): the uncounted requests are "cool-down", not "warm-up"."""
    baseline, candidate = sim_pair
    cfg = ReplayConfig(
        traces=(MTBENCH,), baseline=baseline, candidate=candidate, mode="alternate",
        block_size=8, cooldown=2, concurrency=2, warmup=0, route="chat", output_len=4,
        max_requests=16, run_dir=str(tmp_path / "run"),
    )  # fmt: skip
    outcome = await run_replay(cfg)
    assert "cool-down 4 (0 failed; excluded below)" in outcome.text
    assert "warm-up" not in outcome.text
    write_reports([outcome.run_dir], outcome.run_dir)
    report = (outcome.run_dir / "report.txt").read_text()
    assert "cool-down (not counted above or below)" in report
    assert "requests (cool-down excluded)" in report
    assert "warm-up (not counted" not in report


async def test_a_declared_draft_revision_shows(sim_pair: tuple[str, str], tmp_path: Path) -> None:
    """--declare draft_revision=... is what the report's speculative table shows."""
    baseline, candidate = sim_pair
    run_dir = tmp_path / "run"
    code, _out, err = await _cli(
        "replay", MTBENCH, "--baseline", baseline, "--candidate", candidate,
        "--route", "chat", "--output-len", "4", "--rate", "100", "--max-requests", "4",
        "--declare", "draft_revision=abc1234", "--run-dir", str(run_dir),
    )  # fmt: skip
    assert code == 0, err
    rows = json.loads((run_dir / "report.json").read_text())["speculative"]
    shown = dict(tuple(r) for r in rows)["draft revision"]
    assert shown.startswith("abc1234 (declared"), shown


def test_a_differing_table_reads_as_keys_not_a_python_dict() -> None:
    """A nested server argument that differs is named by its dotted path, never repr()."""
    graphs = {"decode": {"max_bs": 256, "backend": "full"}, "prefill": {"max_bs": 8192}}
    other = {"decode": {"max_bs": 48, "backend": "full"}, "prefill": {"max_bs": 8192}}
    exp = experiment(
        base_extra={"cuda_graph_config": graphs}, cand_extra={"cuda_graph_config": other}
    )
    diffs = other_differences(exp, read_side(exp, Role.BASELINE), read_side(exp, Role.CANDIDATE))
    assert diffs is not None
    (text,) = [d.text for d in diffs if d.text.startswith("cuda_graph_config")]
    assert text.startswith("cuda_graph_config.decode.max_bs: baseline 256, candidate 48")
    assert "{" not in text and "'" not in text
