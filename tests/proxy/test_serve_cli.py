"""`specproxy serve` as a real process: config files, SIGTERM drain, and a killed proxy's records."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson

from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.testing.harness import chat, records

SLOW = SimConfig(decode_step_ms=10.0, prefill_us_per_token=1.0)
FAST = SimConfig(decode_step_ms=0.2, prefill_us_per_token=1.0)
READY = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")
_ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


@contextlib.asynccontextmanager
async def _serve(*args: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """`python -m specproxy serve ARGS`; yields the process and its URL once it listens."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specproxy",
        "serve",
        "--port",
        "0",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_ENV,
    )
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(30):
            while True:
                line = (await proc.stderr.readline()).decode()
                assert line, "the proxy exited before listening"
                if match := READY.search(line):
                    break
        yield proc, match.group(1)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_sigterm_drains_in_flight_and_completes_the_experiment(tmp_path: Path) -> None:
    """SIGTERM mid-stream: the stream still completes, records are written, experiment.json completed."""
    config = tmp_path / "proxy.toml"
    config.write_text('[serve]\nmode = "mirror"\ndrain-s = 20\n', encoding="utf-8")
    run_dir = tmp_path / "run"
    async with (
        serve_in_background(SLOW) as b,
        serve_in_background(FAST) as c,
        _serve(
            "--config",
            str(config),
            "--baseline",
            b,
            "--candidate",
            c,
            "--run-dir",
            str(run_dir),
        ) as (proc, url),
        aiohttp.ClientSession() as session,
    ):
        body = chat(max_tokens=100, stream=True)
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            first = await resp.content.readuntil(b"\n\n")
            proc.send_signal(signal.SIGTERM)
            rest = await resp.read()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    assert first.startswith(b"data: ")
    assert rest.endswith(b"data: [DONE]\n\n")
    found = records(run_dir)
    assert sorted((r["side"], r["error_kind"]) for r in found) == [
        ("baseline", None),
        ("candidate", None),
    ]
    experiment = orjson.loads((run_dir / "experiment.json").read_bytes())
    assert experiment["status"] == "completed"
    assert experiment["mode"] == "mirror"
    assert experiment["baseline"]["fingerprint"] and experiment["candidate"]["fingerprint"]
    assert experiment["summary"]["baseline"]["completed"] == 1
    for side in ("baseline", "candidate"):
        assert (run_dir / "histograms" / f"{side}.hlog").read_text().strip()
        assert (run_dir / "snapshots" / f"{side}-after.json").exists()
    assert "Verdict" in (run_dir / "report.txt").read_text()
    assert (run_dir / "report.html").read_text().startswith("<!DOCTYPE html>")


async def test_killed_proxy_leaves_completed_records_readable(tmp_path: Path) -> None:
    """After SIGKILL every completed request is in requests.jsonl, and the report rebuilt
    from them says running -> aborted (unclean)."""
    run_dir = tmp_path / "run"
    async with (
        serve_in_background(FAST) as b,
        serve_in_background(FAST) as c,
        _serve(
            "--baseline", b, "--candidate", c, "--mode", "mirror", "--run-dir", str(run_dir)
        ) as (proc, url),
        aiohttp.ClientSession() as session,
    ):
        for i in range(3):
            async with session.post(url + "/v1/chat/completions", json=chat(f"q{i}")) as resp:
                assert resp.status == 200
        async with asyncio.timeout(10):
            while True:  # counts are updated in the same loop step as the record write
                async with session.get(url + "/_specproxy/status") as resp:
                    sides = (await resp.json())["sides"]
                if sides["baseline"]["completed"] == sides["candidate"]["completed"] == 3:
                    break
        proc.kill()
        await proc.wait()
    found = records(run_dir)
    assert len(found) == 6
    experiment = orjson.loads((run_dir / "experiment.json").read_bytes())
    assert experiment["status"] == "running"
    report = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specproxy", "report", str(run_dir), "--format", "text",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_ENV,
    )  # fmt: skip
    out, err = await asyncio.wait_for(report.communicate(), 60)
    assert report.returncode == 0, err.decode()
    assert "experiment.json: status running -> aborted (unclean)" in " ".join(out.decode().split())


async def test_unknown_config_key_exits_2_naming_it(tmp_path: Path) -> None:
    """A config file with an unknown key stops `serve` with exit status 2 and the key's name."""
    config = tmp_path / "bad.toml"
    config.write_text('baseline = "http://127.0.0.1:1"\nshadow_limit = 3\n', encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specproxy",
        "serve",
        "--config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=_ENV,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "unknown key 'shadow_limit'" in err.decode()
    assert "bad.toml" in err.decode()
