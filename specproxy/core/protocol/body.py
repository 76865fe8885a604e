"""What a whole non-streaming response body, or an error body, of a generation route means.

Pure: body bytes in, a small value object out; no I/O. Covers the non-streaming bodies
of every ``Dialect`` (OpenAI chat and completions with all choices folded, SGLang
``/generate`` objects and their list form for n > 1, llama.cpp's native
``/completion``), and error bodies in every known shape (OpenAI flat error,
``{"error": {"message"}}``, ``{"error": "Unauthorized"}``, FastAPI ``detail``, plain
text). Stream events are ``core.protocol.events``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from specproxy.core.protocol.events import Dialect
from specproxy.core.protocol.fields import (
    CHOICE_SEPARATOR,
    Usage,
    chat_text,
    count_or_none,
    error_text,
    generate_finish,
    int_or_none,
    llamacpp_final,
    loads_or_none,
    mapping_or_none,
    usage_of,
)
from specproxy.errors import ProtocolError


@dataclass(frozen=True, slots=True)
class Body:
    """The meaning of a whole non-streaming body (all choices / batch items folded)."""

    text: str = ""
    finish_reason: str | None = None
    abort_message: str | None = None
    usage: Usage | None = None
    meta_infos: tuple[Mapping[str, Any], ...] = ()
    sglext: Mapping[str, Any] | None = None
    timings: Mapping[str, Any] | None = None
    error: str | None = None


def error_message(body: bytes | str) -> str:
    """The human message of an error body in any of the known shapes (untrimmed)."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    obj = loads_or_none(text) if text.lstrip().startswith(("{", "[")) else None
    if isinstance(obj, dict):
        found = error_text(obj)
        if found:
            return found
    return text.strip()


def interpret_body(dialect: Dialect, body: bytes) -> Body:
    """The meaning of a complete non-streaming body; ProtocolError if it is not JSON."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"response body is not JSON: {exc}") from exc
    if isinstance(obj, dict) and "error" in obj and "choices" not in obj:
        return Body(error=error_text(obj) or "error body without a message")
    if dialect is Dialect.GENERATE:
        items = obj if isinstance(obj, list) else [obj]
        return _generate_body([i for i in items if isinstance(i, Mapping)])
    if not isinstance(obj, dict):
        raise ProtocolError("response body is not a JSON object")
    if dialect is Dialect.LLAMACPP_COMPLETION:
        finish, usage, timings = llamacpp_final(obj)
        content = obj.get("content")
        return Body(
            text=content if isinstance(content, str) else "",
            finish_reason=finish,
            usage=usage,
            timings=timings,
        )
    return _openai_body(dialect, obj)


def _openai_body(dialect: Dialect, obj: Mapping[str, Any]) -> Body:
    choices = obj.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, Mapping) for c in choices):
        raise ProtocolError("choices is not a list of objects")  # found by bench/fuzz.py
    texts: list[str] = []
    metas: list[Mapping[str, Any]] = []
    finish: str | None = None
    for choice in sorted(choices, key=lambda c: int_or_none(c.get("index")) or 0):
        if dialect is Dialect.CHAT:
            texts.append(chat_text(mapping_or_none(choice.get("message")) or {})[0])
        else:
            text = choice.get("text")
            texts.append(text if isinstance(text, str) else "")
        reason = choice.get("finish_reason")
        if finish is None or reason == "abort":
            finish = reason
        meta = mapping_or_none(choice.get("meta_info"))
        if meta is not None:
            metas.append(meta)
    return Body(
        text=CHOICE_SEPARATOR.join(texts),
        finish_reason=finish,
        usage=usage_of(obj.get("usage")),
        meta_infos=tuple(metas),
        sglext=mapping_or_none(obj.get("sglext")),
        timings=mapping_or_none(obj.get("timings")),
    )


def _generate_body(items: list[Mapping[str, Any]]) -> Body:
    texts: list[str] = []
    metas: list[Mapping[str, Any]] = []
    finish: str | None = None
    abort: str | None = None
    prompt = completion = cached = 0
    for item in sorted(items, key=lambda i: int_or_none(i.get("index")) or 0):
        meta = mapping_or_none(item.get("meta_info")) or {}
        metas.append(meta)
        text = item.get("text")
        texts.append(text if isinstance(text, str) else "")
        word, message = generate_finish(meta.get("finish_reason"))
        if finish is None or word == "abort":
            finish, abort = word, message
        prompt += count_or_none(meta.get("prompt_tokens")) or 0
        completion += count_or_none(meta.get("completion_tokens")) or 0
        cached += count_or_none(meta.get("cached_tokens")) or 0
    has = bool(metas) and all("completion_tokens" in m for m in metas)
    usage = Usage(prompt, completion, cached) if has else None
    return Body(
        text=CHOICE_SEPARATOR.join(texts),
        finish_reason=finish,
        abort_message=abort,
        usage=usage,
        meta_infos=tuple(metas),
    )
