"""Shared helpers for the simulator tests: capture loading, SSE splitting, shape comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from specproxy.core.sse import SseDecoder
from specproxy.sim.config import SimConfig

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sglang-0.5.16"
RUN_A = FIXTURES / "run_a_init0.1"

# Small, fast step times: the suite must run in seconds.
FAST = {"decode_step_ms": 1.0, "verify_step_ms": 1.0, "prefill_us_per_token": 1.0}

# The launch of each captured server, as simulator options.
CAPTURED_LAUNCHES: dict[str, dict[str, Any]] = {
    "base": {},
    "sa_copy": {
        "speculative_algorithm": "STANDALONE",
        "speculative_draft_model_path": "/tmp/models/draft_copy",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    },
    "ngram": {"speculative_algorithm": "NGRAM"},
}


def captured_config(server: str, **overrides: Any) -> SimConfig:
    """A simulator configured like the captured ``server`` (same model path and flags)."""
    options: dict[str, Any] = {
        "model_path": "/tmp/models/target",
        "context_length": 4096,
        "mem_fraction_static": 0.3,
        "decode_log_interval": 16,
        **FAST,
        **CAPTURED_LAUNCHES[server],
        **overrides,
    }
    return SimConfig(**options)


def load_index(server: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((RUN_A / server / "index.json").read_text())
    return data


def raw_capture(server: str, file_name: str) -> bytes:
    """The body bytes of a capture, de-chunked (the ``.http`` files keep chunk framing)."""
    raw = (RUN_A / server / file_name).read_bytes()
    head, _, body = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" not in head.lower():
        return body
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


def sse_events(body: bytes) -> list[bytes]:
    """The raw SSE event blocks of ``body`` (each ends with a blank line)."""
    decoder = SseDecoder()
    events = [e.raw for e in decoder.feed(body)]
    return events + [e.raw for e in decoder.flush()]


def sse_payloads(body: bytes) -> list[Any]:
    """Parsed ``data:`` payloads; ``[DONE]`` stays the string ``"[DONE]"``."""
    out: list[Any] = []
    for raw in sse_events(body):
        assert raw.startswith(b"data: "), raw[:80]
        assert raw.endswith(b"\n\n"), raw[-80:]
        data = raw[len(b"data: ") : -2]
        out.append("[DONE]" if data == b"[DONE]" else json.loads(data))
    return out


def shape_differences(real: Any, sim: Any, path: str = "$") -> list[str]:
    """Where ``sim`` differs from ``real`` in keys or value types (lists: first items)."""
    if isinstance(real, dict) and isinstance(sim, dict):
        out = []
        missing, extra = set(real) - set(sim), set(sim) - set(real)
        if missing or extra:
            out.append(f"{path}: missing {sorted(missing)} extra {sorted(extra)}")
        for key in set(real) & set(sim):
            out += shape_differences(real[key], sim[key], f"{path}.{key}")
        return out
    if isinstance(real, list) and isinstance(sim, list):
        if real and sim:
            return shape_differences(real[0], sim[0], f"{path}[0]")
        return []
    if type(real) is not type(sim):
        return [f"{path}: {type(real).__name__} in the capture, {type(sim).__name__} simulated"]
    return []


async def post_json(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], **kwargs: Any
) -> tuple[int, bytes]:
    async with session.post(url, json=body, **kwargs) as response:
        return response.status, await response.read()


async def get(session: aiohttp.ClientSession, url: str, **kwargs: Any) -> tuple[int, bytes]:
    async with session.get(url, **kwargs) as response:
        return response.status, await response.read()
