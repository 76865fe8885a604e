"""`specproxy serve --workers 2` as real processes: one port, one run, every worker counted.

Requests go over fresh connections, which the kernel spreads over the workers
(``SO_REUSEPORT`` hashes each connection's addresses): with 24 or more of them, the
chance that one worker gets none is below 2^-23, so "both shards hold records" is a
property of the design, not of timing.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from specproxy.core.protocol.prometheus import parse_exposition
from specproxy.core.records.model import Role
from specproxy.report.load import load_run_dir
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.testing.harness import chat
from tests.proxy.test_serve_cli import _serve

FAST = SimConfig(decode_step_ms=0.2, prefill_us_per_token=1.0)
SLOW = SimConfig(decode_step_ms=10.0, prefill_us_per_token=1.0)
SHARDS = ("requests.w0.jsonl", "requests.w1.jsonl")


def _fresh() -> aiohttp.ClientSession:
    """A client that opens a new connection per request (so requests spread over workers)."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True))


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


async def _status(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url + "/_specproxy/status") as resp:
        assert resp.status == 200
        doc: dict[str, Any] = await resp.json()
        return doc


async def _until_completed(session: aiohttp.ClientSession, url: str, want: int) -> None:
    """Poll the status until both sides count ``want`` completed requests (the shadows end
    after their clients got the primary's answer)."""
    async with asyncio.timeout(20):
        while True:
            sides = (await _status(session, url))["sides"]
            if sides["baseline"]["completed"] == sides["candidate"]["completed"] == want:
                return
            await asyncio.sleep(0.05)


async def test_two_workers_share_the_port_and_one_run_counts_them_all(tmp_path: Path) -> None:
    """Mirror mode with two workers: every worker writes its own shard; the status and the
    metrics answered by either worker count every request; experiment.json's summary and
    the report count every record of both shards."""
    run_dir = tmp_path / "run"
    sent = 32
    async with (
        serve_in_background(FAST) as b,
        serve_in_background(FAST) as c,
        _serve(
            "--workers", "2", "--baseline", b, "--candidate", c, "--mode", "mirror",
            "--run-dir", str(run_dir),
        ) as (proc, url),
        _fresh() as session,
    ):  # fmt: skip
        for i in range(sent):
            body = chat(f"q{i}", stream=True)
            async with session.post(url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                assert (await resp.read()).endswith(b"data: [DONE]\n\n")
        await _until_completed(session, url, sent)
        answered_by: dict[int, dict[str, Any]] = {}
        for _ in range(200):  # fresh connections reach both workers
            doc = await _status(session, url)
            answered_by.setdefault(doc["worker"], doc)
            if len(answered_by) == 2:
                break
        scrapes = []
        for _ in range(8):
            async with session.get(url + "/_specproxy/metrics") as resp:
                scrapes.append(parse_exposition(await resp.text()))
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    assert sorted(answered_by) == [0, 1]
    assert answered_by[0]["pid"] != answered_by[1]["pid"]
    for doc in answered_by.values():
        assert doc["workers"] == 2
        assert doc["sides"]["baseline"]["completed"] == sent
        assert doc["sides"]["candidate"]["in_flight"] == 0
    for exposition in scrapes:
        assert exposition.total("specproxy_requests_total", side="baseline", outcome="ok") == sent
        assert exposition.total("specproxy_ttft_seconds_count", side="candidate") == sent
    shards = [_lines(run_dir / name) for name in SHARDS]
    assert all(shards), "each worker served some requests"
    assert sum(len(s) for s in shards) == 2 * sent  # one record per request per side
    assert not (run_dir / "requests.jsonl").exists()
    for shard in shards:  # a pair's two records are written by the worker that served it
        pairs: dict[str, set[str]] = {}
        for rec in shard:
            pairs.setdefault(rec["pair_id"], set()).add(rec["side"])
        assert all(sides == {"baseline", "candidate"} for sides in pairs.values())
    for worker in ("w0", "w1"):
        for side in ("baseline", "candidate"):
            assert (run_dir / "histograms" / f"{side}.{worker}.hlog").read_text().strip()
    experiment = orjson.loads((run_dir / "experiment.json").read_bytes())
    assert experiment["status"] == "completed"
    assert experiment["summary"]["baseline"]["completed"] == sent
    assert experiment["summary"]["candidate"]["completed"] == sent
    assert experiment["baseline"]["fingerprint"] and experiment["candidate"]["fingerprint"]
    for side in ("baseline", "candidate"):
        assert (run_dir / "snapshots" / f"{side}-before.json").exists()
        assert (run_dir / "snapshots" / f"{side}-after.json").exists()
    data = load_run_dir(run_dir)
    assert len(data.columns.side) == 2 * sent
    assert data.histograms[(Role.BASELINE, "ttft_us")].count == sent
    assert data.histograms[(Role.CANDIDATE, "e2e_us")].count == sent
    itl = data.histograms[(Role.BASELINE, "itl_us")].count  # the workers' logs, merged
    assert itl > sent
    assert all(e.total("specproxy_itl_seconds_count", side="baseline") == itl for e in scrapes)
    assert f"0 of {sent} (0.0%)" in (run_dir / "report.txt").read_text()  # serve's report


async def test_sigterm_drains_the_streams_in_flight_on_every_worker(tmp_path: Path) -> None:
    """SIGTERM to the parent mid-stream: every stream, whichever worker holds it, completes;
    each is recorded once and the parent exits 0 after its workers."""
    run_dir = tmp_path / "run"
    streams = 24
    async with (
        serve_in_background(SLOW) as b,
        _serve(
            "--workers", "2", "--baseline", b, "--mode", "passthrough", "--drain-s", "30",
            "--run-dir", str(run_dir),
        ) as (proc, url),
        _fresh() as session,
    ):  # fmt: skip
        body = chat(max_tokens=200, stream=True)
        post = url + "/v1/chat/completions"
        responses = await asyncio.gather(*(session.post(post, json=body) for _ in range(streams)))
        firsts = [await r.content.readuntil(b"\n\n") for r in responses]
        proc.send_signal(signal.SIGTERM)
        rests = [await r.read() for r in responses]
        for r in responses:
            r.release()
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    assert all(f.startswith(b"data: ") for f in firsts)
    assert all(rest.endswith(b"data: [DONE]\n\n") for rest in rests)
    shards = [_lines(run_dir / name) for name in SHARDS]
    assert all(shards), "both workers held streams at SIGTERM"
    found = [rec for shard in shards for rec in shard]
    assert len(found) == streams
    assert {rec["error_kind"] for rec in found} == {None}
    experiment = orjson.loads((run_dir / "experiment.json").read_bytes())
    assert experiment["status"] == "completed"
    assert experiment["summary"]["baseline"]["completed"] == streams


async def test_a_worker_that_dies_is_reported_and_the_run_aborted(tmp_path: Path) -> None:
    """SIGKILL to one worker while serving: the parent logs it, stops the other, marks the
    run aborted naming the worker, and exits 1; the records written so far stay."""
    run_dir = tmp_path / "run"
    async with (
        serve_in_background(FAST) as b,
        _serve(
            "--workers", "2", "--baseline", b, "--mode", "passthrough", "--run-dir", str(run_dir)
        ) as (proc, url),
        _fresh() as session,
    ):
        async with session.post(url + "/v1/chat/completions", json=chat("q")) as resp:
            assert resp.status == 200
        async with asyncio.timeout(20):
            while (doc := await _status(session, url))["sides"]["baseline"]["completed"] != 1:
                await asyncio.sleep(0.05)
        os.kill(doc["pid"], signal.SIGKILL)
        assert await asyncio.wait_for(proc.wait(), 60) == 1
        assert proc.stderr is not None
        err = (await proc.stderr.read()).decode()
    assert "worker_died" in err
    experiment = orjson.loads((run_dir / "experiment.json").read_bytes())
    assert experiment["status"] == "aborted"
    assert f"worker {doc['worker']} (pid {doc['pid']}) exited with code -9" in experiment["error"]
    assert sum(len(_lines(run_dir / name)) for name in SHARDS if (run_dir / name).exists()) == 1


async def test_a_port_taken_by_another_program_aborts_the_run(tmp_path: Path) -> None:
    """The port is held by a socket without ``SO_REUSEPORT``: no worker starts, the run is
    marked aborted with the reason, and ``serve`` exits 2."""
    import socket
    import sys

    run_dir = tmp_path / "run"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "specproxy", "serve", "--workers", "2", "--mode",
            "passthrough", "--baseline", "http://127.0.0.1:9", "--port", str(port),
            "--no-require-upstreams",
            "--run-dir", str(run_dir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in err.decode()
    experiment = orjson.loads((run_dir / "experiment.json").read_bytes())
    assert experiment["status"] == "aborted"
    assert experiment["error"].startswith(f"cannot listen on 127.0.0.1:{port}")


async def test_record_with_two_workers_gives_one_trace_in_arrival_order(tmp_path: Path) -> None:
    """``--record --workers 2``: each worker writes a trace shard on the run's one clock; the
    parent merges them into ``trace.jsonl`` (one line per request, sorted by ``t``) and
    removes the shards; ``specproxy replay`` reads the result."""
    run_dir = tmp_path / "run"
    sent = 24
    async with (
        serve_in_background(FAST) as b,
        _serve(
            "--workers", "2", "--baseline", b, "--mode", "passthrough", "--record",
            "--run-dir", str(run_dir),
        ) as (proc, url),
        _fresh() as session,
    ):  # fmt: skip
        for i in range(sent):
            body = chat(f"q{i}", stream=i % 2 == 0)
            async with session.post(url + "/v1/chat/completions", json=body) as resp:
                assert resp.status == 200
                await resp.read()
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 60) == 0
    shards = [_lines(run_dir / name) for name in SHARDS]
    assert all(shards), "each worker served some requests"
    assert not list(run_dir.glob("trace.w*.jsonl"))
    lines = _lines(run_dir / "trace.jsonl")
    assert len(lines) == sent
    times = [line["t"] for line in lines]
    assert times == sorted(times) and times[0] >= 0
    # The requests went one after another, alternating streaming and not: on one clock,
    # arrival order is send order (worker clocks of their own would interleave them wrongly).
    assert [line["x_stream"] for line in lines] == [i % 2 == 0 for i in range(sent)]
    assert all(line["input_tokens"] > 0 and line["output_tokens"] > 0 for line in lines)
