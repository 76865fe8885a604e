"""Fold one upstream response (headers, body bytes, end or failure) into a Measurement.

Sans-I/O: the caller stamps every input with microseconds since the request was sent
(its own monotonic clock) and this module never reads a clock. Streaming bodies go
through ``core.protocol.sse``; each event is interpreted by ``core.protocol.events`` for its route (a
whole body by ``core.protocol.body``); ``core.measurement.timing`` turns arrival times into TTFT /
chunk gaps / TPOT / E2E; and ``core.measurement.acceptance`` picks the best acceptance source the
response offers.

Where counts come from: ``usage`` (OpenAI routes; streams only with ``include_usage`` or
``continuous_usage_stats``), ``meta_info`` (``/generate``: a running count on every
event), llama.cpp (chat streams: ``usage`` and ``timings`` on the ``choices: []`` chunk;
completions streams: both on the finish chunk; native ``/completion``: per-event
``tokens`` lists and ``tokens_predicted`` / ``tokens_evaluated`` / ``timings`` on the
``stop: true`` event, which also ends the stream in place of ``[DONE]``). A count the
server did not report stays None; it is never guessed.

Tokens per output event (``chunk_tokens``) are exact wherever the stream gives them
(``core.protocol.events``: running counts, token lists). Otherwise the server's total is
apportioned (``core.measurement.timing.estimate_chunk_tokens``): the first event of each choice is
its one prefill token, the others share the rest by text length; such a measurement has
``chunk_tokens_estimated`` set, as has one whose exact counts do not add up to the
server's total. With n > 1 every event keeps its choice index (``chunk_choices``), so
per-token gaps are taken within a choice.

Cost: every event's JSON is parsed exactly once, in ``feed``; there is no per-token
work. ``measure_recorded`` (the fold at the end) reads runs of plain chat events in one
loop and parses the few other events of a chat stream (role, finish, usage) twice. A non-streaming body (and any body with status >= 400) is buffered and parsed
once, in ``finish``; ``feed`` then returns no events and the relay forwards the bytes
itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from specproxy.core.measurement import acceptance as acc
from specproxy.core.measurement import timing
from specproxy.core.protocol.body import Body, interpret_body
from specproxy.core.protocol.errortext import message_head, summarize_error_body
from specproxy.core.protocol.events import (
    NO_OUTPUT_CHUNK,
    OUTPUT_CHUNK,
    Chunk,
    Dialect,
    StreamInterpreter,
)
from specproxy.core.protocol.fields import Usage, completion_tokens, server_e2e_us
from specproxy.core.protocol.sse import SseDecoder, SseEvent
from specproxy.core.protocol.sse_split import simple_events
from specproxy.core.records.model import ErrorKind, Measurement, Route
from specproxy.errors import ProtocolError

MAX_ERROR_CHARS = 300


class ResponseMeter:
    """Measures one response. Call order: ``on_headers``, ``feed``*, then ``finish`` or ``fail``.

    - ``feed`` returns the SSE events completed by the bytes (empty list for a
      non-streaming body, which is buffered and parsed at ``finish``).
    - ``finish`` classifies: HTTP status >= 400 -> http_4xx/http_5xx with the server's
      error message; a stream without ``[DONE]`` -> stream_truncated; an in-stream
      ``{"error": ...}`` event -> stream_error; finish_reason "abort" -> aborted.
    - ``fail`` records a transport failure or cancellation, keeping what arrived so far.
    - ``keep_text`` keeps the output text on the measurement (off by default: only its
      SHA-256 is kept).
    - ``dialect`` overrides the grammar implied by ``route``; pass
      ``Dialect.LLAMACPP_COMPLETION`` for llama.cpp's native ``/completion``.

    ``finish`` and ``fail`` are final: after either, both return the same Measurement.
    """

    __slots__ = (
        "_abort",
        "_body",
        "_choices",
        "_dialect",
        "_done",
        "_error",
        "_finish",
        "_headers_us",
        "_interp",
        "_metas",
        "_offsets",
        "_protocol_error",
        "_result",
        "_sglext",
        "_sse",
        "_status",
        "_timings",
        "_tokens",
        "_usage",
        "keep_text",
        "stream",
    )

    def __init__(
        self,
        route: Route,
        stream: bool,
        *,
        keep_text: bool = False,
        dialect: Dialect | None = None,
    ) -> None:
        self.stream = stream
        self.keep_text = keep_text
        self._dialect = dialect if dialect is not None else Dialect.for_route(route)
        self._status: int | None = None
        self._headers_us: int | None = None
        self._sse: SseDecoder | None = None
        self._body: list[bytes] = []
        self._interp = StreamInterpreter(self._dialect)
        self._offsets: list[int] = []
        self._tokens: list[int | None] = []
        self._choices: list[tuple[int, int]] = []  # (output event, choice) where choice != 0
        self._finish: str | None = None
        self._abort: str | None = None
        self._usage: Usage | None = None
        self._metas: list[Mapping[str, Any]] = []
        self._sglext: Mapping[str, Any] | None = None
        self._timings: Mapping[str, Any] | None = None
        self._error: str | None = None
        self._protocol_error: str | None = None
        self._done = False
        self._result: Measurement | None = None

    def on_headers(self, t_us: int, status: int) -> None:
        """The status line and headers arrived at ``t_us``."""
        self._headers_us = t_us
        self._status = status
        if self.stream and status < 400:
            self._sse = SseDecoder()

    def feed(self, t_us: int, data: bytes) -> list[SseEvent]:
        """Body bytes that arrived at ``t_us``; returns the SSE events they completed."""
        sse = self._sse
        if sse is None:
            self._body.append(data)
            return []
        events = sse.feed(data)
        for event in events:
            self._take(t_us, event)
        return events

    def _take(self, t_us: int, event: SseEvent) -> None:
        if self._done or self._protocol_error is not None:
            return
        try:
            chunk = self._interp.interpret(event)  # None for data-less events
        except ProtocolError as exc:
            if event.complete:
                self._protocol_error = str(exc)
            return
        if chunk is OUTPUT_CHUNK:  # the commonest event: one output event, nothing else
            self._offsets.append(t_us)
            self._tokens.append(None)
        elif chunk is not None and chunk is not NO_OUTPUT_CHUNK:
            self._apply(t_us, chunk)

    def _take_data(self, t_us: int, data: str) -> None:
        """``_take`` of a complete event given by its data field alone (``measure_recorded``)."""
        if self._done or self._protocol_error is not None:
            return
        try:
            chunk = self._interp.interpret_data(data)
        except ProtocolError as exc:
            self._protocol_error = str(exc)
            return
        if chunk is OUTPUT_CHUNK:
            self._offsets.append(t_us)
            self._tokens.append(None)
        elif chunk is not None and chunk is not NO_OUTPUT_CHUNK:
            self._apply(t_us, chunk)

    def _take_all_data(self, events: list[tuple[int, str]]) -> None:
        """``_take_data`` of each event in order; runs of plain chat events are read by
        ``StreamInterpreter.take_plain_chat`` in one call (the fold's commonest work)."""
        take = self._take_data
        if self._dialect is not Dialect.CHAT:
            for t_us, data in events:
                take(t_us, data)
            return
        interp = self._interp
        offsets = self._offsets
        tokens = self._tokens
        i = 0
        end = len(events)
        while i < end and not self._done and self._protocol_error is None:
            before = len(offsets)
            i = interp.take_plain_chat(events, i, offsets)
            if len(offsets) > before:
                tokens.extend([None] * (len(offsets) - before))
            if i < end:
                take(*events[i])
                i += 1

    def _apply(self, t_us: int, c: Chunk) -> None:
        if c.output:
            self._offsets.append(t_us)
            self._tokens.append(c.tokens)
            if c.index:
                self._choices.append((len(self._offsets) - 1, c.index))
        if c.finish_reason is not None:
            self._finish = c.finish_reason
            if c.meta_info is not None:
                self._metas.append(c.meta_info)
        if c.abort_message is not None:
            self._abort = c.abort_message
        if c.usage is not None:
            self._usage = c.usage
        if c.sglext is not None:
            self._sglext = c.sglext
        if c.timings is not None:
            self._timings = c.timings
        if c.error is not None:
            self._error = c.error
        if c.done:
            self._done = True

    def finish(self, t_us: int) -> Measurement:
        """The body ended normally at ``t_us``: classify and build the Measurement."""
        if self._result is not None:
            return self._result
        body = self._end_body(t_us)
        kind, message = self._classify(body)
        self._result = self._build(t_us, kind, message, body)
        return self._result

    def fail(self, t_us: int, kind: ErrorKind, message: str) -> Measurement:
        """The exchange failed at ``t_us`` (transport error, timeout, cancellation)."""
        if self._result is not None:
            return self._result
        body = self._end_body(t_us) if self._sse is None and self._body else None
        self._result = self._build(t_us, kind, message[:MAX_ERROR_CHARS], body)
        return self._result

    def _end_body(self, t_us: int) -> Body | None:
        """Flush the stream, or parse the buffered body; returns the parsed body if any."""
        if self._sse is not None:
            tail = self._sse.flush()
            for event in tail:
                self._take(t_us, event)
            if not self._offsets and not self._done and tail and tail[-1].data is None:
                return self._parse_body(tail[-1].raw)  # a JSON body where a stream was asked
            return None
        if self._status is not None and self._status >= 400:
            return None  # the error body is read by _classify
        return self._parse_body(b"".join(self._body))

    def _parse_body(self, raw: bytes) -> Body | None:
        try:
            return interpret_body(self._dialect, raw)
        except ProtocolError as exc:
            self._protocol_error = str(exc)
            return None

    def _classify(self, body: Body | None) -> tuple[ErrorKind | None, str | None]:
        status = self._status
        if status is None:
            return ErrorKind.PROTOCOL, "no response status"
        if status >= 400:
            text = summarize_error_body(status, b"".join(self._body))  # no request content
            return ErrorKind.for_status(status), text[:MAX_ERROR_CHARS]
        if self._protocol_error is not None:
            return ErrorKind.PROTOCOL, self._protocol_error[:MAX_ERROR_CHARS]
        error = self._error if body is None else body.error
        if error is not None:
            kind = ErrorKind.STREAM_ERROR if self.stream else ErrorKind.PROTOCOL
            return kind, message_head(error) or "error event without a recordable message"
        finish = body.finish_reason if body is not None else self._finish
        if finish == "abort":
            abort = body.abort_message if body is not None else self._abort
            return ErrorKind.ABORTED, (abort or "finish_reason abort")[:MAX_ERROR_CHARS]
        if self._sse is not None and body is None and not self._done:
            return ErrorKind.STREAM_TRUNCATED, "stream ended before its final event"
        return None, None

    def _build(
        self, t_us: int, kind: ErrorKind | None, message: str | None, body: Body | None
    ) -> Measurement:
        if body is not None:
            usage, metas, sglext, timings = body.usage, body.meta_infos, body.sglext, body.timings
            text: str | None = body.text
            finish = body.finish_reason
        else:
            usage, metas = self._usage, tuple(self._metas)
            sglext, timings = self._sglext, self._timings
            text = self._interp.text() if self._sse is not None else None
            finish = self._finish
        completion = completion_tokens(usage, timings)
        offsets = tuple(self._offsets)
        tokens, estimated = self._chunk_tokens(completion)
        exact = None if estimated else tokens
        choices = self._chunk_choices()
        ttft = timing.ttft_us(offsets)
        acceptance = acc.of_response(
            metas, sglext, timings, completion, exact,
            stream_chunks=len(offsets) if self._sse is not None else None,
            choices=len({0, *(i for _, i in self._choices)}),
            per_token_events=self._dialect is Dialect.LLAMACPP_COMPLETION,
        )  # fmt: skip
        return Measurement(
            status=self._status,
            error_kind=kind,
            error_message=message,
            headers_us=self._headers_us,
            ttft_us=ttft,
            e2e_us=t_us,
            tpot_us=timing.tpot_us(t_us, ttft, completion),
            chunk_offsets_us=offsets,
            chunk_tokens=tokens,
            chunk_tokens_estimated=estimated,
            chunk_choices=choices,
            prompt_tokens=usage.prompt_tokens if usage is not None else None,
            completion_tokens=completion,
            cached_tokens=usage.cached_tokens if usage is not None else None,
            finish_reason=finish,
            output_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest() if text else None,
            output_text=text if self.keep_text and text else None,
            acceptance=acceptance,
            server_e2e_us=server_e2e_us(metas),
        )

    def _chunk_choices(self) -> tuple[int, ...]:
        """Choice index of every output event; () when all were choice 0."""
        if not self._choices:
            return ()
        out = [0] * len(self._offsets)
        for event, index in self._choices:
            out[event] = index
        return tuple(out)

    def _chunk_tokens(self, completion: int | None) -> tuple[tuple[int, ...], bool]:
        """Tokens per output event and whether they are estimated (see the module docstring)."""
        counted = self._tokens
        missing = counted.count(None)
        if not missing:
            exact = tuple(n for n in counted if n is not None)
            return exact, completion is not None and sum(exact) != completion
        if completion is None:
            return tuple(n if n is not None else 1 for n in counted), True
        choices = self._chunk_choices()
        weights = self._interp.uncounted_weights(counted, choices)
        if missing == len(counted) and not choices:  # the common case
            return timing.estimate_single_choice(completion, weights), True
        known = [n for n in counted if n is not None]
        first = timing.opens_choice(list(choices or (0,) * len(counted)))
        opens = [first[i] for i, n in enumerate(counted) if n is None]
        shares = iter(timing.estimate_chunk_tokens(completion - sum(known), weights, opens))
        return tuple(n if n is not None else next(shares) for n in counted), True


def measure_recorded(
    route: Route,
    stream: bool,
    *,
    status: int | None,
    headers_us: int,
    chunks: list[tuple[int, bytes]],
    end_us: int,
    failure: tuple[ErrorKind, str] | None = None,
    keep_text: bool = False,
) -> Measurement:
    """The Measurement of a response recorded as it was relayed, folded once at its end.

    ``chunks`` are the body reads as ``(t_us, bytes)``; ``status`` None means no response
    began. The result is identical to a ``ResponseMeter`` fed as the bytes arrived (the
    same reads at the same times), which is the point: the relay keeps the per-read
    work to a stamp and a list append, and the interpretation runs here, after the
    client has its answer. A stream made only of one-line ``data:`` events with ``\n``
    line ends (every SGLang and OpenAI stream) is checked and split whole
    (``core.protocol.sse_split.simple_events``) instead of going through the incremental SSE decoder, and its
    runs of plain chat events are read in one loop (``StreamInterpreter.take_plain_chat``);
    anything else is fed through ``ResponseMeter.feed`` read by read.
    """
    meter = ResponseMeter(route, stream, keep_text=keep_text)
    if status is not None:
        meter.on_headers(headers_us, status)
        events = simple_events(chunks) if meter._sse is not None else None
        if events is None:
            feed = meter.feed
            for t_us, data in chunks:
                feed(t_us, data)
        else:
            meter._take_all_data(events)
    if failure is None:
        return meter.finish(end_us)
    return meter.fail(end_us, failure[0], failure[1])
