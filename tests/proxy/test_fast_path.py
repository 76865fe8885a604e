"""The transport-level hot path end to end: records, framing for old clients, one record each."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson

from specproxy.sim.config import SimConfig
from specproxy.testing.harness import chat, records, rig

SIM = SimConfig(deterministic_ids=True, decode_step_ms=0.2, prefill_us_per_token=1.0)


async def _stream(session: aiohttp.ClientSession, url: str) -> bytes:
    body = chat("Tell me about tides.", stream=True, rid="fixed-fast")
    async with session.post(url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        return await resp.read()


async def test_every_request_has_one_record_when_the_proxy_stops_right_after(
    tmp_path: Path,
) -> None:
    """Records of cleanly ended requests wait a moment (``RecordSteps``); a stop
    that comes at once still writes each of them, once."""
    async with rig(tmp_path, baseline=SIM, candidate=SIM, mode="mirror") as r:
        bodies = await asyncio.gather(*(_stream(r.session, r.url) for _ in range(12)))
    assert all(b.endswith(b"data: [DONE]\n\n") for b in bodies)
    found = records(tmp_path)
    assert len(found) == 24
    assert len({(rec["request_id"], rec["side"]) for rec in found}) == 24
    assert all(rec["error_kind"] is None and rec["completion_tokens"] == 12 for rec in found)


async def test_status_counts_a_request_as_soon_as_the_client_has_its_end(tmp_path: Path) -> None:
    async with rig(tmp_path, baseline=SIM, mode="passthrough") as r:
        await _stream(r.session, r.url)
        _, _, raw = await r.get("/_specproxy/status")
        assert orjson.loads(raw)["sides"]["baseline"]["completed"] == 1
        assert len(records(tmp_path)) == 1  # written when the status was read


async def _http_1_0(url: str, body: bytes) -> tuple[bytes, bytes]:
    """POST ``body`` as an HTTP/1.0 client without keep-alive; (head, body) read to EOF."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST /v1/chat/completions HTTP/1.0\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    raw = await reader.read()  # to the end: the server closes an HTTP/1.0 connection
    writer.close()
    got_head, _, got_body = raw.partition(b"\r\n\r\n")
    return got_head, got_body


async def test_an_http_1_0_client_gets_the_same_stream_unchunked(tmp_path: Path) -> None:
    """No chunked framing for HTTP/1.0: the stream comes as it is and ends the connection."""
    body = orjson.dumps(chat("Tell me about tides.", stream=True, rid="fixed-fast"))
    async with rig(tmp_path, baseline=SIM, mode="passthrough") as r:
        expected = await _stream(r.session, r.url)
        async with asyncio.timeout(30):
            head, got = await _http_1_0(r.url, body)
    assert head.startswith((b"HTTP/1.0 200", b"HTTP/1.1 200"))
    assert b"transfer-encoding" not in head.lower()
    assert got == expected
    assert [rec["error_kind"] for rec in records(tmp_path)] == [None, None]
