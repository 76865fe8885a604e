"""What a new user trips on first (issue 33, items 11-13 and 15), over loopback with the simulator."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest

from specproxy.cli import main
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import TRACES, fast_sim

MTBENCH = str(TRACES / "mtbench_question.jsonl")


async def _specproxy(*args: str, timeout_s: float = 180) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specproxy",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _ours(err: str) -> list[str]:
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.startswith("specproxy")]


@pytest.mark.parametrize("command", ["replay", "serve", "sweep", "check"])
async def test_a_v1_url_fails_fast_with_the_root_to_give(command: str, tmp_path: Path) -> None:
    """`--baseline http://host:port/v1` (the SDK's base_url) is refused before anything is
    sent, by every command, with the URL to give instead; nothing reaches the server."""
    async with serve_in_background(fast_sim()) as root:
        args = {
            "replay": ["replay", MTBENCH, "--run-dir", str(tmp_path / "run")],
            "serve": ["serve", "--port", "0", "--run-dir", str(tmp_path / "run")],
            "sweep": ["sweep", MTBENCH, "--concurrency", "1,2", "--run-dir", str(tmp_path / "run")],
            "check": ["check"],
        }[command]
        code, _out, err = await _specproxy(
            *args, "--baseline", root + "/v1", "--candidate", root, timeout_s=60
        )
    assert code == 2, err
    (line,) = _ours(err)
    assert "without '/v1'" in line and f"give {root!r}" in line, line
    assert not (tmp_path / "run" / "requests.jsonl").exists()


def test_help_says_the_url_is_the_root(capsys: pytest.CaptureFixture[str]) -> None:
    """Each command's --help says the server URL is its root, without /v1."""
    for command in ("replay", "serve", "sweep", "check"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "Baseline server URL" in text and "without /v1" in text, command


async def test_a_run_where_every_request_failed_exits_1_naming_it(tmp_path: Path) -> None:
    """A server behind a path it does not serve answers 404 to every request: the run is
    written (status completed), but the command exits 1 with a line that names the side,
    the error class and the likely cause, not a silent 0."""
    async with serve_in_background(fast_sim()) as root:
        code, _out, err = await _specproxy(
            "replay",
            MTBENCH,
            *("--baseline", root + "/prefix", "--route", "chat", "--output-len", "4"),
            *("--rate", "200", "--max-requests", "5", "--run-dir", str(tmp_path / "run")),
        )
    assert code == 1, err
    lines = [line for line in _ours(err) if "every request" in line]
    assert len(lines) == 1, err
    assert "every request to the baseline failed (http_4xx 5)" in lines[0]
    assert "no /v1" in lines[0] and str(tmp_path / "run") in lines[0]
    experiment = json.loads((tmp_path / "run" / "experiment.json").read_text())
    assert experiment["status"] == "completed"
    assert len((tmp_path / "run" / "requests.jsonl").read_text().splitlines()) == 5


async def _serve_until_listening(*args: str) -> tuple[int | None, str]:
    """`specproxy serve ARGS --port 0`: (exit status, stderr) when it exits on its own, or
    (None, stderr so far) once it says it listens (then it is stopped)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specproxy", "serve", "--port", "0", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    seen: list[str] = []
    try:
        async with asyncio.timeout(60):
            while line := (await proc.stderr.readline()).decode():
                seen.append(line)
                if "listening on" in line:
                    return None, "".join(seen)
        return await proc.wait(), "".join(seen)
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


async def test_serve_with_an_upstream_down_exits_3_before_listening(tmp_path: Path) -> None:
    """README: exit 3 when a backend cannot be reached at the start. `serve` checks both
    servers before it listens and names the one that is down; with
    --no-require-upstreams it still serves (a late upstream is allowed on request)."""
    async with serve_in_background(fast_sim()) as up:
        down = "http://127.0.0.1:1"
        base = ("--baseline", up, "--candidate", down)
        code, err = await _serve_until_listening(*base, "--run-dir", str(tmp_path / "a"))
        assert code == 3, err
        (line,) = _ours(err)
        assert "not started: the candidate server could not be reached" in line
        assert "http://127.0.0.1:1" in line and "--no-require-upstreams" in line
        assert "listening" not in err
        code, err = await _serve_until_listening(
            *base, "--no-require-upstreams", "--run-dir", str(tmp_path / "b")
        )
        assert code is None, err
        code, err = await _serve_until_listening(
            "--baseline", up, "--candidate", up, "--run-dir", str(tmp_path / "c")
        )
        assert code is None, err


async def test_a_long_schedule_is_announced_before_the_first_send(tmp_path: Path) -> None:
    """8 requests at a constant 0.01 req/s take 11:40 by the schedule: the replay says so,
    as a warning, before it sends; Ctrl-C then stops it with the partial results."""
    async with serve_in_background(fast_sim()) as root:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "specproxy", "replay", MTBENCH, "--baseline", root,
            "--route", "chat", "--output-len", "4", "--rate", "0.01", "--arrival", "constant",
            "--max-requests", "8", "--run-dir", str(tmp_path / "run"), "--drain-s", "5",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        async with asyncio.timeout(60):
            first = (await proc.stderr.readline()).decode()
        proc.send_signal(signal.SIGINT)
        _out, rest = await asyncio.wait_for(proc.communicate(), 60)
    assert first.strip() == (
        "specproxy replay: warning: the schedule sends 8 requests over 11:40 (open loop),"
        " longer than 10:00; --max-requests, --duration, --speed or --max-idle-s shorten it"
    ), first + rest.decode()
    assert proc.returncode == 130
    records = (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    assert len(records) <= 1  # at most the request due at 0 s
