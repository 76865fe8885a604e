"""Shadow copies: bounded, dropped and counted when full, and never in the client's way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from specproxy.sim.config import SimConfig
from specproxy.testing.harness import GateServer, chat, closed_port_url, records, rig

FAST = SimConfig(decode_step_ms=0.2, prefill_us_per_token=1.0)


async def test_excess_shadows_are_dropped_and_clients_never_wait(tmp_path: Path) -> None:
    """With two shadows stuck upstream, later copies are dropped while every client is answered."""
    gate = GateServer(hold=True)
    options = {"mode": "mirror", "max_shadow_in_flight": 2}
    async with rig(tmp_path, baseline=FAST, candidate=gate, **options) as r:
        for i in range(4):
            status, data = await r.post(chat(f"q{i}", stream=True))
            assert status == 200
            assert data.endswith(b"data: [DONE]\n\n")
        # Every client has its full answer while both admitted shadows are still held upstream.
        await gate.arrived(2)
        assert len(gate.seen) == 2
        async with r.session.get(r.url + "/_specproxy/status") as resp:
            status_doc = await resp.json()
        async with r.session.get(r.url + "/_specproxy/metrics") as resp:
            metrics_text = await resp.text()
        gate.release.set()
    candidate = status_doc["sides"]["candidate"]
    assert candidate["in_flight_shadow"] == 2
    assert candidate["shadow_dropped"] == 2
    assert 'specproxy_shadow_dropped_total{side="candidate"} 2' in metrics_text
    found = records(tmp_path)
    base = [rec for rec in found if rec["side"] == "baseline"]
    cand = [rec for rec in found if rec["side"] == "candidate"]
    assert len(base) == len(cand) == 4
    assert all(rec["error_kind"] is None for rec in base)
    assert sorted(str(rec["error_kind"]) for rec in cand) == [
        "None",
        "None",
        "shadow_dropped",
        "shadow_dropped",
    ]
    assert {rec["pair_id"] for rec in cand} == {rec["pair_id"] for rec in base}
    dropped = [rec for rec in cand if rec["error_kind"] == "shadow_dropped"]
    assert all(rec["shadow"] and "limit 2" in rec["error_message"] for rec in dropped)


async def _mirror_to_a_stuck_shadow(tmp_path: Path, **options: object) -> list[dict[str, Any]]:
    """One streamed request mirrored to a candidate that never answers; the records afterwards."""
    gate = GateServer(hold=True)
    async with rig(tmp_path, baseline=FAST, candidate=gate, mode="mirror", **options) as r:
        status, _ = await r.post(chat(stream=True))
        assert status == 200
        await gate.arrived(1)
    return records(tmp_path)


async def test_stalled_shadow_is_cut_at_its_deadline(tmp_path: Path) -> None:
    """A shadow that never answers is recorded as a timeout; the client got its answer regardless."""
    found = await _mirror_to_a_stuck_shadow(tmp_path, shadow_deadline_s=0.2)
    by_side = {rec["side"]: rec for rec in found}
    assert by_side["baseline"]["error_kind"] is None
    assert by_side["candidate"]["error_kind"] == "timeout"
    assert "shadow deadline of 0.2 s" in by_side["candidate"]["error_message"]


async def test_unreachable_shadow_changes_nothing_for_the_client(tmp_path: Path) -> None:
    """A shadow server that is down yields a connect record; the client sees the primary's answer."""
    down = closed_port_url()
    async with rig(tmp_path, baseline=FAST, candidate=down, mode="mirror") as r:
        status, data = await r.post(chat())
        assert r.baseline is not None
        async with r.session.post(r.baseline + "/v1/chat/completions", json=chat()) as resp:
            direct_body = await resp.read()
    assert status == 200
    assert orjson.loads(data)["choices"] == orjson.loads(direct_body)["choices"]
    by_side = {rec["side"]: rec for rec in records(tmp_path)}
    assert by_side["baseline"]["error_kind"] is None
    assert by_side["candidate"]["error_kind"] == "connect"


async def test_failing_shadow_changes_nothing_for_the_client(tmp_path: Path) -> None:
    """A shadow that answers 500 is recorded as http_5xx; the client still gets the primary's 200."""
    failing = SimConfig(fail_rate=1.0, decode_step_ms=0.2)
    async with rig(tmp_path, baseline=FAST, candidate=failing, mode="mirror") as r:
        status, _ = await r.post(chat())
    assert status == 200
    by_side = {rec["side"]: rec for rec in records(tmp_path)}
    assert by_side["candidate"]["error_kind"] == "http_5xx"
    assert by_side["candidate"]["status"] == 500


async def test_shadow_still_running_at_shutdown_is_recorded(tmp_path: Path) -> None:
    """A shadow cancelled when the drain time runs out still leaves exactly one record."""
    found = await _mirror_to_a_stuck_shadow(tmp_path, drain_s=0.0)
    by_side = {rec["side"]: rec for rec in found}
    assert len(found) == 2
    assert by_side["candidate"]["error_kind"] == "aborted"
    assert "shut down" in by_side["candidate"]["error_message"]
