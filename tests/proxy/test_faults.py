"""Faults and bad input (docs/contract.md, Faults and bad input): 502, 504, 400, 413, upstream errors, disconnects, truncation."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import orjson
import pytest

from specproxy.sim.config import SimConfig
from specproxy.sim.engine import SimJob
from specproxy.sim.server import RunningSim, start
from specproxy.testing.harness import GateServer, chat, closed_port_url, records, rig

FAST = SimConfig(decode_step_ms=0.2, prefill_us_per_token=1.0)


def _error(data: bytes) -> dict[str, object]:
    body = orjson.loads(data)
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, object] = body["error"]
    return error


async def test_unreachable_primary_is_502_and_the_proxy_keeps_serving(tmp_path: Path) -> None:
    """A primary that refuses connections gives an OpenAI-shaped 502 and a connect record."""
    async with rig(tmp_path, baseline=closed_port_url(), mode="passthrough") as r:
        status, data = await r.post(chat(stream=True))
        status_again, _ = await r.post(chat())
        async with r.session.get(r.url + "/health") as resp:
            health_status = resp.status
            health = await resp.json()
    assert status == status_again == 502
    error = _error(data)
    assert error["code"] == "upstream_unreachable"
    assert "baseline server could not be reached" in str(error["message"])
    assert [rec["error_kind"] for rec in records(tmp_path)] == ["connect", "connect"]
    assert health_status == 503
    assert health["backends"]["baseline"]["healthy"] is False


async def test_primary_silent_before_headers_is_504(tmp_path: Path) -> None:
    """A primary that sends no headers before the deadline gives 504 and a timeout record."""
    gate = GateServer(hold=True)
    options = {"mode": "passthrough", "first_byte_timeout_s": 0.2}
    async with rig(tmp_path, baseline=gate, **options) as r:
        status, data = await r.post(chat(stream=True))
    assert status == 504
    assert _error(data)["code"] == "upstream_timeout"
    (record,) = records(tmp_path)
    assert record["error_kind"] == "timeout"


async def test_malformed_json_is_400_naming_the_position(tmp_path: Path) -> None:
    """Invalid JSON is refused with 400 naming the problem; nothing is sent upstream."""
    gate = GateServer(hold=False)
    async with rig(tmp_path, baseline=gate, mode="passthrough") as r:
        async with r.session.post(
            r.url + "/v1/chat/completions",
            data=b'{"model": "m", "messages": [}',
            headers={"Content-Type": "application/json"},
        ) as resp:
            status, data = resp.status, await resp.read()
        async with r.session.post(r.url + "/generate", data=b"[1]") as resp:
            not_object = resp.status, await resp.read()
    assert status == 400
    error = _error(data)
    assert str(error["message"]).startswith("request body is not valid JSON: ")
    assert "at position 28" in str(error["message"])
    assert not_object[0] == 400
    assert b"must be a JSON object, got list" in not_object[1]
    assert gate.seen == []
    assert records(tmp_path) == []


async def _chunked(data: bytes) -> AsyncIterator[bytes]:
    for i in range(0, len(data), 512):
        yield data[i : i + 512]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_body_over_the_limit_is_413(tmp_path: Path, chunked: bool) -> None:
    """A body over max_body_bytes is refused with 413, whether or not it declares its length."""
    gate = GateServer(hold=False)
    big = orjson.dumps(chat("x" * 5000))
    async with rig(tmp_path, baseline=gate, mode="passthrough", max_body_bytes=4096) as r:
        payload = _chunked(big) if chunked else big
        async with r.session.post(r.url + "/v1/chat/completions", data=payload) as resp:
            status, data = resp.status, await resp.read()
        ok, _ = await r.post(chat("small"))
    assert status == 413
    assert _error(data)["code"] == "body_too_large"
    assert ok == 200
    assert len(gate.seen) == 1


async def test_upstream_errors_pass_through_unchanged(tmp_path: Path) -> None:
    """The primary's own error status and body reach the client byte for byte."""
    bad = {"model": "m", "messages": "not a list", "max_tokens": 4}
    failing = SimConfig(fail_rate=1.0, decode_step_ms=0.2)
    async with rig(tmp_path, baseline=FAST, candidate=failing, mode="split", split=0.0) as r:
        assert r.baseline is not None
        async with r.session.post(r.baseline + "/v1/chat/completions", json=bad) as resp:
            direct = resp.status, resp.headers["Content-Type"], await resp.read()
        async with r.session.post(r.url + "/v1/chat/completions", json=bad) as resp:
            proxied = resp.status, resp.headers["Content-Type"], await resp.read()
        status_500, body_500 = await r.post(chat(), **{"x-specproxy-side": "candidate"})
    assert direct[0] == 400
    assert proxied == direct
    assert status_500 == 500
    assert b"error" in body_500
    kinds = [(rec["side"], rec["error_kind"], rec["status"]) for rec in records(tmp_path)]
    assert kinds == [("baseline", "http_4xx", 400), ("candidate", "http_5xx", 500)]


@asynccontextmanager
async def _spied_sim(config: SimConfig) -> AsyncIterator[tuple[str, list[SimJob]]]:
    """A simulator whose engine jobs the test can watch (to see it abort a request)."""
    running: RunningSim = await start(dataclasses.replace(config, host="127.0.0.1", port=0))
    jobs: list[SimJob] = []
    original = running.server.new_job

    def new_job(*args: object, **kwargs: object) -> SimJob:
        job = original(*args, **kwargs)  # type: ignore[arg-type]
        jobs.append(job)
        return job

    running.server.new_job = new_job  # type: ignore[method-assign]
    try:
        yield running.url, jobs
    finally:
        await running.stop()


async def _wait_aborted(job: SimJob) -> None:
    while job.finish_type != "abort":
        job.changed.clear()
        await job.changed.wait()


async def test_client_disconnect_cancels_primary_but_not_shadow(tmp_path: Path) -> None:
    """A client leaving mid-stream aborts the primary upstream (client_cancelled); the shadow finishes."""
    slow = SimConfig(decode_step_ms=20.0, prefill_us_per_token=1.0)
    long_chat = chat("a long story", max_tokens=300, stream=True)
    async with (
        _spied_sim(slow) as (primary, jobs),
        rig(tmp_path, baseline=primary, candidate=FAST, mode="mirror") as r,
    ):
        resp = await r.session.post(r.url + "/v1/chat/completions", json=long_chat)
        await resp.content.readuntil(b"\n\n")
        resp.close()  # the client goes away mid-stream
        async with asyncio.timeout(10):
            await _wait_aborted(jobs[0])
    assert jobs[0].produced < 300
    by_side = {rec["side"]: rec for rec in records(tmp_path)}
    assert by_side["baseline"]["error_kind"] == "client_cancelled"
    assert by_side["candidate"]["error_kind"] is None
    assert by_side["candidate"]["completion_tokens"] == 300


async def test_truncated_primary_stream_is_truncated_for_the_client(tmp_path: Path) -> None:
    """A primary stream cut off without [DONE] is cut off for the client too, not ended cleanly."""
    cut = SimConfig(truncate_rate=1.0, decode_step_ms=0.2, prefill_us_per_token=1.0)
    async with rig(tmp_path, baseline=cut, mode="passthrough") as r:
        with pytest.raises(aiohttp.ClientPayloadError):
            await r.post(chat(max_tokens=40, stream=True))
        ok_status, _ = await r.post(chat())
    assert ok_status == 200
    kinds = [rec["error_kind"] for rec in records(tmp_path)]
    assert kinds[0] == "stream_truncated"


async def test_a_stream_past_its_total_deadline_is_cut_and_recorded_as_a_timeout(
    tmp_path: Path,
) -> None:
    """A primary that keeps streaming, each event well within the idle deadline, past the
    total deadline: the client's stream is cut, and the record says which deadline it was."""
    slow = SimConfig(decode_step_ms=40.0, prefill_us_per_token=1.0)
    options = {"mode": "passthrough", "total_timeout_s": 0.5, "idle_timeout_s": 30.0}
    async with rig(tmp_path, baseline=slow, **options) as r:
        with pytest.raises(aiohttp.ClientPayloadError):
            await r.post(chat(max_tokens=200, stream=True))  # about 8 s of tokens
    (record,) = records(tmp_path)
    assert record["error_kind"] == "timeout"
    assert record["error_message"] == "request exceeded its total deadline"
    assert record["chunk_count"] > 0  # what came before the cut is kept
