"""What the server's connections keep and measure of the bytes a client sends.

- ``head_key``: a request head less its ``Content-Length`` value, by which a head served
  before is found again (``KnownHead``, kept by ``lean_site.LeanSite``), so it is not
  parsed again;
- ``HeadGauge``: the current request head against the limits of ``core.protocol.limits``,
  the finished parts exactly (the parser's callbacks) and an unfinished head after each
  read, so that a head over a limit is refused (400) before more than one read past it
  is held;
- ``Backlog``: the bytes a client pipelines behind a request in flight, parsed when its
  answer has ended, served from an offset (no copy of the rest per request); past
  ``MAX_PIPELINED_BYTES`` the connection stops reading until they are served;
- request bodies in an unusual shape: ``chunked_end`` finds where a chunked body ends in
  the bytes read (``httptools`` has decoded it already; the server needs the boundary to
  serve what a client pipelined behind it); ``decode_body`` undoes a request's
  ``Content-Encoding`` (gzip and deflate, as aiohttp's server decodes them; any other
  coding leaves the bytes as they are, as aiohttp's does), bounded by the body limit
  after decoding, so a small compressed body cannot grow past it.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass

from aiohttp.http_parser import SINGLETON_HEADERS

from specproxy.core.protocol.limits import (
    MAX_FIELD_BYTES,
    MAX_HEADERS,
    MAX_LINE_BYTES,
    MAX_PIPELINED_BYTES,
)
from specproxy.core.records.model import Route
from specproxy.proxy.app import HeaderFacts

_LINE_SO_FAR = MAX_FIELD_BYTES
_LINES_SO_FAR = MAX_HEADERS + 1
# Headers a request may carry once (aiohttp's list: a second one is a 400), Host included.
_SINGLE = frozenset(name.lower().encode() for name in SINGLETON_HEADERS)
KNOWN_HEADS = 1024  # request heads kept (``LeanSite.heads``); all dropped when full


def head_key(data: bytes, head_end: int, start: int = 0) -> tuple[bytes, int] | None:
    """The request head from ``start`` to ``head_end`` (the index of its blank line's
    ``\r\n\r\n``) less its ``Content-Length`` value, and that value; None without a plain
    decimal one.

    Two heads with the same key differ only in their length: they parse alike."""
    head = data[start : head_end + 2]  # through the last header line's end
    at = head.lower().find(b"\r\ncontent-length:")
    if at < 0:
        return None
    start = at + len(b"\r\ncontent-length:")
    stop = head.find(b"\r\n", start)
    value = head[start:stop].strip(b" \t")
    if not value.isdigit():
        return None
    return head[:start] + head[stop:], int(value)


class HeadGauge:
    """One request head so far: its last line's length, lines, headers, and the headers it
    may carry once (seen, so a second one is refused at once)."""

    __slots__ = ("done", "headers", "line", "lines", "singles", "url")

    def __init__(self) -> None:
        self.line = self.lines = self.headers = self.url = 0
        self.singles: set[bytes] = set()
        self.done = False  # the head is finished

    def on_url(self, size: int) -> bool:
        """A piece of the request-target; False when the line is over its limit."""
        self.url += size
        return self.url <= MAX_LINE_BYTES

    def on_header(self, lower: bytes, value: bytes) -> bool:
        """A header (its name in lower case); False when the head is over a limit or a
        header that may come once came twice (aiohttp's 400 too)."""
        self.headers += 1
        if self.headers > MAX_HEADERS or len(lower) > MAX_FIELD_BYTES:
            return False
        if len(value) > MAX_FIELD_BYTES:
            return False
        if lower in _SINGLE:
            if lower in self.singles:
                return False
            self.singles.add(lower)
        return True

    def on_trailer(self, name: bytes, value: bytes) -> bool:
        """A chunked body's trailer: counted with the headers, not one of them (a ``Host``
        in it is no second ``Host``); False when the head is over a limit."""
        return len(name) <= MAX_FIELD_BYTES and self.on_header(b"", value)

    def has_host(self) -> bool:
        """A ``Host`` came (HTTP/1.1 needs one: RFC 9112 section 3.2)."""
        return b"host" in self.singles

    def over(self, data: bytes) -> bool:
        """True when the head, still unfinished after ``data``, may be over the limits: a
        line (finished or not) or the count of lines past the bounds above."""
        first = data.find(b"\n")
        if first < 0:
            self.line += len(data)
            return self.line > _LINE_SO_FAR
        if self.line + first > _LINE_SO_FAR:
            return True
        last = data.rfind(b"\n")
        if last > first and max(map(len, data[first + 1 : last].split(b"\n"))) > _LINE_SO_FAR:
            return True
        self.line = len(data) - last - 1
        self.lines += data.count(b"\n")
        return self.line > _LINE_SO_FAR or self.lines > _LINES_SO_FAR


class Backlog:
    """Pipelined bytes not yet served: ``data`` from ``at``, then ``more`` (later reads)."""

    __slots__ = ("at", "data", "more", "more_size")

    def __init__(self) -> None:
        self.data = b""
        self.at = 0
        self.more: list[bytes] = []
        self.more_size = 0

    def __bool__(self) -> bool:
        return bool(self.data) or bool(self.more)

    def hold(self, data: bytes, transport: asyncio.Transport | None) -> None:
        """A read while a request is served: kept; reading pauses past the limit."""
        self.more.append(data)
        self.more_size += len(data)
        held = self.more_size + len(self.data) - self.at
        if held > MAX_PIPELINED_BYTES and transport is not None:
            transport.pause_reading()  # read on once what is held has been served

    def keep(self, data: bytes, at: int) -> None:
        """``data[at:]`` follows the request being served."""
        if at < len(data):
            self.data, self.at = data, at

    def take(self) -> tuple[bytes, int]:
        """What is held, as (bytes, offset), and nothing left; later reads joined once."""
        data, at = self.data, self.at
        if self.more:
            data = b"".join([data[at:], *self.more])
            at = 0
        self.clear()
        return data, at

    def clear(self) -> None:
        self.data, self.at, self.more, self.more_size = b"", 0, [], 0


@dataclass(frozen=True, slots=True)
class KnownHead:
    """A request head served here before: its route, keep-alive and headers as read."""

    route: Route
    keep_alive: bool
    facts: HeaderFacts


class Undecodable(Exception):
    """The body does not decode with its Content-Encoding (or the encoding is not taken)."""


class DecodedTooLarge(Exception):
    """The decoded body is over the limit."""


def chunked_end(data: bytes, start: int) -> int | None:
    """The index just past the chunked body that begins at ``data[start]`` (its last chunk,
    its trailers and their blank line); None when ``data`` does not hold one whole."""
    at = start
    while True:
        eol = data.find(b"\r\n", at)
        if eol < 0:
            return None
        try:
            size = int(data[at:eol].split(b";", 1)[0].strip(b" \t"), 16)
        except ValueError:
            return None
        at = eol + 2
        if size == 0:
            break
        at += size + 2
    while True:  # trailers, to the blank line
        eol = data.find(b"\r\n", at)
        if eol < 0:
            return None
        if eol == at:
            return eol + 2
        at = eol + 2


def decode_body(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` with its ``Content-Encoding`` undone, at most ``limit`` bytes.

    Raises ``Undecodable`` (gzip or deflate bytes that do not decode whole) or
    ``DecodedTooLarge``. Any other coding (``br``, several, an unknown name) leaves the
    bytes as they are: a body that then does not parse is the route's own 400."""
    name = encoding.strip().lower()
    if name in ("", "identity") or not body:  # (no body: nothing to decode)
        return body
    if name in ("gzip", "x-gzip"):
        wbits = 16 + zlib.MAX_WBITS
    elif name == "deflate":  # zlib-wrapped, or raw deflate as some clients send it
        wbits = zlib.MAX_WBITS if body[:1] and body[0] & 0x0F == 8 else -zlib.MAX_WBITS
    else:  # a coding not taken: the bytes as they are (as aiohttp's server passes them on)
        return body
    inflate = zlib.decompressobj(wbits)
    try:
        out = inflate.decompress(body, limit + 1)
    except zlib.error as exc:
        raise Undecodable(name) from exc
    if len(out) > limit:
        raise DecodedTooLarge
    if not inflate.eof or inflate.unused_data:
        raise Undecodable(name)
    return out
