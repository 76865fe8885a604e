"""Keys: the proxy's own, the upstream ones, pass-through; and no secrets or text in the run directory."""

from __future__ import annotations

from pathlib import Path

import orjson

from specproxy.sim.config import SimConfig
from specproxy.testing.harness import GateServer, chat, records, rig

PROMPT = "zebra-crossing-7731 is my secret prompt"


async def test_proxy_key_is_required_and_not_forwarded(tmp_path: Path) -> None:
    """With its own key set the proxy answers 401 without it, and never sends it upstream."""
    gate = GateServer(hold=False)
    async with rig(tmp_path, baseline=gate, mode="passthrough", api_key="proxy-key-1") as r:
        missing, missing_body = await r.post(chat())
        wrong, _ = await r.post(chat(), Authorization="Bearer nope")
        right, _ = await r.post(chat(), Authorization="Bearer proxy-key-1")
        async with r.session.get(r.url + "/health") as resp:
            health = resp.status
        async with r.session.get(r.url + "/_specproxy/status") as resp:
            status_without_key = resp.status
    assert (missing, wrong, right, health, status_without_key) == (401, 401, 200, 200, 401)
    assert orjson.loads(missing_body)["error"]["code"] == "invalid_api_key"
    assert len(gate.seen) == 1
    assert "Authorization" not in gate.seen[0].headers


async def test_client_authorization_passes_through_without_keys(tmp_path: Path) -> None:
    """Without any configured key, the client's Authorization header reaches the server as is."""
    gate = GateServer(hold=False)
    async with rig(tmp_path, baseline=gate, mode="passthrough") as r:
        status, _ = await r.post(chat(), Authorization="Bearer client-token")
    assert status == 200
    assert gate.seen[0].headers["Authorization"] == "Bearer client-token"


async def test_upstream_key_replaces_the_clients(tmp_path: Path) -> None:
    """A configured upstream key is what the server gets; a keyed simulator then accepts it."""
    gate = GateServer(hold=False)
    keyed = SimConfig(api_key="sim-key", decode_step_ms=0.2)
    options = {
        "mode": "mirror",
        "primary": "candidate",
        "baseline_api_key": "gate-key",
        "candidate_api_key": "sim-key",
    }
    async with rig(tmp_path, baseline=gate, candidate=keyed, **options) as r:
        status, _ = await r.post(chat(), Authorization="Bearer client-token")
        async with r.session.get(r.url + "/v1/models") as resp:
            models = resp.status
    assert status == 200
    assert models == 200
    assert gate.seen[0].headers["Authorization"] == "Bearer gate-key"
    by_side = {rec["side"]: rec for rec in records(tmp_path)}
    assert by_side["candidate"]["error_kind"] is None
    assert by_side["candidate"]["fingerprint"]  # launch config read with the key


def _run_dir_text(run_dir: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file())


async def test_no_prompt_output_or_keys_in_the_run_directory(tmp_path: Path) -> None:
    """Records, logs and experiment.json hold no prompt text, output text or keys by default."""
    sim = SimConfig(api_key="upstream-secret-9", decode_step_ms=0.2)
    options = {
        "mode": "passthrough",
        "api_key": "proxy-secret-3",
        "baseline_api_key": "upstream-secret-9",
    }
    async with rig(tmp_path, baseline=sim, **options) as r:
        for stream in (True, False):
            status, data = await r.post(
                chat(PROMPT, stream=stream), Authorization="Bearer proxy-secret-3"
            )
            assert status == 200
    output = orjson.loads(data)["choices"][0]["message"]["content"]
    text = _run_dir_text(tmp_path)
    assert (tmp_path / "specproxy.log").exists()
    for secret in ("zebra-crossing-7731", "proxy-secret-3", "upstream-secret-9", output):
        assert secret not in text
    assert all(rec["output_text"] is None and rec["output_sha256"] for rec in records(tmp_path))


async def test_record_text_keeps_output_text(tmp_path: Path) -> None:
    """With record_text on, the output text is kept in the record."""
    async with rig(
        tmp_path, baseline=SimConfig(decode_step_ms=0.2), mode="passthrough", record_text=True
    ) as r:
        _, data = await r.post(chat())
    (record,) = records(tmp_path)
    assert record["output_text"] == orjson.loads(data)["choices"][0]["message"]["content"]
