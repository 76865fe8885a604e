"""Readers of the JSON fields that a route's stream events and whole bodies share.

Pure: parsed JSON in, plain values out; no I/O. Used by ``core.protocol.events`` (stream events)
and ``core.protocol.body`` (whole bodies and error bodies), so that the two read every
field the same way. A field of the wrong JSON type reads as absent (None), never as an
error: the interpreters decide what is malformed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

CHOICE_SEPARATOR = "\x1e"  # joins the texts of choices n > 1, in index order
_LLAMACPP_STOP_TYPES = {"limit": "length", "eos": "stop", "word": "stop"}


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts a server reported (None where it did not say)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


def loads_or_none(data: str | bytes) -> Any:
    """``data`` parsed as JSON, or None when it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def int_or_none(value: Any) -> int | None:
    """``value`` when it is a JSON integer (not a bool), else None."""
    return value if type(value) is int else None


MAX_COUNT = 2**53
"""Counts past JSON's exact integer range are not counts a server gave in earnest."""


def count_or_none(value: Any) -> int | None:
    """``value`` when it is a JSON integer in ``[0, MAX_COUNT]`` (a token count), else None:
    a negative or absurd count from a hostile or broken server is no count."""
    return value if type(value) is int and 0 <= value <= MAX_COUNT else None


def mapping_or_none(value: Any) -> Mapping[str, Any] | None:
    """``value`` when it is a JSON object, else None."""
    return value if isinstance(value, dict) else None


def usage_of(raw: Any) -> Usage | None:
    """An OpenAI ``usage`` object (``prompt_tokens_details.cached_tokens`` included)."""
    if not isinstance(raw, dict):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=count_or_none(raw.get("prompt_tokens")),
        completion_tokens=count_or_none(raw.get("completion_tokens")),
        cached_tokens=count_or_none(cached),
    )


def error_text(obj: Mapping[str, Any]) -> str | None:
    """The message of an error object in any known shape; None if ``obj`` is not one.

    Shapes: ``{"error": "..."}``, ``{"error": {"message"}}`` (OpenAI, llama.cpp), the
    flat ``{"object": "error", "message"}`` (SGLang), FastAPI's ``{"detail"}``.
    """
    err = obj.get("error")
    if isinstance(err, str):
        return err
    if isinstance(err, Mapping):
        msg = err.get("message")
        return str(msg) if msg is not None else orjson.dumps(err).decode()
    if obj.get("object") == "error" or "message" in obj:
        msg = obj.get("message")
        return str(msg) if msg is not None else None
    detail = obj.get("detail")
    if detail is not None:
        return detail if isinstance(detail, str) else orjson.dumps(detail).decode()
    return None


def generate_finish(raw: Any) -> tuple[str | None, str | None]:
    """(finish reason word, abort message) from SGLang's ``finish_reason`` object."""
    if raw is None:
        return None, None
    if isinstance(raw, str):
        return raw, None
    if isinstance(raw, Mapping):
        kind = raw.get("type")
        word = str(kind) if kind is not None else None
        message = raw.get("message") if word == "abort" else None
        return word, str(message) if message is not None else None
    return None, None


_TRUE_WORDS = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE_WORDS = frozenset({"0", "off", "f", "false", "n", "no"})


def lax_bool(value: Any) -> bool | None:
    """A boolean field as SGLang's pydantic models (lax mode) read it; None when unreadable.

    ``true``/``false``, the numbers 1 and 0, and the strings ``"true"``, ``"1"``, ``"yes"``,
    ``"on"``, ``"t"``, ``"y"`` (and their ``false`` counterparts), case-insensitively;
    ``null`` or no field is ``False``. Anything else SGLang refuses: None.
    """
    if value is None or isinstance(value, bool):
        return value is True
    if isinstance(value, int | float) and value in (0, 1):
        return value == 1
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE_WORDS:
            return True
        if word in _FALSE_WORDS:
            return False
    return None


def _str_or_empty(value: Any) -> str:
    return value if isinstance(value, str) else ""  # a number where text belongs is no text


def chat_text(message: Mapping[str, Any]) -> tuple[str, bool]:
    """(visible text, whether it carries tool-call output) of a chat delta or message.

    Reasoning is output, as SGLang's own bench counts it: ``reasoning_content`` (SGLang,
    llama.cpp, DeepSeek) or ``reasoning`` (newer OpenAI-compatible servers).
    """
    content = _str_or_empty(message.get("content"))
    reasoning = _str_or_empty(message.get("reasoning_content"))
    if not reasoning:
        reasoning = _str_or_empty(message.get("reasoning"))
    text = reasoning + content if reasoning else content
    calls = message.get("tool_calls")
    if not calls:
        return text, False
    parts = [text]
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping):
            parts.append(str(fn.get("name") or ""))
            parts.append(str(fn.get("arguments") or ""))
    return "".join(parts), True


def listed_tokens(choice: Mapping[str, Any]) -> int | None:
    """How many tokens a stream choice lists itself; None when it lists none.

    ``token_ids`` (servers that return the ids of each chunk), else the per-token
    ``logprobs`` entries: ``logprobs.content`` on chat, ``logprobs.tokens`` on
    completions. An empty list reads as None (it cannot describe a chunk with text).
    """
    ids = choice.get("token_ids")
    if isinstance(ids, list) and ids:
        return len(ids)
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, Mapping):
        entries = logprobs.get("content")
        if not isinstance(entries, list):
            entries = logprobs.get("tokens")
        if isinstance(entries, list) and entries:
            return len(entries)
    return None


def llamacpp_final(
    obj: Mapping[str, Any],
) -> tuple[str | None, Usage, Mapping[str, Any] | None]:
    """(finish reason in OpenAI words, usage, timings) of llama.cpp's native final object."""
    timings = mapping_or_none(obj.get("timings"))
    stop_type = obj.get("stop_type")
    usage = Usage(
        prompt_tokens=count_or_none(obj.get("tokens_evaluated")),
        completion_tokens=count_or_none(obj.get("tokens_predicted")),
        cached_tokens=count_or_none(timings.get("cache_n")) if timings is not None else None,
    )
    return _LLAMACPP_STOP_TYPES.get(str(stop_type), stop_type), usage, timings


def completion_tokens(usage: Usage | None, timings: Mapping[str, Any] | None) -> int | None:
    """The completion tokens a response reported: ``usage``'s, else llama.cpp's
    ``timings.predicted_n``; None when neither says."""
    if usage is not None and usage.completion_tokens is not None:
        return usage.completion_tokens
    predicted = timings.get("predicted_n") if timings is not None else None
    return predicted if isinstance(predicted, int) and not isinstance(predicted, bool) else None


def server_e2e_us(metas: tuple[Mapping[str, Any], ...]) -> int | None:
    """Largest ``meta_info.e2e_latency`` (seconds) in microseconds; None if none reported."""
    values = [v for m in metas if isinstance(v := m.get("e2e_latency"), int | float) and v >= 0]
    return round(max(values) * 1_000_000) if values else None
