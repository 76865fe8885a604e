"""Stopping the proxy: SIGTERM's drain fits in ``drain_s`` (a kill -9 is ``tests/proxy/test_serve_cli.py``'s)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import aiohttp
import orjson
import pytest

from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.server import run_proxy
from specproxy.testing.harness import chat, proxy, records, records_when
from tests.faults.upstream import FAULT_HEADER, FaultServer

DRAIN_S = 2.0


async def _stop_with_requests_held(
    tmp_path: Path, mode: str
) -> tuple[float, list[dict[str, object]]]:
    """Proxy in ``mode`` with every upstream holding its answer; seconds from stop to return, records."""
    base, cand = FaultServer("baseline", default="never"), FaultServer("candidate", default="never")
    async with base.running() as b, cand.running() as c, aiohttp.ClientSession() as session:
        config = ProxyConfig(
            host="127.0.0.1",
            port=0,
            run_dir=tmp_path,
            baseline=b,
            candidate=c,
            mode=mode,
            drain_s=DRAIN_S,
        )
        stop = asyncio.Event()
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        proxy = asyncio.get_running_loop().create_task(
            run_proxy(config, stop=stop, on_ready=lambda url, _rd: ready.set_result(url))
        )
        url = await ready
        sent = [
            asyncio.get_running_loop().create_task(
                session.post(url + "/v1/chat/completions", json=chat(stream=s))
            )
            for s in (True, False)
        ]
        while len(base.faults_seen) + len(cand.faults_seen) < (4 if mode == "mirror" else 2):
            await asyncio.sleep(0.01)  # polling for arrival, not timing anything
        t0 = time.monotonic()
        stop.set()
        run_dir = await proxy
        elapsed = time.monotonic() - t0
        for task in sent:
            with contextlib.suppress(aiohttp.ClientError):  # cut at shutdown: connection closed
                (await task).release()
    return elapsed, records(run_dir)


@pytest.mark.parametrize("mode", ["passthrough", "mirror"])
async def test_shutdown_fits_in_drain_s_and_cut_requests_are_aborted(
    tmp_path: Path, mode: str
) -> None:
    """Held requests are cut after drain_s (not twice it) and recorded as aborted, one record per side."""
    elapsed, found = await _stop_with_requests_held(tmp_path, mode)
    assert DRAIN_S <= elapsed < 2 * DRAIN_S  # before the fix: drain_s for handlers, then again
    assert {r["error_kind"] for r in found} == {"aborted"}
    sides = sorted(str(r["side"]) for r in found)
    assert sides == (["baseline"] * 2 + ["candidate"] * 2 if mode == "mirror" else ["baseline"] * 2)
    assert len({(r["request_id"], r["side"]) for r in found}) == len(found)
    experiment = orjson.loads((tmp_path / "experiment.json").read_bytes())
    assert experiment["status"] == "completed"


async def test_shadow_outliving_its_client_is_labelled(tmp_path: Path) -> None:
    """Mirror mode: a client that leaves cancels the primary; the shadow finishes and says so."""
    base, cand = FaultServer("baseline"), FaultServer("candidate", default="slow=0.5")
    async with (
        base.running() as b,
        cand.running() as c,
        aiohttp.ClientSession() as session,
        proxy(tmp_path, baseline=b, candidate=c, mode="mirror") as url,
    ):
        headers = {FAULT_HEADER: "stall@baseline"}
        async with session.post(
            url + "/v1/chat/completions", json=chat(stream=True), headers=headers
        ) as resp:
            await resp.content.readuntil(b"\n\n")
        found = await records_when(tmp_path, 2)  # the client has gone: both records
    by_side = {r["side"]: r for r in found}
    assert by_side["baseline"]["error_kind"] == "client_cancelled"
    assert by_side["candidate"]["error_kind"] is None
    assert by_side["candidate"]["labels"] == {"primary": "client_cancelled"}
