"""Small, independent readers of llama-server's HTTP answers: the engine tests' oracle.

Deliberately separate from ``specproxy.core`` so the tests check the core against the
server rather than against itself: Prometheus counters are parsed here line by line and
per-response ``timings`` are read straight from the JSON (or the last SSE chunk).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from specproxy.core.protocol.sse import SseDecoder

DRAFTED = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
STEPS = "llamacpp:spec_decode_num_drafts_total"
PREDICTED = "llamacpp:tokens_predicted_total"

# Prompts whose greedy text is the same with and without a draft on the generated models.
PROMPTS = (
    "Write a short story about a river.",
    "Explain what a proxy server does.",
    "List three colours and a city.",
    "Why is the request slow?",
    "Describe a garden in the mountain.",
    "What is speculative decoding?",
)


def chat_body(prompt: str, *, max_tokens: int = 48, stream: bool = False) -> dict[str, Any]:
    """A greedy chat request (temperature 0, fixed seed) for the served model name."""
    body: dict[str, Any] = {
        "model": "target",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "seed": 42,
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body


@dataclass(frozen=True, slots=True)
class ChatResult:
    """What one chat response said: its text, completion tokens and llama.cpp timings."""

    text: str
    completion_tokens: int
    timings: dict[str, Any]

    @property
    def drafted(self) -> int:
        return int(self.timings.get("draft_n", 0))

    @property
    def accepted(self) -> int:
        return int(self.timings.get("draft_n_accepted", 0))


async def chat(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> ChatResult:
    """POST a chat request and read text, usage and timings (streaming or not)."""
    async with session.post(f"{url}/v1/chat/completions", json=body) as response:
        raw = await response.read()
        assert response.status == 200, raw[:300]
    if not body.get("stream"):
        obj = orjson.loads(raw)
        return ChatResult(
            obj["choices"][0]["message"]["content"],
            obj["usage"]["completion_tokens"],
            obj.get("timings", {}),
        )
    decoder = SseDecoder()
    events = [*decoder.feed(raw), *decoder.flush()]
    chunks = [orjson.loads(e.data) for e in events if e.data and not e.is_done]
    text = "".join(
        (c["choices"][0].get("delta") or {}).get("content") or ""
        for c in chunks
        if c.get("choices")
    )
    final = chunks[-1]
    return ChatResult(text, final["usage"]["completion_tokens"], final.get("timings", {}))


def parse_counters(text: str) -> dict[str, float]:
    """Unlabelled ``llamacpp:`` samples of a Prometheus text page."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


async def metrics_text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(f"{url}/metrics") as response:
        assert response.status == 200
        return await response.text()


async def counters(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    return parse_counters(await metrics_text(session, url))
