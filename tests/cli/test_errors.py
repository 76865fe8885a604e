"""Common command-line mistakes end in one line naming the problem and the documented status."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specproxy.cli import main

TRACE = str(Path(__file__).parents[2] / "specproxy" / "data" / "demo_mtbench_question.jsonl")


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    code = exc.value.code
    return code if isinstance(code, int) else 1


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--baseline", "127.0.0.1:30000", "--candidate", "http://127.0.0.1:1"],
        ["replay", TRACE, "--baseline", "127.0.0.1:30000", "--candidate", "http://127.0.0.1:1"],
        ["replay", TRACE, "--via", "127.0.0.1:30000"],
        ["check", "--baseline", "127.0.0.1:30000", "--candidate", "http://127.0.0.1:1"],
    ],
)
def test_url_without_scheme_is_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """A server URL without http:// is a usage error (2) whose one line quotes the URL."""
    assert _run(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("specproxy: ")
    assert "'127.0.0.1:30000'" in line and "http://" in line


def test_missing_trace_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A trace path that does not exist is a usage error naming the path, not a traceback."""
    missing = tmp_path / "nope.jsonl"
    assert _run(["replay", str(missing), "--baseline", "http://127.0.0.1:1"]) == 2
    assert "nope.jsonl" in _one_line(capsys.readouterr().err)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_serve_on_busy_port(tmp_path: Path, busy_port: int) -> None:
    """`serve` on a port in use exits 2 with one line, and its run directory says aborted."""
    run_dir = tmp_path / "run"
    argv = ["serve", "--baseline", "http://127.0.0.1:1", "--candidate", "http://127.0.0.1:2"]
    argv.append("--no-require-upstreams")  # the port is what is tested, not the servers
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "specproxy",
            *argv,
            "--port",
            str(busy_port),
            "--run-dir",
            str(run_dir),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    ours = [line for line in result.stderr.splitlines() if line.startswith("specproxy:")]
    assert len(ours) == 1
    assert f"cannot listen on 127.0.0.1:{busy_port}" in ours[0]
    experiment = json.loads((run_dir / "experiment.json").read_text())
    assert experiment["status"] == "aborted"
    assert "cannot listen" in experiment["error"]
