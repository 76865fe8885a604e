"""What each stream event and response body of a generation route means.

Pure: decoded SSE events and parsed JSON in, small value objects out; no I/O, no clock.
Covers (shapes from real captures, see ``tests/fixtures``):

- OpenAI chat chunks (SGLang, llama.cpp, others): the role-only first chunk (empty or
  null content: not output), ``delta.content`` / ``delta.reasoning_content`` /
  ``delta.tool_calls`` (output), the separate finish chunk with an empty delta, the
  ``choices: []`` usage-only chunk, ``usage: null``, the SGLang >= 0.5.19 ``sglext``
  chunk with ``choices: []``, llama.cpp's ``timings`` (on its usage-only chunk), and an
  in-stream ``data: {"error": {...}}``.
- OpenAI completions chunks: ``finish_reason`` on the last text chunk; SGLang sends one
  chunk per output batch, with empty text while the detokenizer holds back an
  incomplete UTF-8 sequence, so an empty-text chunk without a finish reason still
  carries tokens. llama.cpp puts ``usage`` and ``timings`` on the finish chunk itself.
- SGLang ``/generate`` events: cumulative ``text`` / ``output_ids`` by default (or
  deltas with ``--incremental-streaming-output``; told apart by ``len(output_ids)``
  against the running ``meta_info.completion_tokens``), ``finish_reason`` as an object
  ``{"type": ...}``, spec fields only on the final event.
- llama.cpp native ``/completion``: one event per token with a ``tokens`` list; the last
  event has ``stop: true``, ``tokens_predicted``, ``tokens_evaluated`` and ``timings``;
  no ``[DONE]``.
- Non-streaming bodies of all of these, and error bodies (OpenAI flat error,
  ``{"error": {"message"}}``, ``{"error": "Unauthorized"}``, FastAPI ``detail``).

Output text is kept by the ``StreamInterpreter`` itself so a cumulative ``/generate``
stream is never concatenated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from specproxy.core.model import Route
from specproxy.core.sse import DONE, SseEvent
from specproxy.errors import ProtocolError

_EMPTY_CHOICES = ('"choices":[]', '"choices": []')
_LLAMACPP_STOP_TYPES = {"limit": "length", "eos": "stop", "word": "stop"}


class Dialect(StrEnum):
    """The response grammar of one endpoint; llama.cpp's native ``/completion`` has no Route."""

    CHAT = "chat"
    COMPLETIONS = "completions"
    GENERATE = "generate"
    LLAMACPP_COMPLETION = "llamacpp_completion"

    @classmethod
    def for_route(cls, route: Route) -> Dialect:
        return cls[route.name]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts a server reported (None where it did not say)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Chunk:
    """The meaning of one stream event.

    ``output`` is True when the event delivered output tokens; ``tokens`` is how many,
    when the server said so (``/generate`` running counts, continuous usage, llama.cpp
    ``tokens``), else None. ``done`` marks the end-of-stream event (``[DONE]``, or
    llama.cpp native ``stop: true``). ``finish_reason`` uses OpenAI words.
    """

    output: bool = False
    text: str = ""
    tokens: int | None = None
    finish_reason: str | None = None
    abort_message: str | None = None
    usage: Usage | None = None
    meta_info: Mapping[str, Any] | None = None
    sglext: Mapping[str, Any] | None = None
    timings: Mapping[str, Any] | None = None
    error: str | None = None
    done: bool = False

    def __post_init__(self) -> None:
        if self.tokens is not None and self.tokens < 0:
            raise ValueError("tokens must be >= 0")


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


_DONE_CHUNK = Chunk(done=True)


def is_sglext_event(event: SseEvent) -> bool:
    """True for SGLang's trailing ``choices: []`` event carrying ``sglext`` and no usage."""
    data = event.data
    if data is None or '"sglext"' not in data or not any(s in data for s in _EMPTY_CHOICES):
        return False
    obj = _loads_or_none(data)
    return (
        isinstance(obj, dict)
        and obj.get("choices") == []
        and obj.get("sglext") is not None
        and obj.get("usage") is None
    )


def is_usage_only_event(event: SseEvent) -> bool:
    """True for the ``choices: []`` event that carries ``usage`` (the include_usage chunk)."""
    data = event.data
    if data is None or '"usage"' not in data or not any(s in data for s in _EMPTY_CHOICES):
        return False
    obj = _loads_or_none(data)
    return isinstance(obj, dict) and obj.get("choices") == [] and obj.get("usage") is not None


def _loads_or_none(data: str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def error_message(body: bytes | str) -> str:
    """The human message of an error body in any of the known shapes (untrimmed)."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    obj = _loads_or_none(text) if text.lstrip().startswith(("{", "[")) else None
    if isinstance(obj, dict):
        found = _message_of(obj)
        if found:
            return found
    return text.strip()


def _message_of(obj: Mapping[str, Any]) -> str | None:
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


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        prompt_tokens=_int(raw.get("prompt_tokens")),
        completion_tokens=_int(raw.get("completion_tokens")),
        cached_tokens=_int(cached),
    )


def _int(value: Any) -> int | None:
    return value if type(value) is int else None


def _mapping(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, dict) else None


def _generate_finish(raw: Any) -> tuple[str | None, str | None]:
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


def _chat_delta_text(delta: Mapping[str, Any]) -> tuple[str, bool]:
    """(visible text, whether the delta carries tool-call output)."""
    content = delta.get("content") or ""
    reasoning = delta.get("reasoning_content") or ""
    text = reasoning + content if reasoning else content
    calls = delta.get("tool_calls")
    if not calls:
        return text, False
    parts = [text]
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping):
            parts.append(str(fn.get("name") or ""))
            parts.append(str(fn.get("arguments") or ""))
    return "".join(parts), True


def _llamacpp_usage(obj: Mapping[str, Any], timings: Mapping[str, Any] | None) -> Usage:
    cached = _int(timings.get("cache_n")) if timings is not None else None
    return Usage(
        prompt_tokens=_int(obj.get("tokens_evaluated")),
        completion_tokens=_int(obj.get("tokens_predicted")),
        cached_tokens=cached,
    )


class StreamInterpreter:
    """Turns each SSE event of one streamed response into a ``Chunk``; keeps the output text.

    One instance per response, fed events in order. Malformed JSON in a data field
    raises ProtocolError.
    """

    __slots__ = (
        "_continuous",
        "_cumulative",
        "_dialect",
        "_last_text",
        "_pieces",
        "_prev_tokens",
    )

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._pieces: dict[int, list[str]] = {}
        self._last_text: dict[int, str] = {}  # cumulative /generate text, by index
        self._prev_tokens: dict[int, int] = {}  # running completion tokens at the last output
        self._cumulative: dict[int, bool] = {}
        self._continuous = False  # usage rides on content chunks (continuous_usage_stats)

    def interpret(self, event: SseEvent) -> Chunk | None:
        """The event's meaning; None for events without data (padding, comments)."""
        data = event.data
        if data is None:
            return None
        if data == DONE:
            return _DONE_CHUNK
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(f"stream event is not JSON: {exc}") from exc
        if not isinstance(obj, dict):
            raise ProtocolError("stream event is not a JSON object")
        if "error" in obj and "choices" not in obj:
            return Chunk(error=_message_of(obj) or "error event without a message")
        if self._dialect is Dialect.GENERATE:
            return self._generate(obj)
        if self._dialect is Dialect.LLAMACPP_COMPLETION:
            return self._llamacpp(obj)
        return self._openai(obj)

    def text(self) -> str:
        """The output text so far; choices of n > 1 are joined in index order by U+001E."""
        texts = [self._text_of(i) for i in sorted({*self._pieces, *self._last_text})]
        return texts[0] if len(texts) == 1 else "\x1e".join(texts)

    def _text_of(self, index: int) -> str:
        if index in self._last_text:
            return self._last_text[index]
        return "".join(self._pieces.get(index, ()))

    def _add_text(self, index: int, text: str) -> None:
        if text:
            self._pieces.setdefault(index, []).append(text)

    def _openai(self, obj: dict[str, Any]) -> Chunk:
        choices = obj.get("choices")
        usage = _usage(obj.get("usage"))
        sglext = _mapping(obj.get("sglext"))
        timings = _mapping(obj.get("timings"))
        if not choices:
            return Chunk(usage=usage, sglext=sglext, timings=timings)
        output = False
        texts: list[str] = []
        finish: str | None = None
        index = 0
        for i, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise ProtocolError("a choice is not a JSON object")
            idx = _int(choice.get("index")) or 0
            if i == 0:
                index = idx
            if self._dialect is Dialect.CHAT:
                delta = choice.get("delta")
                text, calls = _chat_delta_text(delta) if isinstance(delta, dict) else ("", False)
                carries = bool(text) or calls
            else:
                text = choice.get("text") or ""
                carries = bool(text) or choice.get("finish_reason") is None
            finish = finish or choice.get("finish_reason")
            self._add_text(idx, text)
            texts.append(text)
            output = output or carries
        tokens = self._running_tokens(index, usage, output)
        if tokens is not None and tokens > 0:
            output = True
        return Chunk(
            output=output,
            text="".join(texts),
            tokens=tokens if output else None,
            finish_reason=finish,
            usage=usage,
            sglext=sglext,
            timings=timings,
        )

    def _running_tokens(self, index: int, usage: Usage | None, output: bool) -> int | None:
        """New tokens from a running usage count (continuous usage stats), else None."""
        if usage is None or usage.completion_tokens is None:
            return None
        if output:
            self._continuous = True
        if not self._continuous:
            return None  # a final total on a finish chunk, not a running count
        prev = self._prev_tokens.get(index, 0)
        delta = usage.completion_tokens - prev
        if delta > 0:
            self._prev_tokens[index] = usage.completion_tokens
        return max(delta, 0)

    def _generate(self, obj: dict[str, Any]) -> Chunk:
        meta = _mapping(obj.get("meta_info")) or {}
        index = _int(obj.get("index")) or 0
        running = _int(meta.get("completion_tokens"))
        text = obj.get("text")
        text = text if isinstance(text, str) else ""
        ids = obj.get("output_ids")
        prev = self._prev_tokens.get(index, 0)
        delta = running - prev if running is not None else None
        if running is not None and isinstance(ids, list):
            self._cumulative[index] = len(ids) == running
        if self._cumulative.get(index, True):
            # Beyond the previous length: no O(n) prefix comparison per event.
            new_text = text[len(self._last_text.get(index, "")) :]
            self._last_text[index] = text
        else:
            new_text = text
            self._last_text[index] = self._last_text.get(index, "") + text
        if running is not None:
            self._prev_tokens[index] = max(running, prev)
        output = delta > 0 if delta is not None else bool(new_text)
        finish, abort = _generate_finish(meta.get("finish_reason"))
        usage = Usage(
            prompt_tokens=_int(meta.get("prompt_tokens")),
            completion_tokens=running,
            cached_tokens=_int(meta.get("cached_tokens")),
        )
        return Chunk(
            output=output,
            text=new_text,
            tokens=delta if output else None,
            finish_reason=finish,
            abort_message=abort,
            usage=usage,
            meta_info=meta,
        )

    def _llamacpp(self, obj: dict[str, Any]) -> Chunk:
        content = obj.get("content")
        text = content if isinstance(content, str) else ""
        ids = obj.get("tokens")
        count = len(ids) if isinstance(ids, list) else None
        output = count > 0 if count is not None else bool(text)
        self._add_text(_int(obj.get("index")) or 0, text)
        if obj.get("stop") is not True:
            return Chunk(output=output, text=text, tokens=count if output else None)
        timings = _mapping(obj.get("timings"))
        stop_type = obj.get("stop_type")
        return Chunk(
            output=output,
            text=text,
            tokens=count if output else None,
            finish_reason=_LLAMACPP_STOP_TYPES.get(str(stop_type), stop_type),
            usage=_llamacpp_usage(obj, timings),
            timings=timings,
            done=True,
        )


def interpret_body(dialect: Dialect, body: bytes) -> Body:
    """The meaning of a complete non-streaming body; ProtocolError if it is not JSON."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"response body is not JSON: {exc}") from exc
    if isinstance(obj, dict) and "error" in obj and "choices" not in obj:
        return Body(error=_message_of(obj) or "error body without a message")
    if dialect is Dialect.GENERATE:
        items = obj if isinstance(obj, list) else [obj]
        return _generate_body([i for i in items if isinstance(i, Mapping)])
    if not isinstance(obj, dict):
        raise ProtocolError("response body is not a JSON object")
    if dialect is Dialect.LLAMACPP_COMPLETION:
        timings = _mapping(obj.get("timings"))
        content = obj.get("content")
        stop_type = obj.get("stop_type")
        return Body(
            text=content if isinstance(content, str) else "",
            finish_reason=_LLAMACPP_STOP_TYPES.get(str(stop_type), stop_type),
            usage=_llamacpp_usage(obj, timings),
            timings=timings,
        )
    return _openai_body(dialect, obj)


def _openai_body(dialect: Dialect, obj: Mapping[str, Any]) -> Body:
    choices = obj.get("choices") or []
    texts: list[str] = []
    metas: list[Mapping[str, Any]] = []
    finish: str | None = None
    for choice in sorted(choices, key=lambda c: _int(c.get("index")) or 0):
        if dialect is Dialect.CHAT:
            message = _mapping(choice.get("message")) or {}
            texts.append(_chat_delta_text(message)[0])
        else:
            texts.append(choice.get("text") or "")
        reason = choice.get("finish_reason")
        if finish is None or reason == "abort":
            finish = reason
        meta = _mapping(choice.get("meta_info"))
        if meta is not None:
            metas.append(meta)
    return Body(
        text=texts[0] if len(texts) == 1 else "\x1e".join(texts),
        finish_reason=finish,
        usage=_usage(obj.get("usage")),
        meta_infos=tuple(metas),
        sglext=_mapping(obj.get("sglext")),
        timings=_mapping(obj.get("timings")),
    )


def _generate_body(items: list[Mapping[str, Any]]) -> Body:
    texts: list[str] = []
    metas: list[Mapping[str, Any]] = []
    finish: str | None = None
    abort: str | None = None
    prompt = completion = cached = 0
    for item in sorted(items, key=lambda i: _int(i.get("index")) or 0):
        meta = _mapping(item.get("meta_info")) or {}
        metas.append(meta)
        text = item.get("text")
        texts.append(text if isinstance(text, str) else "")
        word, message = _generate_finish(meta.get("finish_reason"))
        if finish is None or word == "abort":
            finish, abort = word, message
        prompt += _int(meta.get("prompt_tokens")) or 0
        completion += _int(meta.get("completion_tokens")) or 0
        cached += _int(meta.get("cached_tokens")) or 0
    has = bool(metas) and all("completion_tokens" in m for m in metas)
    usage = Usage(prompt, completion, cached) if has else None
    return Body(
        text=texts[0] if len(texts) == 1 else "\x1e".join(texts),
        finish_reason=finish,
        abort_message=abort,
        usage=usage,
        meta_infos=tuple(metas),
    )
