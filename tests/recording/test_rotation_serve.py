"""`specproxy serve --rotate-mb` over real HTTP: the records roll, and the report reads the
rolled set as one run."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp

from specproxy.report.build import build_report
from specproxy.report.load import load_run_dir, record_files
from specproxy.sim.server import serve_in_background
from specproxy.testing.harness import chat
from tests.proxy.test_serve_cli import FAST, _serve

REQUESTS = 8


async def test_serve_rolls_records_and_the_report_reads_them_all(tmp_path: Path) -> None:
    """Mirrored through a proxy that rolls at 3 kB, eight streamed requests leave several
    records files, and the report pairs all eight."""
    run_dir = tmp_path / "run"
    async with (
        serve_in_background(FAST) as b,
        serve_in_background(FAST) as c,
        _serve(
            "--baseline",
            b,
            "--candidate",
            c,
            "--mode",
            "mirror",
            "--run-dir",
            str(run_dir),
            "--rotate-mb",
            "0.003",
        ) as (proc, url),
        aiohttp.ClientSession() as session,
    ):
        for i in range(REQUESTS):
            body = chat(f"Question {i} about the sea.", max_tokens=40, stream=True)
            async with session.post(url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                await resp.read()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    files = record_files(run_dir)
    assert len(files) >= 3
    assert files[0].name == "requests-000001.jsonl" and files[-1].name == "requests.jsonl"
    report = build_report([load_run_dir(run_dir)])
    assert report.pairing.pairs == REQUESTS
    assert sum(s.requests for s in report.sides) == 2 * REQUESTS
