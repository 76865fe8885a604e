"""The official openai Python client talks to the simulator and gets valid objects."""

from __future__ import annotations

import asyncio

import openai
import pytest

from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from tests.sim.helpers import FAST

KEY = "sk-sim"
MESSAGES = [{"role": "user", "content": "Name three prime numbers."}]


def sync_calls(base_url: str) -> dict[str, object]:
    """Chat and completions, streaming and not, with the synchronous client (run in a thread)."""
    with openai.OpenAI(base_url=base_url, api_key=KEY, max_retries=0) as client:
        chat = client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=12)
        chunks = list(
            client.chat.completions.create(
                model="m",
                messages=MESSAGES,
                max_tokens=12,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        completion = client.completions.create(model="m", prompt="2, 3, 5,", max_tokens=12)
        text_chunks = list(
            client.completions.create(model="m", prompt="2, 3, 5,", max_tokens=12, stream=True)
        )
    return {"chat": chat, "chunks": chunks, "completion": completion, "text_chunks": text_chunks}


async def test_sync_client_gets_valid_chat_and_completion_objects() -> None:
    """openai.OpenAI parses the simulator's chat and completion replies, streamed and not."""
    config = SimConfig(**FAST, api_key=KEY, speculative_algorithm="EAGLE")
    async with serve_in_background(config) as url:
        got = await asyncio.to_thread(sync_calls, url + "/v1")
    chat = got["chat"]
    assert isinstance(chat, openai.types.chat.ChatCompletion)
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage is not None
    assert chat.usage.completion_tokens == 12
    chunks = got["chunks"]
    assert isinstance(chunks, list)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == chat.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == 12
    completion = got["completion"]
    assert isinstance(completion, openai.types.Completion)
    text_chunks = got["text_chunks"]
    assert isinstance(text_chunks, list)
    assert "".join(c.choices[0].text for c in text_chunks) == completion.choices[0].text
    assert text_chunks[-1].choices[0].finish_reason == "length"


async def test_async_client_gets_valid_chat_and_completion_objects() -> None:
    """openai.AsyncOpenAI streams chat and completions from the simulator on the test's loop."""
    async with (
        serve_in_background(SimConfig(**FAST, api_key=KEY)) as url,
        openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0) as client,
    ):
        chat = await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=8)
        stream = await client.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=8, stream=True
        )
        pieces = [c.choices[0].delta.content or "" async for c in stream]
        completion = await client.completions.create(model="m", prompt="x", max_tokens=8)
        text_stream = await client.completions.create(
            model="m", prompt="x", max_tokens=8, stream=True
        )
        texts = [c.choices[0].text async for c in text_stream]
        models = await client.models.list()
    assert "".join(pieces) == chat.choices[0].message.content
    assert "".join(texts) == completion.choices[0].text
    assert [m.id for m in models.data] == [SimConfig().model_name]


async def test_client_without_the_key_gets_an_authentication_error() -> None:
    """A wrong key makes the client raise openai.AuthenticationError (HTTP 401)."""
    async with (
        serve_in_background(SimConfig(**FAST, api_key=KEY)) as url,
        openai.AsyncOpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0) as client,
    ):
        with pytest.raises(openai.AuthenticationError) as caught:
            await client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=4)
    assert caught.value.status_code == 401
