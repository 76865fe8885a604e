"""What each stream event of a generation route means.

Pure: decoded SSE events in, small value objects out; no I/O, no clock. Covers (shapes
from real captures, see ``tests/fixtures``):

- OpenAI chat chunks (SGLang, llama.cpp, others): the role-only first chunk (empty or
  null content: not output), ``delta.content`` / ``reasoning_content`` / ``reasoning``
  / ``tool_calls`` (output), the separate finish chunk with an empty delta, the
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
- An event whose data field is empty (a bare ``data:`` line) is dispatched by the SSE
  standard with empty data; it carries nothing, like a comment.

Tokens per event (``Chunk.tokens``) are the delta of a running count (``/generate``
``meta_info.completion_tokens``, ``usage`` with ``continuous_usage_stats``, llama.cpp
``timings.predicted_n`` with ``timings_per_token``) or the event's own token list
(``token_ids``, per-token ``logprobs``, llama.cpp native ``tokens``); else None, and the
meter estimates them, weighted by text length (``uncounted_weights``). State is kept per
choice ``index``; ``/generate`` n > 1 usage is summed over choices, as in its body.

Non-streaming and error bodies are ``core.protocol.body``'s; the field readers both use
are in ``core.protocol.fields``; an OpenAI event's choices are read by
``core.protocol.choices`` (the commonest chat event the short way, a run of them in one
call); the events the proxy asks for and withholds are
recognised by ``core.protocol.injected_events``. Output text is kept by the ``StreamInterpreter`` itself
so a cumulative ``/generate`` stream is never concatenated.

Cost: one JSON parse per data event. The commonest events (an OpenAI content or role
chunk with nothing else on it) return shared immutable ``Chunk`` instances instead of
building one each; ``bench/meter_speed.py`` measures the whole per-event path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import orjson

from specproxy.core.measurement.timing import piece_weights
from specproxy.core.protocol.choices import plain_delta, read_choices, take_plain_run
from specproxy.core.protocol.fields import (
    CHOICE_SEPARATOR,
    Usage,
    count_or_none,
    error_text,
    generate_finish,
    int_or_none,
    llamacpp_final,
    mapping_or_none,
    usage_of,
)
from specproxy.core.protocol.sse import DONE, SseEvent
from specproxy.core.records.model import Route
from specproxy.errors import ProtocolError


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
    when the server said so (see the module docstring), else None; ``index`` is the
    choice it belongs to (n > 1). ``done`` marks the end-of-stream event (``[DONE]``, or
    llama.cpp native ``stop: true``). ``finish_reason`` uses OpenAI words. The text an
    event delivered is not here: ``StreamInterpreter.text()`` keeps it.
    """

    output: bool = False
    tokens: int | None = None
    index: int = 0
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
OUTPUT_CHUNK = Chunk(output=True)
NO_OUTPUT_CHUNK = Chunk()


class StreamInterpreter:
    """Turns each SSE event of one streamed response into a ``Chunk``; keeps the output text.

    One instance per response, fed events in order. Malformed JSON in a data field
    raises ProtocolError. ``uncounted_weights`` gives the text length of each output
    event the stream did not count: the weights of a text-length token estimate. They
    cost nothing per event: every output event of a choice keeps one text piece (even
    an empty one), so the lengths are read off the pieces at the end (``/generate``,
    whose text is cumulative, records them only for events without a running count).
    """

    __slots__ = (
        "_continuous",
        "_counts",
        "_cumulative",
        "_dialect",
        "_last_text",
        "_multi",
        "_pieces",
        "_prev_tokens",
        "_weights",
    )

    def __init__(self, dialect: Dialect) -> None:
        self._dialect = dialect
        self._pieces: dict[int, list[str]] = {}  # text deltas, by choice index
        self._last_text: dict[int, str] = {}  # cumulative /generate text, by index
        self._prev_tokens: dict[int, int] = {}  # running completion tokens at the last output
        self._cumulative: dict[int, bool] = {}
        self._continuous = False  # usage rides on content chunks (continuous_usage_stats)
        self._counts: dict[int, tuple[int | None, int | None]] = {}  # /generate prompt, cached
        self._multi = False  # a /generate stream with several choices
        self._weights: list[int] = []  # /generate events without a running count

    def interpret(self, event: SseEvent) -> Chunk | None:
        """The event's meaning; None for events without data (padding, comments, ``data:``)."""
        return self.interpret_data(event.data)

    def interpret_data(self, data: str | None) -> Chunk | None:
        """``interpret`` of an event whose data field is ``data`` (None: no data field)."""
        if not data:
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

    def uncounted_weights(self, tokens: Sequence[int | None], choices: Sequence[int]) -> list[int]:
        """Text length of each output event whose ``tokens`` entry is None, in order.

        ``tokens`` and ``choices`` (empty: one choice) describe every output event, as the
        meter saw them. Lengths that cannot be matched to the events (one event carrying
        several choices) come back as zeros, which spread the estimate evenly.
        """
        missing = tokens.count(None)
        if self._dialect is Dialect.GENERATE:
            weights = self._weights
        else:
            weights = piece_weights(self._pieces, tokens, choices)
        return weights if len(weights) == missing else [0] * missing

    def _openai(self, obj: dict[str, Any]) -> Chunk:
        choices = obj.get("choices")
        raw_usage = obj.get("usage")  # absent or null on almost every event: no calls then
        usage = None if raw_usage is None else usage_of(raw_usage)
        sglext = obj.get("sglext")
        if sglext is not None and not isinstance(sglext, dict):
            sglext = None
        timings = obj.get("timings")
        if timings is not None and not isinstance(timings, dict):
            timings = None
        if not choices:
            return Chunk(usage=usage, sglext=sglext, timings=timings)
        if not isinstance(choices, list):  # e.g. "choices": 5 (found by bench/fuzz.py)
            raise ProtocolError("choices is not a list")
        if (
            usage is None
            and sglext is None
            and timings is None
            and len(choices) == 1
            and self._dialect is Dialect.CHAT
        ):
            plain = self._plain_chat_choice(choices[0])
            if plain is not None:
                return plain
        output, finish, index, listed = read_choices(
            choices, self._dialect is Dialect.CHAT, self._pieces
        )
        if usage is None and finish is None and sglext is None and timings is None:
            if listed is None and index == 0:
                return OUTPUT_CHUNK if output else NO_OUTPUT_CHUNK  # the commonest events
            output, tokens = self._counted(index, output, listed)
            return Chunk(output=output, tokens=tokens, index=index)
        running = usage.completion_tokens if usage is not None else None
        if running is None and timings is not None:
            running = count_or_none(timings.get("predicted_n"))  # llama.cpp timings_per_token
        step = self._running_tokens(index, running, output)  # keeps the running count
        tokens = listed or step
        if self._continuous and usage is not None and len(self._prev_tokens) > 1:
            usage = replace(usage, completion_tokens=sum(self._prev_tokens.values()))
        output, tokens = self._counted(index, output, tokens)
        return Chunk(
            output=output,
            tokens=tokens,
            index=index,
            finish_reason=finish,
            usage=usage,
            sglext=sglext,
            timings=timings,
        )

    def _plain_chat_choice(self, choice: Any) -> Chunk | None:
        """The commonest chat event (one choice 0 with plain ``content``, no finish reason,
        no token list, no reasoning or tool calls) read the short way, exactly as
        ``read_choices`` reads it; None for any other choice."""
        if type(choice) is not dict:
            return None
        delta = plain_delta(choice)
        if delta is None:
            return None
        content = delta.get("content")
        if type(content) is not str or not content:
            return NO_OUTPUT_CHUNK
        pieces = self._pieces.get(0)
        if pieces is None:
            self._pieces[0] = [content]
        else:
            pieces.append(content)
        return OUTPUT_CHUNK

    def take_plain_chat(
        self, events: Sequence[tuple[int, str]], start: int, offsets: list[int]
    ) -> int:
        """Read the run of plain chat events at ``events[start:]`` (data fields with their
        times), their content kept as ``_plain_chat_choice`` keeps it and the times of the
        output ones appended to ``offsets`` (``core.protocol.choices.take_plain_run``); the index of
        the first event that is not plain, which the caller reads with ``interpret_data``.
        Nothing is read outside the chat dialect."""
        if self._dialect is not Dialect.CHAT:
            return start
        return take_plain_run(self._pieces, events, start, offsets)

    def _counted(self, index: int, carried: bool, tokens: int | None) -> tuple[bool, int | None]:
        """(output, tokens) of an event: output when a choice carried text or the stream
        counted new tokens (then an empty piece keeps the text weights aligned)."""
        counted = tokens is not None and tokens > 0
        if counted and not carried:
            self._pieces.setdefault(index, []).append("")
        output = carried or counted
        return output, tokens if output else None

    def _running_tokens(self, index: int, running: int | None, output: bool) -> int | None:
        """New tokens from a running count on content chunks (continuous usage), else None."""
        if running is None:
            return None
        if output:
            self._continuous = True
        if not self._continuous:
            return None  # a final total on a finish chunk, not a running count
        prev = self._prev_tokens.get(index, 0)
        delta = running - prev
        if delta > 0:
            self._prev_tokens[index] = running
        return max(delta, 0)

    def _generate(self, obj: dict[str, Any]) -> Chunk:
        meta = mapping_or_none(obj.get("meta_info")) or {}
        index = int_or_none(obj.get("index")) or 0
        running = count_or_none(meta.get("completion_tokens"))
        ids = obj.get("output_ids")
        if running is not None and isinstance(ids, list):
            self._cumulative[index] = len(ids) == running
        text = obj.get("text")
        chars = self._take_generate_text(index, text if isinstance(text, str) else "")
        prev = self._prev_tokens.get(index, 0)
        if running is not None:
            delta: int | None = running - prev
            self._prev_tokens[index] = max(running, prev)
            output = running > prev
        else:
            delta = None
            output = chars > 0
            if output:
                self._weights.append(chars)
        finish, abort = generate_finish(meta.get("finish_reason"))
        prompt = count_or_none(meta.get("prompt_tokens"))
        cached = count_or_none(meta.get("cached_tokens"))
        if not prev:  # a choice's first event (its prompt and cached counts do not change)
            self._counts[index] = (prompt, cached)
            self._multi = len(self._counts) > 1
        if self._multi and running is not None:
            usage = self._choices_usage()
        else:
            usage = Usage(prompt_tokens=prompt, completion_tokens=running, cached_tokens=cached)
        return Chunk(
            output=output,
            tokens=delta if output else None,
            index=index,
            finish_reason=finish,
            abort_message=abort,
            usage=usage,
            meta_info=meta,
        )

    def _choices_usage(self) -> Usage:
        """Counts summed over every choice of a ``/generate`` n > 1 stream so far."""
        return Usage(
            prompt_tokens=sum(p or 0 for p, _ in self._counts.values()),
            completion_tokens=sum(self._prev_tokens.values()),
            cached_tokens=sum(c or 0 for _, c in self._counts.values()),
        )

    def _take_generate_text(self, index: int, text: str) -> int:
        """Keep one ``/generate`` event's text; how many characters it added.

        Cumulative text replaces what was kept (compared by length only, never by
        prefix); delta text is appended as a piece, never by re-copying the whole text.
        """
        if self._cumulative.get(index, True):
            added = len(text) - len(self._text_of(index))
            self._last_text[index] = text
            return max(added, 0)
        if index in self._last_text:  # the first event was read as cumulative
            self._pieces[index] = [self._last_text.pop(index)]
        self._pieces.setdefault(index, []).append(text)  # even empty: the choice exists
        return len(text)

    def _llamacpp(self, obj: dict[str, Any]) -> Chunk:
        content = obj.get("content")
        text = content if isinstance(content, str) else ""
        ids = obj.get("tokens")
        count = len(ids) if isinstance(ids, list) else None
        output = count > 0 if count is not None else bool(text)
        index = int_or_none(obj.get("index")) or 0
        if output:
            self._pieces.setdefault(index, []).append(text)
        tokens = count if output else None
        if obj.get("stop") is not True:
            return Chunk(output=output, tokens=tokens, index=index)
        finish, usage, timings = llamacpp_final(obj)
        return Chunk(
            output=output,
            tokens=tokens,
            index=index,
            finish_reason=finish,
            usage=usage,
            timings=timings,
            done=True,
        )
