"""The official `openai` client, sync (in a thread) and async, streaming and not, through the proxy."""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai

from specproxy.sim.config import SimConfig
from specproxy.testing.harness import records, rig

BASE = SimConfig(decode_step_ms=0.2, prefill_us_per_token=1.0)
SPEC = SimConfig(
    speculative_algorithm="EAGLE",
    sglang_version="0.5.23",
    verify_step_ms=0.3,
    prefill_us_per_token=1.0,
)
MESSAGES: list[openai.types.chat.ChatCompletionMessageParam] = [
    {"role": "user", "content": "Name three rivers."}
]


def _sync_calls(base_url: str) -> tuple[str, str, str]:
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        done = client.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=10, temperature=0
        )
        assert done.object == "chat.completion"
        assert done.usage is not None
        assert done.usage.completion_tokens == 10
        stream = client.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=10, temperature=0, stream=True
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        completion = client.completions.create(
            model="m", prompt="Rivers:", max_tokens=10, temperature=0
        )
        return done.choices[0].message.content or "", streamed, completion.choices[0].text


async def _async_calls(base_url: str) -> tuple[str, str, list[str]]:
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        done = await client.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=10, temperature=0
        )
        chunks = await client.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=10, temperature=0, stream=True
        )
        parts: list[str] = []
        objects: list[str] = []
        async for chunk in chunks:
            objects.append(chunk.object)
            if chunk.choices:
                parts.append(chunk.choices[0].delta.content or "")
        return done.choices[0].message.content or "", "".join(parts), objects


async def test_openai_clients_get_valid_objects_through_the_proxy(tmp_path: Path) -> None:
    """Sync and async clients parse every answer; streamed text equals the unary text."""
    async with rig(tmp_path, baseline=BASE, candidate=SPEC, mode="mirror") as r:
        base_url = r.url + "/v1"
        sync_unary, sync_stream, completion_text = await asyncio.to_thread(_sync_calls, base_url)
        async_unary, async_stream, objects = await _async_calls(base_url)
    assert sync_unary == sync_stream == async_unary == async_stream != ""
    assert completion_text != ""
    assert set(objects) == {"chat.completion.chunk"}
    found = records(tmp_path)
    assert len(found) == 2 * 5
    assert all(rec["error_kind"] is None for rec in found)


async def test_openai_client_sees_a_proxy_error_as_an_api_error(tmp_path: Path) -> None:
    """A 400 from the proxy itself surfaces as openai.BadRequestError with the proxy's message."""
    async with rig(tmp_path, baseline=BASE, mode="passthrough") as r:
        client = openai.AsyncOpenAI(
            base_url=r.url + "/v1",
            api_key="unused",
            max_retries=0,
            default_headers={"x-specproxy-side": "neither"},
        )
        try:
            await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=4)
        except openai.BadRequestError as exc:
            message = str(exc)
        else:
            raise AssertionError("expected a 400")
        finally:
            await client.close()
    assert "x-specproxy-side must be" in message
