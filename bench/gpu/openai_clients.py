"""The official openai client, sync and async, streaming and not, pointed at the proxy.

Usage: python3 bench/gpu/openai_clients.py PROXY_URL. Prints one line per call
and exits 1 if any call fails or returns no text.
"""

from __future__ import annotations

import asyncio
import sys

import openai


def _sync(base: str) -> list[str]:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    out = []
    chat = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "one two three"}],
        max_tokens=16,
        temperature=0,
    )
    out.append(f"sync chat: {chat.usage.completion_tokens if chat.usage else None} tokens")
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "four five six"}],
        max_tokens=16,
        temperature=0,
        stream=True,
    )
    text = "".join((c.choices[0].delta.content or "") for c in stream if c.choices)
    out.append(f"sync chat stream: {len(text)} chars")
    comp = client.completions.create(
        model=model, prompt="seven eight", max_tokens=16, temperature=0
    )
    out.append(f"sync completion: {len(comp.choices[0].text)} chars")
    if not text or not comp.choices[0].text:
        raise SystemExit("empty output")
    return out


async def _async(base: str) -> list[str]:
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)
    model = (await client.models.list()).data[0].id
    stream = await client.completions.create(
        model=model, prompt="nine ten", max_tokens=16, temperature=0, stream=True
    )
    text = "".join([c.choices[0].text async for c in stream if c.choices])
    chat = await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "eleven"}], max_tokens=16, temperature=0
    )
    await client.close()
    if not text or not chat.choices[0].message.content:
        raise SystemExit("empty output")
    return [f"async completion stream: {len(text)} chars", "async chat: ok"]


def main() -> None:
    base = sys.argv[1].rstrip("/")
    for line in _sync(base) + asyncio.run(_async(base)):
        print(line)


if __name__ == "__main__":
    main()
