"""The proxy's own routes and the SGLang read routes it passes to the primary."""

from __future__ import annotations

from pathlib import Path

import orjson

from specproxy.sim.config import SimConfig
from specproxy.testing.harness import GateServer, chat, records, rig

BASE = SimConfig(decode_step_ms=0.2, prefill_us_per_token=1.0)
SPEC = SimConfig(speculative_algorithm="NGRAM", sglang_version="0.5.23", verify_step_ms=0.3)


async def test_health_reports_the_proxy_and_each_server(tmp_path: Path) -> None:
    """GET /health is 200 with each server's health when the primary is healthy."""
    async with rig(tmp_path, baseline=BASE, candidate=SPEC, mode="mirror") as r:
        status, _, data = await r.get("/health")
    body = orjson.loads(data)
    assert status == 200
    assert body["status"] == "ok"
    assert body["proxy"] == "ok"
    assert {side: b["healthy"] for side, b in body["backends"].items()} == {
        "baseline": True,
        "candidate": True,
    }


async def test_read_routes_pass_to_the_primary(tmp_path: Path) -> None:
    """Model list, server info and Prometheus text come from the primary with a fitting content type."""
    async with rig(
        tmp_path, baseline=BASE, candidate=SPEC, mode="mirror", primary="candidate"
    ) as r:
        assert r.candidate is not None
        paths = ("/v1/models", "/server_info", "/metrics", "/v1/loads?include=core")
        got = {path: await r.get(path) for path in paths}
        _, _, direct_models = await r.get("/v1/models", base=r.candidate)
    assert got["/v1/models"][0] == 200
    assert got["/v1/models"][2] == direct_models
    assert got["/v1/models"][1].startswith("application/json")
    assert orjson.loads(got["/server_info"][2])["version"] == "0.5.23"
    assert got["/metrics"][1].startswith("text/plain")
    assert b"sglang:" in got["/metrics"][2]
    assert got["/v1/loads?include=core"][0] == 200


async def test_status_names_versions_fingerprints_and_mode(tmp_path: Path) -> None:
    """/_specproxy/status carries the run's identity and each side's server version and fingerprint."""
    async with rig(tmp_path, baseline=BASE, candidate=SPEC, mode="split", split=1.0) as r:
        await r.post(chat())
        async with r.session.get(r.url + "/_specproxy/status") as resp:
            status = await resp.json()
    assert status["mode"] == "split"
    assert status["run_dir"] == str(tmp_path)
    assert status["sides"]["baseline"]["version"] == "0.5.16"
    assert status["sides"]["candidate"]["version"] == "0.5.23"
    assert status["sides"]["candidate"]["completed"] == 1
    assert status["sides"]["candidate"]["fingerprint"] == records(tmp_path)[0]["fingerprint"]


async def test_put_generate_is_relayed(tmp_path: Path) -> None:
    """PUT /generate (accepted by SGLang) is relayed like POST."""
    body = {"text": "hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    async with rig(tmp_path, baseline=BASE, mode="passthrough") as r:
        status, data = await r.put(body, route="/generate")
    assert status == 200
    assert orjson.loads(data)["meta_info"]["completion_tokens"] == 4


async def test_openai_kind_servers_get_the_clients_bytes(tmp_path: Path) -> None:
    """With kind openai nothing is added upstream, even for streams."""
    gate = GateServer(hold=False)
    async with rig(tmp_path, baseline=gate, mode="passthrough", kind="openai") as r:
        status, _ = await r.post(chat(stream=True))
    assert status == 200
    assert gate.seen[0].json() == chat(stream=True)


async def test_run_log_has_one_line_per_record(tmp_path: Path) -> None:
    """specproxy.log holds one request_completed line per record, with side and fingerprint."""
    async with rig(tmp_path, baseline=BASE, candidate=SPEC, mode="mirror") as r:
        for i in range(3):
            await r.post(chat(f"q{i}"))
    lines = [orjson.loads(x) for x in (tmp_path / "specproxy.log").read_bytes().splitlines()]
    done = [x for x in lines if x["event"] == "request_completed"]
    assert len(done) == len(records(tmp_path)) == 6
    assert all(x["fingerprint"] and x["experiment_id"] and x["side"] for x in done)
