"""Interpretation of whole bodies and error bodies of every route, against real captures."""

from __future__ import annotations

import json

import orjson
import pytest

from specproxy.core.protocol.body import error_message, interpret_body
from specproxy.core.protocol.events import Dialect
from specproxy.testing.captures import LLAMACPP, sglang_exchange


@pytest.mark.parametrize(
    ("server", "name", "dialect", "prompt"),
    [
        ("run_a_init0.1/sa_copy", "generate", Dialect.GENERATE, 35),
        ("run_a_init0.1/sa_copy", "completions", Dialect.COMPLETIONS, 35),
        ("run_a_init0.1/sa_copy", "chat", Dialect.CHAT, 39),
    ],
)
def test_sglang_non_stream_bodies(server: str, name: str, dialect: Dialect, prompt: int) -> None:
    """Each non-streaming SGLang body gives its text, finish reason and usage."""
    _, cap = sglang_exchange(server, name)
    body = interpret_body(dialect, cap.body)
    obj = json.loads(cap.body)
    expected_text = (
        obj["text"]
        if dialect is Dialect.GENERATE
        else obj["choices"][0].get("text") or obj["choices"][0].get("message", {}).get("content")
    )
    assert body.text == expected_text
    assert body.finish_reason == "length"
    assert body.usage is not None
    assert (body.usage.prompt_tokens, body.usage.completion_tokens) == (prompt, 64)
    if dialect is Dialect.GENERATE:
        assert body.meta_infos[0]["spec_verify_ct"] == 44


def test_chat_return_meta_info_is_read_from_the_choice() -> None:
    """Non-streaming chat with return_meta_info exposes choices[0].meta_info."""
    raw = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hi"},
                "finish_reason": "stop",
                "meta_info": {"spec_verify_ct": 3, "spec_accept_length": 2.0},
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
    }
    body = interpret_body(Dialect.CHAT, orjson.dumps(raw))
    assert body.meta_infos == ({"spec_verify_ct": 3, "spec_accept_length": 2.0},)
    assert body.text == "hi"


def test_generate_batch_body_sums_usage() -> None:
    """A /generate list body (n > 1) joins texts by index and sums the token counts."""
    items = [
        {"index": 1, "text": "b", "meta_info": {"completion_tokens": 2, "prompt_tokens": 3}},
        {"index": 0, "text": "a", "meta_info": {"completion_tokens": 4, "prompt_tokens": 3}},
    ]
    body = interpret_body(Dialect.GENERATE, orjson.dumps(items))
    assert body.text == "a\x1eb"
    assert body.usage is not None
    assert body.usage.completion_tokens == 6


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            b'{"object":"error","message":"Invalid request","type":"BadRequestError","param":null,"code":400}',
            "Invalid request",
        ),
        (b'{"error": {"message": "Too long", "code": 400}}', "Too long"),
        (b'{"error": "Unauthorized"}', "Unauthorized"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b"Internal Server Error", "Internal Server Error"),
        (b"", ""),
    ],
)
def test_error_message_of_each_known_shape(raw: bytes, message: str) -> None:
    """The human message is found in flat, nested, string, FastAPI and plain-text error bodies."""
    assert error_message(raw) == message


@pytest.mark.parametrize(
    ("name", "start"),
    [
        ("error_bad_json.json", "[json.exception.parse_error.101]"),
        ("error_no_messages.json", "'messages' is required"),
        ("error_ctx_exceeded.json", "request (5002 tokens) exceeds"),
    ],
)
def test_llamacpp_error_bodies(name: str, start: str) -> None:
    """llama.cpp's {"error": {"code", "message", "type"}} bodies give their message."""
    assert error_message((LLAMACPP / "tiny/spec-noisy" / name).read_bytes()).startswith(start)
