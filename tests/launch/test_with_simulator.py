"""Preflight and the launcher against specproxy's own simulated SGLang servers."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import pytest

from specproxy.backends.base import BackendSpec
from specproxy.cli import main
from specproxy.core.records.model import Role
from specproxy.launch.checks import CheckStatus
from specproxy.launch.preflight import run_preflight
from specproxy.recording.experiment import read_experiment
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from tests.launch.capture_server import free_port, serving_in_thread

BASE = SimConfig(max_running_requests=48, random_seed=1)
STANDALONE = SimConfig(
    speculative_algorithm="STANDALONE",
    speculative_draft_model_path="sim/draft",
    max_running_requests=48,
    random_seed=1,
)


def _statuses(outcome: object) -> dict[tuple[str, str | None], CheckStatus]:
    return {(c.name, c.side): c.status for c in outcome.checks}  # type: ignore[attr-defined]


async def test_a_simulated_matched_pair_passes_with_a_simulated_label() -> None:
    """Baseline and STANDALONE simulators with the same cap pass; the pair is labelled SIMULATED."""
    async with serve_in_background(BASE) as b, serve_in_background(STANDALONE) as c:
        outcome = await run_preflight(
            BackendSpec(b, Role.BASELINE),
            BackendSpec(c, Role.CANDIDATE),
            expect_algorithm="STANDALONE",
        )
    rows = _statuses(outcome)
    assert outcome.ok
    assert rows[("greedy_agreement", None)] is CheckStatus.PASS
    assert rows[("real_servers", None)] is CheckStatus.WARN
    assert outcome.diff is not None
    assert outcome.diff.matched


async def test_a_simulated_candidate_without_speculation_fails() -> None:
    """Two simulated baselines: the candidate's speculation_on check fails."""
    async with serve_in_background(BASE) as b, serve_in_background(BASE) as c:
        outcome = await run_preflight(BackendSpec(b, Role.BASELINE), BackendSpec(c, Role.CANDIDATE))
    assert _statuses(outcome)[("speculation_on", "candidate")] is CheckStatus.FAIL
    assert not outcome.ok


async def test_a_simulated_baseline_of_another_model_is_not_matched() -> None:
    """A baseline simulator with another model path fails the diff on model_path."""
    other = SimConfig(model_path="simulated/other-model", max_running_requests=48, random_seed=1)
    async with serve_in_background(other) as b, serve_in_background(STANDALONE) as c:
        outcome = await run_preflight(BackendSpec(b, Role.BASELINE), BackendSpec(c, Role.CANDIDATE))
    rows = _statuses(outcome)
    assert rows[("diff:model_path", None)] is CheckStatus.FAIL
    assert rows[("matched_baseline", None)] is CheckStatus.FAIL


async def test_nextn_on_the_simulated_llama_is_incompatible() -> None:
    """The simulator serves a Llama architecture, so a NEXTN expectation is an incompatibility."""
    eagle = SimConfig(speculative_algorithm="NEXTN", max_running_requests=48, random_seed=1)
    async with serve_in_background(BASE) as b, serve_in_background(eagle) as c:
        outcome = await run_preflight(
            BackendSpec(b, Role.BASELINE), BackendSpec(c, Role.CANDIDATE), expect_algorithm="NEXTN"
        )
    row = next(r for r in outcome.checks if r.name == "expected_algorithm")
    assert row.status is CheckStatus.FAIL
    assert "incompatible" in row.detail
    assert outcome.candidate is not None
    assert outcome.candidate.speculative_algorithm == "EAGLE"


async def test_nextn_on_a_simulated_deepseek_target_passes_and_names_the_alias() -> None:
    """A pair simulated like the real NEXTN testbed (a DeepseekV3ForCausalLM target with its own
    NextN layer): the NEXTN expectation passes, the server reports EAGLE with the model itself
    as the draft, and the check says that SGLang reports NEXTN as EAGLE."""
    shared = {"architecture": "DeepseekV3ForCausalLM", "model_path": "/models/dsv3",
              "max_running_requests": 64, "random_seed": 1}  # fmt: skip
    base = SimConfig(**shared)  # type: ignore[arg-type]
    nextn = SimConfig(speculative_algorithm="NEXTN", speculative_num_steps=3,
                      speculative_eagle_topk=1, speculative_num_draft_tokens=4, **shared)  # type: ignore[arg-type]  # fmt: skip
    async with serve_in_background(base) as b, serve_in_background(nextn) as c:
        outcome = await run_preflight(
            BackendSpec(b, Role.BASELINE), BackendSpec(c, Role.CANDIDATE), expect_algorithm="NEXTN"
        )
    row = next(r for r in outcome.checks if r.name == "expected_algorithm")
    assert row.status is CheckStatus.PASS
    assert row.detail == "server runs EAGLE (SGLang reports NEXTN as EAGLE)"
    assert outcome.candidate is not None
    assert outcome.candidate.speculative_algorithm == "EAGLE"
    assert outcome.candidate.server_args.get("speculative_draft_model_path") == "/models/dsv3"


@pytest.mark.parametrize(
    ("candidate", "code"), [(STANDALONE, 0), (BASE, 1)], ids=["matched", "no-speculation"]
)
def test_check_exit_status_against_simulators(
    candidate: SimConfig, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """`specproxy check` exits 0 for a matched simulated pair and 1 when speculation is off."""
    servers = [functools.partial(serve_in_background, config) for config in (BASE, candidate)]
    with serving_in_thread(*servers) as (b, c), pytest.raises(SystemExit) as exit_info:
        main(["check", "--baseline", b, "--candidate", c])
    assert exit_info.value.code == code
    assert "real_servers" in capsys.readouterr().out


def _sim_description(tmp_path: Path, candidate: str) -> Path:
    text = f"""
name = "sim-pair"
[model]
path = "simulated/Llama-3.1-8B-Instruct"
[shared]
max-running-requests = 48
random-seed = 3
[candidate]
{candidate}
[memory]
baseline = 0.3
candidate = 0.3
[ports]
baseline = {free_port()}
candidate = {free_port()}
[launch]
python = "{sys.executable}"
server_module = "specproxy sim"
health_timeout_s = 60
"""
    path = tmp_path / "sim.toml"
    path.write_text(text)
    return path


def test_launch_runs_the_simulator_as_the_server(tmp_path: Path) -> None:
    """`server_module = "specproxy sim"` launches two simulators; the experiment is SIMULATED."""
    spec = 'speculative-algorithm = "NGRAM"'
    desc = _sim_description(tmp_path, spec)
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["launch", str(desc), "--run-dir", str(run_dir), "--", sys.executable, "-c", "pass"])
    assert exit_info.value.code == 0
    experiment = read_experiment(run_dir)
    assert experiment["simulated"] is True
    assert experiment["candidate"]["algorithm"] == "NGRAM"
    assert experiment["baseline"]["launch"]["server_args"]["random_seed"] == 3
    assert json.loads((run_dir / "launch.json").read_text())["state"] == "stopped"


def test_a_configuration_the_simulator_refuses_is_rejected(tmp_path: Path) -> None:
    """Partial manual tuning makes `specproxy sim` exit non-zero: the launch is rejected."""
    desc = _sim_description(tmp_path, 'speculative-algorithm = "EAGLE"\nspeculative-eagle-topk = 4')
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main(["launch", str(desc), "--run-dir", str(run_dir)])
    assert exit_info.value.code == 1
    experiment = read_experiment(run_dir)
    assert experiment["status"] == "rejected"
    assert "speculative_num_steps" in experiment["error"]


def test_a_replay_run_by_launch_records_complete_launch_configs(tmp_path: Path) -> None:
    """`launch ... -- specproxy replay` in the same run dir: completed, with the full commands."""
    desc = _sim_description(tmp_path, 'speculative-algorithm = "NGRAM"')
    run_dir = tmp_path / "run"
    trace = Path(__file__).resolve().parents[2] / "traces" / "mtbench_question.jsonl"
    replay = (
        f'{sys.executable} -m specproxy replay {trace} --baseline "$SPECPROXY_BASELINE_URL"'
        ' --candidate "$SPECPROXY_CANDIDATE_URL" --run-dir "$SPECPROXY_RUN_DIR"'
        " --limit 4 --concurrency 2 > /dev/null"
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["launch", str(desc), "--run-dir", str(run_dir), "--", "sh", "-c", replay])
    assert exit_info.value.code == 0
    experiment = read_experiment(run_dir)
    assert experiment["status"] == "completed"
    for side in ("baseline", "candidate"):
        launch = experiment[side]["launch"]
        assert launch["launcher"]["command"][2:4] == ["specproxy", "sim"]
        assert launch["random_seed_explicit"] is True


@pytest.mark.parametrize(
    ("env_line", "code", "status"),
    [("", 0, "PASS"), ('env = { SGLANG_SIMULATE_ACC_LEN = "2.5" }\n', 1, "FAIL")],
)
def test_check_under_launch_sees_a_variable_that_fakes_acceptance(
    tmp_path: Path, env_line: str, code: int, status: str
) -> None:
    """`launch ... -- specproxy check`: the check reads launch.json ($SPECPROXY_RUN_DIR), so it
    knows the full commands, and fails a candidate started with SGLANG_SIMULATE_ACC_LEN,
    which no server report shows."""
    desc = _sim_description(tmp_path, 'speculative-algorithm = "NGRAM"')
    desc.write_text(desc.read_text() + env_line)
    out = tmp_path / "check.json"
    check = (
        f'{sys.executable} -m specproxy check --baseline "$SPECPROXY_BASELINE_URL"'
        f' --candidate "$SPECPROXY_CANDIDATE_URL" --json > {out}'
    )
    with pytest.raises(SystemExit) as exit_info:
        main(["launch", str(desc), "--run-dir", str(tmp_path / "run"), "--", "sh", "-c", check])
    assert exit_info.value.code == code
    rows = {(c["name"], c["side"]): c for c in json.loads(out.read_text())["checks"]}
    row = rows[("acceptance_not_simulated", "candidate")]
    assert row["status"] == status
    assert ("SGLANG_SIMULATE_ACC_LEN=2.5" in row["detail"]) is (status == "FAIL")
    assert ("launch_command", "candidate") not in rows  # the record holds the full command
