"""Secrets: marker keys and a marker prompt, every endpoint and error path, then a grep of everything."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp

from specproxy.proxy.admin import READ_PATHS
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.testing.harness import chat
from tests.faults.upstream import FAULT_HEADER, FaultServer
from tests.proxy.test_serve_cli import _serve

KEY_PROXY = "proxykey-MARK-1a2b"
KEY_BASELINE = "basekey-MARK-3c4d"
KEY_CANDIDATE = "candkey-MARK-5e6f"
PROMPT = "prompt-MARK-7g8h is what I asked"
KEYS = (KEY_PROXY, KEY_BASELINE, KEY_CANDIDATE)
ROUTES = {
    "/v1/chat/completions": lambda stream: chat(PROMPT, stream=stream),
    "/v1/completions": lambda stream: {
        "model": "m",
        "prompt": PROMPT,
        "max_tokens": 4,
        "stream": stream,
    },
    "/generate": lambda stream: {
        "text": PROMPT,
        "sampling_params": {"max_new_tokens": 4},
        "stream": stream,
    },
}


async def _drive(url: str, session: aiohttp.ClientSession, port: int) -> list[bytes]:
    """Every endpoint and error path through the proxy; each response's headers and body."""
    auth = {"Authorization": f"Bearer {KEY_PROXY}"}
    seen: list[bytes] = []

    async def keep(resp: aiohttp.ClientResponse) -> None:
        seen.append(str(dict(resp.headers)).encode() + await resp.read())

    for route, body in ROUTES.items():
        for stream in (True, False):
            async with session.post(url + route, json=body(stream), headers=auth) as resp:
                await keep(resp)
    for fault in ("echo400", "echo422", "text500", "stream_error", "status=500", "truncate"):
        headers = {**auth, FAULT_HEADER: f"{fault}@candidate"}
        async with session.post(
            url + "/v1/chat/completions", json=chat(PROMPT, stream=True), headers=headers
        ) as resp:
            try:
                await keep(resp)
            except aiohttp.ClientPayloadError:
                seen.append(b"(cut)")
    for path in (
        *(p.replace("{model}", "m") for p in READ_PATHS),
        "/health",
        "/_specproxy/status",
        "/_specproxy/metrics",
    ):
        async with session.get(url + path, headers=auth) as resp:
            await keep(resp)
    bad_inputs = (
        (b'{"messages": [{"content": "' + PROMPT.encode() + b'"', auth),
        (b'{"stream": "' + PROMPT.encode() + b'"}', auth),
        (b'{"prompt": "' + PROMPT.encode() * 200 + b'"}', auth),
        (b"{}", {"Authorization": f"Bearer {KEY_PROXY}x"}),
    )
    for data, headers in bad_inputs:
        async with session.post(url + "/v1/completions", data=data, headers=headers) as resp:
            await keep(resp)
    for bad in (f"Bearer {KEY_PROXY}\x01".encode(), f"Bearer {KEY_PROXY}".encode() + b"z" * 9000):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: " + bad + b"\r\n\r\n")
        await writer.drain()
        seen.append(await reader.read())
        writer.close()
    return seen


async def test_no_marker_key_or_prompt_leaks_anywhere(tmp_path: Path) -> None:
    """No key reaches a response, and neither a key nor the prompt reaches the run dir, logs or output."""
    run_dir = tmp_path / "run"
    sim = SimConfig(api_key=KEY_BASELINE, decode_step_ms=0.2, prefill_us_per_token=1.0)
    candidate = FaultServer("candidate", api_key=KEY_CANDIDATE)
    async with (
        serve_in_background(sim) as b,
        candidate.running() as c,
        _serve(
            "--baseline", b, "--candidate", c, "--mode", "mirror", "--primary", "candidate",
            "--api-key", KEY_PROXY, "--baseline-api-key", KEY_BASELINE,
            "--candidate-api-key", KEY_CANDIDATE, "--record", "--max-body-bytes", "4096", "--run-dir", str(run_dir),
        ) as (proc, url),
        aiohttp.ClientSession() as session,
    ):  # fmt: skip
        responses = await _drive(url, session, int(url.rsplit(":", 1)[1]))
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    assert len(responses) > 30
    relayed = b"\n".join(responses).decode(errors="replace")
    for key in KEYS:
        assert key not in relayed
    files = [p for p in run_dir.rglob("*") if p.is_file()]
    assert any(p.name == "requests.jsonl" for p in files)
    stored = "\n".join(p.read_text(errors="replace") for p in files)
    for text in (stored, out.decode(errors="replace"), err.decode(errors="replace")):
        for marker in (*KEYS, "prompt-MARK"):
            assert marker not in text
