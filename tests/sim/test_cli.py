"""`specproxy sim` runs one server until SIGTERM and turns bad options into exit status 2."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.sim.helpers import get


async def test_sim_command_serves_until_sigterm() -> None:
    """The command prints one line ending with its URL, serves SGLang routes, exits 0 on SIGTERM."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specproxy", "sim", "--port", "0", "--algorithm", "nextn",
        "--decode-step-ms", "1", "--api-key", "k",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode().strip()
        url = line.rsplit(" ", 1)[1]
        assert url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as session:
            assert (await get(session, url + "/health"))[0] == 200
            status, raw = await get(
                session, url + "/server_info", headers={"Authorization": "Bearer k"}
            )
        info = json.loads(raw)
        assert status == 200
        assert info["speculative_algorithm"] == "EAGLE"
        assert info["port"] == int(url.rsplit(":", 1)[1])
    finally:
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 30)
    assert code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--algorithm", "MEDUSA"], "MEDUSA"),
        (["--algorithm", "EAGLE3"], "speculative_draft_model_path"),
        (["--accept-prob", "2"], "accept_prob"),
        (["--per-token-us", "-1"], "per_token_us"),
        (["--draft-step-ms", "-0.5"], "draft_step_ms"),
    ],
)
def test_bad_options_exit_with_status_2(args: list[str], message: str) -> None:
    """Options SGLang or the simulator refuses end the command with exit status 2 and say why."""
    result = subprocess.run(
        [sys.executable, "-m", "specproxy", "sim", "--port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert message in result.stderr


def test_unknown_config_file_keys_are_refused(tmp_path: Path) -> None:
    """A [sim] table with an unknown key is refused, naming the key and the file."""
    config = tmp_path / "sim.toml"
    config.write_text('[sim]\nspeculative-algorithm = "EAGLE"\nwarp-speed = 9\n')
    result = subprocess.run(
        [sys.executable, "-m", "specproxy", "sim", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "warp-speed" in result.stderr
    assert "sim.toml" in result.stderr
