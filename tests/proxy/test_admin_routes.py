"""SGLang's admin and tokenizer routes through the proxy (primary only, never recorded) and the
client's category header (kept in the records)."""

from __future__ import annotations

from pathlib import Path

import orjson

from specproxy.core.protocol.prometheus import parse_exposition
from specproxy.sim.app import FLUSH_OK
from specproxy.sim.config import SimConfig
from specproxy.testing.harness import Rig, chat, records, records_when, rig

BASE = SimConfig(decode_step_ms=0.2, prefill_us_per_token=1.0)
SPEC = SimConfig(speculative_algorithm="EAGLE", verify_step_ms=0.3)


async def _server_calls(r: Rig, base: str | None, endpoint: str) -> float:
    """How many calls the simulator at ``base`` received on ``endpoint`` (its own counter)."""
    _, _, text = await r.get("/metrics", base=base)
    return (
        parse_exposition(text.decode()).total("sglang:http_requests_total", endpoint=endpoint) or 0
    )


async def test_flush_cache_reaches_the_primary_only(tmp_path: Path) -> None:
    """GET and POST /flush_cache answer as the primary does, reach only the primary, write no
    record and are counted in the proxy's admin counter."""
    async with rig(
        tmp_path, baseline=BASE, candidate=SPEC, mode="mirror", primary="candidate"
    ) as r:
        async with r.session.post(r.url + "/flush_cache?timeout=1") as resp:
            posted = resp.status, await resp.text()
        got, content_type, body = await r.get("/flush_cache")
        on_primary = await _server_calls(r, r.candidate, "/flush_cache")
        on_shadow = await _server_calls(r, r.baseline, "/flush_cache")
        _, _, metrics = await r.get("/_specproxy/metrics")
    assert posted == (200, FLUSH_OK)
    assert (got, body.decode()) == (200, FLUSH_OK)
    assert content_type.startswith("text/plain")
    assert (on_primary, on_shadow) == (2, 0)
    assert records(tmp_path) == []
    exposition = parse_exposition(metrics.decode())
    admin = "specproxy_admin_requests_total"
    assert exposition.total(admin, path="/flush_cache", side="candidate", status="200") == 2
    assert exposition.total(admin, side="baseline") is None


async def test_json_admin_and_tokenizer_calls_carry_their_body(tmp_path: Path) -> None:
    """POST /abort_request and /tokenize pass their JSON body to the primary and its answer
    back; a body that is not JSON is a 400 from the proxy, sent nowhere."""
    async with rig(tmp_path, baseline=BASE, candidate=SPEC, mode="mirror") as r:
        status, _ = await r.post({"abort_all": True}, route="/abort_request")
        tokenized = await r.post({"prompt": "hello there, sea"}, route="/tokenize")
        async with r.session.post(
            r.baseline + "/tokenize", json={"prompt": "hello there, sea"}
        ) as d:
            direct = d.status, await d.read()
        async with r.session.post(r.url + "/abort_request", data=b"{not json") as resp:
            bad = resp.status, orjson.loads(await resp.read())
        aborts = await _server_calls(r, r.baseline, "/abort_request")
        shadow_tokenize = await _server_calls(r, r.candidate, "/tokenize")
    assert status == 200
    assert tokenized == direct and orjson.loads(tokenized[1])["count"] > 0
    assert bad[0] == 400 and bad[1]["error"]["code"] == "invalid_body"
    assert (aborts, shadow_tokenize) == (1, 0)
    assert records(tmp_path) == []


async def test_weight_updates_are_refused(tmp_path: Path) -> None:
    """A weight update is answered 403 not_relayed by the proxy and reaches neither server,
    while generation through the same proxy still works."""
    async with rig(tmp_path, baseline=BASE, candidate=SPEC, mode="mirror") as r:
        refused, body = await r.post({"model_path": "other"}, route="/update_weights_from_disk")
        generated, _ = await r.post(chat())
        calls = [
            await _server_calls(r, url, "/update_weights_from_disk")
            for url in (r.baseline, r.candidate)
        ]
    assert refused == 403
    error = orjson.loads(body)["error"]
    assert error["code"] == "not_relayed" and "/update_weights_from_disk" in error["message"]
    assert generated == 200
    assert calls == [0, 0]


async def test_category_header_is_kept_in_both_records(tmp_path: Path) -> None:
    """x-specproxy-category lands in both sides' records; one too long is a 400 naming the
    header, sent to no server."""
    async with rig(tmp_path, baseline=BASE, candidate=SPEC, mode="mirror") as r:
        ok, _ = await r.post(chat(), **{"x-specproxy-category": " coding "})
        bad, body = await r.post(chat(), **{"x-specproxy-category": "x" * 65})
        kept = await records_when(tmp_path, 2)
    assert ok == 200
    assert sorted((k["side"], k["category"]) for k in kept) == [
        ("baseline", "coding"),
        ("candidate", "coding"),
    ]
    assert bad == 400
    assert orjson.loads(body)["error"]["param"] == "x-specproxy-category"
    assert len(records(tmp_path)) == 2
