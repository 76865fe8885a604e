"""What each stream event of a generation route means.

Pure: decoded SSE events in, small value objects out; no I/O, no clock. Covers (shapes
from real captures, see ``tests/fixtures``):

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

Non-streaming and error bodies are ``core.protocol_body``'s; the field readers both use
are in ``core.protocol_fields``. Output text is kept by the ``StreamInterpreter`` itself
so a cumulative ``/generate`` stream is never concatenated.

Cost: one JSON parse per data event. The commonest events (an OpenAI content or role
chunk with nothing else on it) return shared immutable ``Chunk`` instances instead of
building one each; ``bench/meter_speed.py`` measures the whole per-event path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from specproxy.core.model import Route
from specproxy.core.protocol_fields import (
    CHOICE_SEPARATOR,
    Usage,
    chat_text,
    error_text,
    generate_finish,
    int_or_none,
    llamacpp_final,
    loads_or_none,
    mapping_or_none,
    usage_of,
)
from specproxy.core.sse import DONE, SseEvent
from specproxy.errors import ProtocolError

_EMPTY_CHOICES = ('"choices":[]', '"choices": []')


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
class Chunk:
    """The meaning of one stream event.

    ``output`` is True when the event delivered output tokens; ``tokens`` is how many,
    when the server said so (``/generate`` running counts, continuous usage, llama.cpp
    ``tokens``), else None. ``done`` marks the end-of-stream event (``[DONE]``, or
    llama.cpp native ``stop: true``). ``finish_reason`` uses OpenAI words. The text an
    event delivered is not here: ``StreamInterpreter.text()`` keeps it.
    """

    output: bool = False
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


_DONE_CHUNK = Chunk(done=True)
_OUTPUT_CHUNK = Chunk(output=True)
_NO_OUTPUT_CHUNK = Chunk()


def is_sglext_event(event: SseEvent) -> bool:
    """True for SGLang's trailing ``choices: []`` event carrying ``sglext`` and no usage."""
    data = event.data
    if data is None or '"sglext"' not in data or not any(s in data for s in _EMPTY_CHOICES):
        return False
    obj = loads_or_none(data)
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
    obj = loads_or_none(data)
    return isinstance(obj, dict) and obj.get("choices") == [] and obj.get("usage") is not None


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
        self._pieces: dict[int, list[str]] = {}  # text deltas, by choice index
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
            return Chunk(error=error_text(obj) or "error event without a message")
        if self._dialect is Dialect.GENERATE:
            return self._generate(obj)
        if self._dialect is Dialect.LLAMACPP_COMPLETION:
            return self._llamacpp(obj)
        return self._openai(obj)

    def text(self) -> str:
        """The output text so far; choices of n > 1 are joined in index order by U+001E."""
        indexes = sorted({*self._pieces, *self._last_text})
        return CHOICE_SEPARATOR.join(self._text_of(i) for i in indexes)

    def _text_of(self, index: int) -> str:
        if index in self._last_text:
            return self._last_text[index]
        return "".join(self._pieces.get(index, ()))

    def _add_text(self, index: int, text: str) -> None:
        if text and isinstance(text, str):  # a number where text belongs is no text
            self._pieces.setdefault(index, []).append(text)

    def _openai(self, obj: dict[str, Any]) -> Chunk:
        choices = obj.get("choices")
        usage = usage_of(obj.get("usage"))
        sglext = mapping_or_none(obj.get("sglext"))
        timings = mapping_or_none(obj.get("timings"))
        if not choices:
            return Chunk(usage=usage, sglext=sglext, timings=timings)
        if not isinstance(choices, list):  # e.g. "choices": 5 (found by bench/fuzz.py)
            raise ProtocolError("choices is not a list")
        output = False
        finish: str | None = None
        index = 0
        for i, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise ProtocolError("a choice is not a JSON object")
            idx = int_or_none(choice.get("index")) or 0
            if i == 0:
                index = idx
            if self._dialect is Dialect.CHAT:
                delta = choice.get("delta")
                text, calls = chat_text(delta) if isinstance(delta, dict) else ("", False)
                carries = bool(text) or calls
            else:
                raw = choice.get("text")
                text = raw if isinstance(raw, str) else ""
                carries = bool(text) or choice.get("finish_reason") is None
            finish = finish or choice.get("finish_reason")
            self._add_text(idx, text)
            output = output or carries
        if usage is None and finish is None and sglext is None and timings is None:
            return _OUTPUT_CHUNK if output else _NO_OUTPUT_CHUNK  # the commonest events
        tokens = self._running_tokens(index, usage, output)
        if tokens is not None and tokens > 0:
            output = True
        return Chunk(
            output=output,
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
        meta = mapping_or_none(obj.get("meta_info")) or {}
        index = int_or_none(obj.get("index")) or 0
        running = int_or_none(meta.get("completion_tokens"))
        ids = obj.get("output_ids")
        if running is not None and isinstance(ids, list):
            self._cumulative[index] = len(ids) == running
        text = obj.get("text")
        grew = self._take_generate_text(index, text if isinstance(text, str) else "")
        prev = self._prev_tokens.get(index, 0)
        delta = running - prev if running is not None else None
        if running is not None:
            self._prev_tokens[index] = max(running, prev)
        output = delta > 0 if delta is not None else grew
        finish, abort = generate_finish(meta.get("finish_reason"))
        usage = Usage(
            prompt_tokens=int_or_none(meta.get("prompt_tokens")),
            completion_tokens=running,
            cached_tokens=int_or_none(meta.get("cached_tokens")),
        )
        return Chunk(
            output=output,
            tokens=delta if output else None,
            finish_reason=finish,
            abort_message=abort,
            usage=usage,
            meta_info=meta,
        )

    def _take_generate_text(self, index: int, text: str) -> bool:
        """Keep one ``/generate`` event's text; whether it added any.

        Cumulative text replaces what was kept (compared by length only, never by
        prefix); delta text is appended as a piece, never by re-copying the whole text.
        """
        if self._cumulative.get(index, True):
            grew = len(text) > len(self._text_of(index))
            self._last_text[index] = text
            return grew
        if index in self._last_text:  # the first event was read as cumulative
            self._pieces[index] = [self._last_text.pop(index)]
        self._pieces.setdefault(index, []).append(text)  # even empty: the choice exists
        return bool(text)

    def _llamacpp(self, obj: dict[str, Any]) -> Chunk:
        content = obj.get("content")
        text = content if isinstance(content, str) else ""
        ids = obj.get("tokens")
        count = len(ids) if isinstance(ids, list) else None
        output = count > 0 if count is not None else bool(text)
        self._add_text(int_or_none(obj.get("index")) or 0, text)
        tokens = count if output else None
        if obj.get("stop") is not True:
            return Chunk(output=output, tokens=tokens)
        finish, usage, timings = llamacpp_final(obj)
        return Chunk(
            output=output,
            tokens=tokens,
            finish_reason=finish,
            usage=usage,
            timings=timings,
            done=True,
        )
