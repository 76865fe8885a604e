"""Shared helpers for the simulator tests: capture loading, SSE splitting, shape comparison."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from specproxy.core.protocol.sse import SseDecoder
from specproxy.sim.config import SimConfig
from specproxy.sim.engine import SimJob
from specproxy.testing.captures import SGLANG, parse_http, sglang_index

RUN_A = "run_a_init0.1"
RUN_C = "run_c_nextn"
RUNS = {"base": RUN_A, "sa_copy": RUN_A, "ngram": RUN_A, "base_c": RUN_C, "nextn_c": RUN_C}
"""The run folder of each captured server the simulator is compared with."""

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
    # run C: the DeepSeek-V3-shaped NEXTN testbed pair (docs/validation/nextn/)
    "base_c": {"model_path": "/tmp/nx-models/eps-0.01", "max_running_requests": 64,
               "mem_fraction_static": 0.4, "random_seed": 1, "context_length": 16384,
               "architecture": "DeepseekV3ForCausalLM", "cuda_graph_max_bs": 64,
               "max_total_tokens": 131072},
    "nextn_c": {
        "model_path": "/tmp/nx-models/eps-0.01",
        "max_running_requests": 64,
        "mem_fraction_static": 0.4,
        "random_seed": 1,
        "context_length": 16384,
        "architecture": "DeepseekV3ForCausalLM",
        "cuda_graph_max_bs": 64,
        "max_total_tokens": 131072,
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    },
}  # fmt: skip


PRIMED = frozenset({"base_c", "nextn_c"})
"""Captured servers that had served traffic before their captures began (the preflight's
greedy decodes ran first): a simulator compared with them serves some first."""


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
    """The exchange list of one captured server (``RUNS``)."""
    return sglang_index(f"{RUNS[server]}/{server}")


def raw_capture(server: str, file_name: str) -> bytes:
    """The body bytes of a capture, de-chunked (the ``.http`` files keep chunk framing)."""
    return parse_http((SGLANG / RUNS[server] / server / file_name).read_bytes()).body


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


def event_kind(payload: Any) -> str:
    """A stream event's role in the sequence (role/content/finish/usage/... or DONE)."""
    if payload == "[DONE]":
        return "done"
    if "meta_info" in payload:
        return "final" if payload["meta_info"]["finish_reason"] else "partial"
    if not payload["choices"]:
        return "sglext" if "sglext" in payload else "usage"
    choice = payload["choices"][0]
    if choice["finish_reason"] is not None:
        return "finish"
    if "delta" in choice:
        return "role" if "role" in choice["delta"] else "content"
    return "text"


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


class VirtualClock:
    """A clock that jumps to each deadline: step durations are measured without timer noise."""

    def __init__(self) -> None:
        self.ns = 0

    def now_ns(self) -> int:
        return self.ns

    async def sleep_until(self, deadline_ns: int) -> None:
        self.ns = max(self.ns, deadline_ns)
        await asyncio.sleep(0)


class NoObserver:
    def on_prefill(self, jobs: list[SimJob], duration_us: int) -> None:
        pass

    def on_decode_step(self, batch_size: int, accepted_drafts: int, tokens: int) -> None:
        pass

    def on_finished(self, job: SimJob) -> None:
        pass
