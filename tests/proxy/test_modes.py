"""Passthrough, mirror and split over real loopback HTTP: who answers, and one record per side."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

from specproxy.runtime import spawn
from specproxy.sim.config import SimConfig
from specproxy.testing.harness import GateServer, Rig, chat, records, rig

SIM = SimConfig(decode_step_ms=0.2, verify_step_ms=0.3, prefill_us_per_token=1.0)
SPEC = SimConfig(
    speculative_algorithm="NGRAM", decode_step_ms=0.2, verify_step_ms=0.3, prefill_us_per_token=1.0
)


async def _ok(r: Rig, body: dict[str, object], **headers: str) -> bytes:
    status, data = await r.post(body, **headers)
    assert status == 200, data
    return data


async def test_mirror_records_one_pair_per_request(tmp_path: Path) -> None:
    """Mirror: every request yields a primary and a shadow record sharing one pair_id."""
    async with rig(tmp_path, baseline=SIM, candidate=SPEC, mode="mirror") as r:
        for i in range(4):
            await _ok(r, chat(f"question {i}", stream=i % 2 == 0))
    found = records(tmp_path)
    assert len(found) == 8
    pairs = Counter(rec["pair_id"] for rec in found)
    assert set(pairs.values()) == {2}
    for pair_id in pairs:
        sides = {(rec["side"], rec["shadow"]) for rec in found if rec["pair_id"] == pair_id}
        assert sides == {("baseline", False), ("candidate", True)}
    assert all(rec["error_kind"] is None and rec["mode"] == "mirror" for rec in found)
    assert all(rec["fingerprint"] for rec in found)
    assert {rec["backend_url"] for rec in found} == {r.baseline, r.candidate}


async def test_passthrough_touches_only_the_primary(tmp_path: Path) -> None:
    """Passthrough to the candidate: one unpaired record per request, all on the candidate."""
    async with rig(tmp_path, candidate=SPEC, mode="passthrough", primary="candidate") as r:
        for i in range(3):
            await _ok(r, chat(f"q{i}", stream=True))
    found = [(rec["side"], rec["shadow"], rec["pair_id"]) for rec in records(tmp_path)]
    assert found == [("candidate", False, None)] * 3


async def test_split_sends_each_request_to_one_side_by_weight(tmp_path: Path) -> None:
    """Split with a seed: each request goes to exactly one side and both sides get traffic."""
    async with rig(tmp_path, baseline=SIM, candidate=SPEC, mode="split", seed=5) as r:
        for i in range(12):
            await _ok(r, chat(f"q{i}"))
    found = records(tmp_path)
    assert len(found) == 12
    assert len({rec["request_id"] for rec in found}) == 12
    assert {rec["side"] for rec in found} == {"baseline", "candidate"}
    assert all(rec["pair_id"] is None and not rec["shadow"] for rec in found)


async def test_sticky_user_pins_each_user_to_one_side(tmp_path: Path) -> None:
    """With sticky_user, every request of one `user` lands on the same side."""
    async with rig(tmp_path, baseline=SIM, candidate=SPEC, mode="split", sticky_user=True) as r:
        for i in range(16):
            await _ok(r, chat(f"q{i}", user=f"user-{i % 4}"))
    sides: dict[int, set[str]] = {}
    for i, record in enumerate(records(tmp_path)):
        sides.setdefault(i % 4, set()).add(record["side"])
    assert all(len(s) == 1 for s in sides.values())
    assert len(set().union(*sides.values())) == 2


async def test_sticky_header_pins_by_header(tmp_path: Path) -> None:
    """With a sticky header, each value keeps one side for all its requests, and values spread over both sides."""
    options = {"mode": "split", "sticky_header": "X-Tenant"}
    async with rig(tmp_path, baseline=SIM, candidate=SPEC, **options) as r:
        for i in range(12):
            await _ok(r, chat(f"q{i}"), **{"X-Tenant": f"tenant-{i % 3}"})
    sent = sorted(records(tmp_path), key=lambda rec: rec["sent_at_unix_s"])
    assert len(sent) == 12
    by_tenant: dict[int, list[str]] = {}
    for i, record in enumerate(sent):
        by_tenant.setdefault(i % 3, []).append(record["side"])
    assert all(len(sides) == 4 and len(set(sides)) == 1 for sides in by_tenant.values())
    assert {sides[0] for sides in by_tenant.values()} == {"baseline", "candidate"}


async def test_forced_side_header_is_obeyed_and_not_forwarded(tmp_path: Path) -> None:
    """x-specproxy-side picks the side and never reaches the upstream server."""
    baseline, candidate = GateServer(hold=False), GateServer(hold=False)
    options = {"mode": "split", "split": 0.0}
    async with rig(tmp_path, baseline=baseline, candidate=candidate, **options) as r:
        await _ok(r, chat(), **{"x-specproxy-side": "candidate"})
        status, data = await r.post(chat(), **{"x-specproxy-side": "nope"})
    assert status == 400
    assert len(candidate.seen) == 1
    assert baseline.seen == []
    assert all(k.lower() != "x-specproxy-side" for k in candidate.seen[0].headers)
    assert b'"param":"x-specproxy-side"' in data
    assert b"must be 'baseline' or 'candidate'" in data


async def test_in_flight_at_send_counts_requests_already_upstream(tmp_path: Path) -> None:
    """A request sent while another is in flight to the same side records in_flight_at_send 1."""
    gate = GateServer(hold=True)
    async with rig(tmp_path, baseline=gate, mode="passthrough") as r:
        first = spawn(_ok(r, chat("one")), name="first")
        await gate.arrived(1)
        second = spawn(_ok(r, chat("two")), name="second")
        await gate.arrived(2)
        gate.release.set()
        await asyncio.gather(first, second)
    assert sorted(rec["in_flight_at_send"] for rec in records(tmp_path)) == [0, 1]


async def test_forcing_an_unconfigured_side_is_400(tmp_path: Path) -> None:
    """Forcing the side that has no server in passthrough mode is refused by name, not relayed."""
    async with rig(tmp_path, baseline=SIM, mode="passthrough") as r:
        status, data = await r.post(chat(), **{"x-specproxy-side": "candidate"})
    assert status == 400
    assert b"no candidate server is configured" in data
    assert records(tmp_path) == []


async def test_responses_name_the_side_that_answered(tmp_path: Path) -> None:
    """Each response carries x-specproxy-side and x-specproxy-request-id matching its record."""
    seen: dict[str, str] = {}
    async with rig(tmp_path, baseline=SIM, candidate=SPEC, mode="split", seed=2) as r:
        for i in range(8):
            async with r.session.post(r.url + "/v1/chat/completions", json=chat(f"q{i}")) as resp:
                await resp.read()
                seen[resp.headers["x-specproxy-request-id"]] = resp.headers["x-specproxy-side"]
    assert {rec["request_id"]: rec["side"] for rec in records(tmp_path)} == seen
    assert set(seen.values()) == {"baseline", "candidate"}
