"""`specproxy launch` end to end on CPU, with a stand-in for sglang.launch_server.

Real processes, real loopback HTTP: the launcher starts two stand-in servers one after
the other, records them, runs a follow-up command (here `specproxy check`), and stops
both; refused configurations, health deadlines and stubborn processes are covered.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from specproxy.cli import main
from specproxy.errors import BackendTimeout
from specproxy.launch.description import load_description
from specproxy.launch.pair import LaunchEnded, PairReady, launch_pair
from specproxy.recording.experiment import read_experiment
from tests.launch.capture_server import free_port

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-launcher-secret-1234"


def _closed(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _description(
    tmp_path: Path,
    *,
    candidate: str | None = None,
    launch: str = "",
    env: str = "",
    health_503: int = 0,
) -> tuple[Path, dict[str, int]]:
    ports = {"baseline": free_port(), "candidate": free_port()}
    spec = candidate or (
        'speculative-algorithm = "STANDALONE"\nspeculative-draft-model-path = "/models/draft"\n'
        "speculative-num-steps = 3\nspeculative-eagle-topk = 1\nspeculative-num-draft-tokens = 4"
    )
    text = f"""
name = "stand-in-pair"
validated = false
[model]
path = "/models/target"
[shared]
max-running-requests = 48
random-seed = 7
enable-metrics = true
[candidate]
{spec}
[memory]
baseline = 0.3
candidate = 0.3
[ports]
baseline = {ports["baseline"]}
candidate = {ports["candidate"]}
[declared]
gpu = "none (CPU test)"
[launch]
python = "{sys.executable}"
server_module = "tests.launch.stand_in_server"
health_timeout_s = 60
stop_timeout_s = 10
{launch}
[launch.env]
PYTHONPATH = "{REPO}"
STAND_IN_HEALTH_503 = "{health_503}"
{env}
"""
    path = tmp_path / "pair.toml"
    path.write_text(text)
    return path, ports


def _launch(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(["launch", *args])
    return int(exit_info.value.code or 0)


def test_launch_records_the_pair_and_check_passes_against_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both servers start, `specproxy check` passes against them, both are recorded and stopped."""
    monkeypatch.setenv("LAUNCH_TEST_KEY", KEY)
    monkeypatch.setenv("SPECPROXY_API_KEY", KEY)
    desc, ports = _description(tmp_path, launch='api_key_env = "LAUNCH_TEST_KEY"')
    run_dir = tmp_path / "run"
    check = [sys.executable, "-m", "specproxy", "check", "--json",
             "--baseline", f"http://127.0.0.1:{ports['baseline']}",
             "--candidate", f"http://127.0.0.1:{ports['candidate']}"]  # fmt: skip
    assert _launch([str(desc), "--run-dir", str(run_dir), "--", *check]) == 0
    experiment = read_experiment(run_dir)
    assert experiment["status"] == "not_run"
    assert experiment["baseline"]["speculation"] is False
    assert experiment["candidate"]["algorithm"] == "STANDALONE"
    assert experiment["launch_diff"]["matched"] is True
    command = experiment["candidate"]["launch"]["launcher"]["command"]
    assert command[command.index("--random-seed") + 1] == "7"
    assert command[command.index("--api-key") + 1] == "[redacted]"
    assert experiment["candidate"]["launch"]["random_seed_explicit"] is True
    launch = json.loads((run_dir / "launch.json").read_text())
    assert launch["state"] == "stopped"
    assert {s["state"] for s in launch["servers"].values()} == {"stopped"}
    assert launch["host"]["gpu"] is None or "name" in launch["host"]["gpu"]
    log = (run_dir / "logs" / "baseline.log").read_text()
    assert "api_key='[redacted]'" in log
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
    assert _closed(ports["baseline"])
    assert _closed(ports["candidate"])


def test_a_refused_candidate_is_recorded_as_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Partial manual tuning (topk without steps) exits the candidate: status rejected, exit 1."""
    partial = 'speculative-algorithm = "EAGLE"\nspeculative-eagle-topk = 4'
    desc, ports = _description(tmp_path, candidate=partial)
    run_dir = tmp_path / "run"
    assert _launch([str(desc), "--run-dir", str(run_dir)]) == 1
    assert "AssertionError" in capsys.readouterr().err
    experiment = read_experiment(run_dir)
    assert experiment["status"] == "rejected"
    assert experiment["candidate"]["algorithm"] == "EAGLE"
    assert experiment["candidate"]["speculation"] is None
    assert "assert self.speculative_num_steps is not None\nAssertionError" in experiment["error"]
    launch = json.loads((run_dir / "launch.json").read_text())
    assert launch["state"] == "rejected"
    assert launch["servers"]["candidate"]["exit_code"] == 1
    assert launch["servers"]["baseline"]["state"] == "stopped"
    assert _closed(ports["baseline"])


def test_an_unknown_algorithm_is_rejected_with_the_value_error(tmp_path: Path) -> None:
    """A ValueError at startup becomes the rejected experiment's error text."""
    desc, _ = _description(tmp_path, candidate='speculative-algorithm = "MEDUSA"')
    run_dir = tmp_path / "run"
    assert _launch([str(desc), "--run-dir", str(run_dir)]) == 1
    assert read_experiment(run_dir)["error"].endswith(
        "ValueError: Unknown speculative algorithm name: MEDUSA"
    )


def test_the_follow_up_command_sees_the_urls_and_its_status_is_returned(tmp_path: Path) -> None:
    """The command gets both URLs and the run dir in its environment; its exit status is ours."""
    desc, ports = _description(tmp_path)
    out = tmp_path / "seen.json"
    script = (
        "import json, os, sys; keys = ('SPECPROXY_BASELINE_URL', 'SPECPROXY_CANDIDATE_URL',"
        f" 'SPECPROXY_RUN_DIR'); json.dump([os.environ[k] for k in keys], open({str(out)!r}, 'w'));"
        " sys.exit(4)"
    )
    run_dir = tmp_path / "run"
    assert _launch([str(desc), "--run-dir", str(run_dir), "--", sys.executable, "-c", script]) == 4
    seen = json.loads(out.read_text())
    assert seen == [
        f"http://127.0.0.1:{ports['baseline']}",
        f"http://127.0.0.1:{ports['candidate']}",
        str(run_dir),
    ]


async def test_a_stop_request_stops_both_servers(tmp_path: Path) -> None:
    """Setting the stop event once the pair is ready ends the launch and stops both processes."""
    desc_path, ports = _description(tmp_path, health_503=2)
    stop = asyncio.Event()
    seen: list[PairReady] = []

    def ready(pair: PairReady) -> None:
        seen.append(pair)
        stop.set()

    code = await launch_pair(
        load_description(desc_path), tmp_path / "run", experiment_id="e1", on_ready=ready, stop=stop
    )
    assert code == 0
    assert seen[0].candidate_url.endswith(str(ports["candidate"]))
    launch: dict[str, Any] = json.loads((tmp_path / "run" / "launch.json").read_text())
    assert launch["state"] == "stopped"
    assert (
        launch["servers"]["baseline"]["fingerprint"]
        != launch["servers"]["candidate"]["fingerprint"]
    )
    assert _closed(ports["baseline"])
    assert _closed(ports["candidate"])


async def test_a_server_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    """A process that ignores SIGTERM is sent SIGKILL after the stop deadline."""
    desc_path, ports = _description(tmp_path, env='STAND_IN_IGNORE_TERM = "1"')
    text = desc_path.read_text().replace("stop_timeout_s = 10", "stop_timeout_s = 0.5")
    desc_path.write_text(text)
    stop = asyncio.Event()
    await launch_pair(
        load_description(desc_path),
        tmp_path / "run",
        experiment_id="e2",
        on_ready=lambda _: stop.set(),
        stop=stop,
    )
    launch = json.loads((tmp_path / "run" / "launch.json").read_text())
    assert launch["servers"]["candidate"]["exit_code"] == -9
    assert _closed(ports["candidate"])


async def test_a_server_that_never_gets_healthy_times_out(tmp_path: Path) -> None:
    """No healthy answer before the deadline: BackendTimeout, experiment aborted, server stopped."""
    desc_path, ports = _description(tmp_path, health_503=1_000_000)
    desc_path.write_text(
        desc_path.read_text().replace("health_timeout_s = 60", "health_timeout_s = 1.5")
    )
    with pytest.raises(BackendTimeout, match="baseline"):
        await launch_pair(load_description(desc_path), tmp_path / "run", experiment_id="e3")
    experiment = read_experiment(tmp_path / "run")
    assert experiment["status"] == "aborted"
    assert "did not answer 200" in experiment["error"]
    assert _closed(ports["baseline"])


async def test_an_interrupt_during_startup_aborts_cleanly(tmp_path: Path) -> None:
    """A stop request while the baseline is still starting aborts with 130 and stops it."""
    desc_path, ports = _description(tmp_path, health_503=1_000_000)
    stop = asyncio.Event()
    stop.set()
    with pytest.raises(LaunchEnded) as info:
        await launch_pair(
            load_description(desc_path), tmp_path / "run", experiment_id="e4", stop=stop
        )
    assert info.value.exit_code == 130
    assert read_experiment(tmp_path / "run")["status"] == "aborted"
    assert _closed(ports["baseline"])


def test_sigint_to_the_launcher_stops_both_servers(tmp_path: Path) -> None:
    """SIGINT to a serving `specproxy launch` stops both servers and exits 0."""
    desc, ports = _description(tmp_path)
    run_dir = tmp_path / "run"
    with subprocess.Popen(
        [sys.executable, "-m", "specproxy", "launch", str(desc), "--run-dir", str(run_dir)],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    ) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.startswith("ready;"):
                break
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert proc.returncode == 0
    launch = json.loads((run_dir / "launch.json").read_text())
    assert launch["state"] == "stopped"
    assert read_experiment(run_dir)["status"] == "not_run"
    assert _closed(ports["baseline"])
    assert _closed(ports["candidate"])


def test_a_server_dying_while_serving_stops_the_pair_with_exit_three(tmp_path: Path) -> None:
    """When a server exits while the command runs, the command is ended and launch exits 3."""
    desc, ports = _description(tmp_path)
    url = f"http://127.0.0.1:{ports['candidate']}/_stand_in/exit"
    crash = (
        "import threading, urllib.request;"
        f" urllib.request.urlopen(urllib.request.Request({url!r}, data=b''));"
        " threading.Event().wait()"  # until the launcher ends this command
    )
    run_dir = tmp_path / "run"
    assert _launch([str(desc), "--run-dir", str(run_dir), "--", sys.executable, "-c", crash]) == 3
    launch = json.loads((run_dir / "launch.json").read_text())
    assert launch["state"] == "failed"
    assert launch["servers"]["candidate"]["exit_code"] == 3
    assert _closed(ports["baseline"])


def test_a_follow_up_command_that_ignores_sigterm_is_killed(tmp_path: Path) -> None:
    """When the pair must stop, a command ignoring SIGTERM is killed after stop_timeout_s."""
    desc, ports = _description(tmp_path)
    desc.write_text(desc.read_text().replace("stop_timeout_s = 10", "stop_timeout_s = 0.5"))
    url = f"http://127.0.0.1:{ports['candidate']}/_stand_in/exit"
    stubborn = (
        "import signal, threading, urllib.request;"
        " signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        f" urllib.request.urlopen(urllib.request.Request({url!r}, data=b''));"
        " threading.Event().wait()"  # only SIGKILL ends it
    )
    run_dir = tmp_path / "run"
    assert (
        _launch([str(desc), "--run-dir", str(run_dir), "--", sys.executable, "-c", stubborn]) == 3
    )
    assert _closed(ports["baseline"])


@pytest.mark.parametrize("problem", ["python", "command", "finished-dir"])
def test_unusable_launch_inputs_exit_two(
    tmp_path: Path, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing python, a missing follow-up command or a finished run directory exit 2."""
    desc, ports = _description(tmp_path)
    run_dir = tmp_path / "run"
    args = [str(desc), "--run-dir", str(run_dir)]
    if problem == "python":
        args += ["--python", str(tmp_path / "no-such-python")]
    elif problem == "command":
        args += ["--", str(tmp_path / "no-such-command")]
    else:
        run_dir.mkdir()
        (run_dir / "experiment.json").write_text('{"status": "completed", "experiment_id": "x"}')
    assert _launch(args) == 2
    err = capsys.readouterr().err
    assert {
        "python": "cannot start the baseline",
        "command": "cannot run the command",
        "finished-dir": "new run directory",
    }[problem] in err
    assert _closed(ports["baseline"])
    assert _closed(ports["candidate"])
