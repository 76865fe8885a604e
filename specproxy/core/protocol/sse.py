"""Incremental Server-Sent Events decoder (push bytes, get events) and encoder.

Sans-I/O: ``SseDecoder.feed(bytes)`` returns the events completed by those bytes and
``flush()`` returns what is left at end of stream. Every input byte belongs to exactly
one returned ``SseEvent.raw`` (blank-line padding and comment-only blocks come back as
events whose ``data`` is None), so a relay can forward ``raw`` and stay byte-identical
while still dropping chosen events. Line ends may be ``\\n``, ``\\r\\n`` or ``\\r``
(WHATWG SSE); a ``\\r`` at the end of a chunk is held back until the next byte shows
whether a ``\\n`` follows (at ``flush`` a final ``\\r`` ends its line).

Per the standard, one UTF-8 byte order mark at the very start of the stream is
ignored: it is parsed as nothing, yet stays in the first event's ``raw`` so the
byte-accounting invariant holds. A ``data:`` line with nothing after it is an empty
data field: the block's ``data`` is ``""`` (the standard dispatches it with empty data;
interpreters treat it as carrying nothing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from specproxy.errors import ProtocolError

DONE = "[DONE]"
BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One SSE block: its exact bytes and its parsed fields.

    ``data`` is None when the block had no data field (padding, comments).
    ``complete`` is False only for a trailing block cut off by the end of the stream.
    """

    raw: bytes
    data: str | None
    event: str | None = None
    id: str | None = None
    complete: bool = True

    @property
    def is_done(self) -> bool:
        return self.data == DONE

    def json(self) -> object:
        """The data field parsed as JSON; ProtocolError if it is not JSON."""
        if self.data is None:
            raise ProtocolError("SSE event has no data field")
        try:
            return orjson.loads(self.data)
        except orjson.JSONDecodeError as exc:
            raise ProtocolError(f"SSE data is not JSON: {exc}") from exc


def _parse_block(raw: bytes, *, complete: bool = True) -> SseEvent:
    data_lines: list[str] = []
    event: str | None = None
    event_id: str | None = None
    for line in _LINE_END.split(raw):
        if not line or line.startswith(b":"):
            continue
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        text = value.decode("utf-8", errors="replace")
        if name == b"data":
            data_lines.append(text)
        elif name == b"event":
            event = text
        elif name == b"id":
            event_id = text
    data = "\n".join(data_lines) if data_lines else None
    return SseEvent(raw=raw, data=data, event=event, id=event_id, complete=complete)


class SseDecoder:
    """Push-style SSE decoder; see the module docstring for the byte-accounting invariant."""

    __slots__ = ("_buf", "_head", "_owed")

    def __init__(self) -> None:
        self._buf = b""
        self._head = True  # until the first event: a leading BOM is still possible or owed
        self._owed: bytes | None = None  # None: undecided; else the stripped BOM (or b"")

    def feed(self, data: bytes) -> list[SseEvent]:
        """Add ``data``; return every event it completes, in order."""
        buf = self._buf + data if self._buf else data
        if self._head:
            return self._feed_head(buf)
        if b"\r" not in buf:
            return self._feed_lf(buf)
        return self._feed_general(buf)

    def _feed_head(self, buf: bytes) -> list[SseEvent]:
        """``feed`` before the first event: strip one leading BOM, owed to that event's raw."""
        if self._owed is None:
            if len(buf) < len(BOM) and BOM.startswith(buf):
                self._buf = buf  # could still be a BOM: wait for more bytes
                return []
            self._owed = BOM if buf.startswith(BOM) else b""
            buf = buf[len(self._owed) :]
        events = self._feed_lf(buf) if b"\r" not in buf else self._feed_general(buf)
        return self._pay(events)

    def _pay(self, events: list[SseEvent]) -> list[SseEvent]:
        """Put a stripped BOM back at the start of the first event's raw bytes."""
        if events:
            self._head = False
            if self._owed:
                first = events[0]
                raw = self._owed + first.raw
                events[0] = SseEvent(raw, first.data, first.event, first.id, first.complete)
        return events

    def _feed_lf(self, buf: bytes) -> list[SseEvent]:
        """Events of a CR-free buffer, scanning each byte once for the commonest blocks."""
        events: list[SseEvent] = []
        pos = 0
        while (eol := buf.find(b"\n", pos)) >= 0:
            if eol == pos:
                # A blank line with no block before it: padding, kept as its own event.
                events.append(SseEvent(buf[pos : pos + 1], None))
                pos += 1
            elif buf.startswith(b"\n", eol + 1):  # a one-line block (every SGLang event)
                raw = buf[pos : eol + 2]
                if raw.startswith(b"data: "):
                    events.append(SseEvent(raw, raw[6:-2].decode("utf-8", errors="replace")))
                else:
                    events.append(_parse_block(raw))
                pos = eol + 2
            else:
                end = buf.find(b"\n\n", eol)
                if end < 0:
                    break
                events.append(_parse_block(buf[pos : end + 2]))
                pos = end + 2
        self._buf = buf[pos:]
        return events

    def _feed_general(self, buf: bytes, *, at_end: bool = False) -> list[SseEvent]:
        events: list[SseEvent] = []
        block_start = 0
        line_start = 0
        # A trailing CR may be the first half of CRLF; only the end of the stream settles it.
        limit = len(buf) - 1 if buf.endswith(b"\r") and not at_end else len(buf)
        for match in _LINE_END.finditer(buf, 0, limit):
            if match.start() == line_start:  # empty line: the block ends here
                raw = buf[block_start : match.end()]
                events.append(
                    _parse_block(raw) if block_start != line_start else SseEvent(raw, None)
                )
                block_start = match.end()
            line_start = match.end()
        self._buf = buf[block_start:]
        return events

    def flush(self) -> list[SseEvent]:
        """End of stream: blocks completed by a held-back final CR, then the unterminated
        remainder, if any, as one incomplete event."""
        events: list[SseEvent] = []
        if self._buf.endswith(b"\r"):
            events = self._feed_general(self._buf, at_end=True)
        rest, self._buf = self._buf, b""
        if rest:
            events.append(_parse_block(rest, complete=False))
        if not self._head:
            return events
        if self._owed and not events:
            events.append(SseEvent(b"", None))  # a stream of nothing but a BOM
        return self._pay(events)


def encode_event(data: str, *, event: str | None = None) -> bytes:
    """Encode one event the way SGLang does: ``data: <line>\\n`` per line, then a blank line."""
    parts: list[str] = []
    if event is not None:
        parts.append(f"event: {event}\n")
    parts.extend(f"data: {line}\n" for line in data.split("\n"))
    parts.append("\n")
    return "".join(parts).encode("utf-8")


def encode_json_event(obj: object) -> bytes:
    """``data: <compact JSON>\\n\\n`` as SGLang writes its stream events."""
    return b"data: " + orjson.dumps(obj) + b"\n\n"
