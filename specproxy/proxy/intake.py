"""The request-reading half of a lean connection (``proxy.lean``), and what it keeps, bounded.

``RequestReader`` is the ``asyncio.Protocol`` side that reads requests: each read goes to
``httptools`` (``data_received``), whose callbacks check the head as it comes (the
headers that send a request to aiohttp, ``Content-Length``, the API key, the route, the
HTTP version, the body limit) and raise ``_HandOff`` at the first thing the lean server
does not serve. A request leaves it one of two ways: whole, on a relayed route, to
``_start`` (``LeanConnection`` serves it), or as the bytes read of it so far, with the
connection, to aiohttp (``_hand_off``). What it keeps:

- known heads: a request head served before is not parsed again. ``head_key`` (the head
  less its ``Content-Length`` value) finds what was read from it the first time
  (``KnownHead``: route, keep-alive, ``app.HeaderFacts``), when the whole request is in
  one read; only heads served here, whose headers ``plan`` could use, are kept, at most
  ``KNOWN_HEADS`` (all dropped when full): clients send the same head on every request
  but for its length;
- ``HeadGauge``: the current request head against the limits of ``core.protocol.limits``, the
  finished parts exactly (the parser's callbacks) and an unfinished head after each read,
  so that a head over a limit is refused (handed to aiohttp, whose parser has the same
  limits and answers 400) before more than one read past it is held;
- ``Backlog``: the bytes a client pipelines behind a request in flight, parsed when its
  answer has ended, served from an offset (no copy of the rest per request); past
  ``MAX_PIPELINED_BYTES`` the connection stops reading until they are served.

A closed connection drops its parser and buffers at once (``_forget``: the parser refers
back to the reader, a cycle only the collector would free).
"""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httptools
from aiohttp import web
from aiohttp.http_parser import SINGLETON_HEADERS
from multidict import CIMultiDict

from specproxy.core.protocol.limits import (
    MAX_FIELD_BYTES,
    MAX_HEADERS,
    MAX_LINE_BYTES,
    MAX_PIPELINED_BYTES,
)
from specproxy.core.records.model import Route
from specproxy.proxy.app import RELAYED, HeaderFacts, header_facts
from specproxy.proxy.state import ProxyState

if TYPE_CHECKING:
    from specproxy.proxy.lean_site import LeanSite

# An unfinished head whose lines are longer than this, or more than this many, goes to
# aiohttp's parser, which applies its exact rule (a stricter bound here only hands off).
_LINE_SO_FAR = MAX_FIELD_BYTES
_LINES_SO_FAR = MAX_HEADERS + 1
# Headers a request may carry once (aiohttp's list: a second one is its 400), Host included.
_SINGLE = frozenset(name.lower().encode() for name in SINGLETON_HEADERS)
_HANDED_OFF_HEADERS = frozenset({b"expect", b"upgrade", b"transfer-encoding", b"content-encoding"})
_RELAYED = {(m.encode(), p.encode()): r for (m, p), r in RELAYED.items()}
KNOWN_HEADS = 1024  # request heads kept (``LeanSite.heads``); all dropped when full


class TooLarge(Exception):
    """Raised inside a parser callback: the head is over a limit."""


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
    may carry once (``usable``: exactly one Host, no other of them twice)."""

    __slots__ = ("done", "doubled", "headers", "line", "lines", "singles", "url")

    def __init__(self) -> None:
        self.line = self.lines = self.headers = self.url = 0
        self.singles: set[bytes] = set()
        self.doubled = False
        self.done = False  # the head is finished

    def on_url(self, size: int) -> None:
        self.url += size
        if self.url > MAX_LINE_BYTES:
            raise TooLarge

    def on_header(self, lower: bytes, value: bytes) -> None:
        """A header (its name in lower case)."""
        self.headers += 1
        if self.headers > MAX_HEADERS or len(lower) > MAX_FIELD_BYTES:
            raise TooLarge
        if len(value) > MAX_FIELD_BYTES:
            raise TooLarge
        if lower in _SINGLE:
            self.doubled = self.doubled or lower in self.singles
            self.singles.add(lower)

    @property
    def usable(self) -> bool:
        return not self.doubled and b"host" in self.singles

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


class _HandOff(Exception):
    """Raised inside a parser callback: this request is for aiohttp."""


class _Complete(Exception):
    """Raised inside ``on_message_complete``: stop parsing at the end of this request."""


_DEAD_PARSER = httptools.HttpRequestParser(object())  # a closed connection's: holds nothing


class RequestReader(asyncio.Protocol):
    """A lean connection's reading half: requests parsed, known heads, the backlog; a
    whole relayed request goes to ``_start``, anything else to aiohttp (``_hand_off``)."""

    __slots__ = (
        "_backlog",
        "_body",
        "_busy",
        "_expected_auth",
        "_gauge",
        "_headers",
        "_idle_since",
        "_length",
        "_loop",
        "_parser",
        "_received",
        "_route",
        "_site",
        "_state",
        "_url",
        "transport",
    )
    _loop: asyncio.AbstractEventLoop  # set when the connection is made

    def __init__(self, site: LeanSite, state: ProxyState, expected_auth: bytes | None) -> None:
        self._site = site
        self._state = state
        self._expected_auth = expected_auth
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpRequestParser(self)
        self._received: list[bytes] = []  # the current request's bytes so far
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._body: list[bytes] = []
        self._url = b""
        self._route: Route | None = None
        self._length = -1  # the Content-Length, -1 until one is read
        self._busy = False  # a request is being served (its first steps may have ended it)
        self._backlog = Backlog()  # bytes that arrived while a request was being served
        self._gauge = HeadGauge()  # the current request head against the limits
        self._idle_since = 0.0

    def _start(
        self, route: Route, facts: HeaderFacts | web.Response, body: bytes, keep_alive: bool
    ) -> None:
        """Serve the whole request just read (``LeanConnection`` does)."""
        raise NotImplementedError

    def _hand_off(self, received: bytes) -> None:
        """Give the connection to aiohttp with ``received``, the request's bytes read so
        far (``LeanConnection`` does)."""
        raise NotImplementedError

    def data_received(self, data: bytes) -> None:
        if self._busy or self._backlog:  # pipelined: parsed when the current answer has ended
            self._backlog.hold(data, self.transport)
            return
        self._take(data, 0)

    def _take(self, data: bytes, at: int) -> None:
        """Read a request from ``data[at:]`` (the next bytes of the connection)."""
        if not self._received:  # a request begins: its wait for the rest counts from here
            self._idle_since = self._loop.time()
            if self._serve_known(data, at):
                return
        if at:
            data = data[at:]
        self._received.append(data)
        try:
            self._parser.feed_data(data)
        except _HandOff:
            self._hand_off(b"".join(self._received))
        except httptools.HttpParserCallbackError as exc:
            if isinstance(exc.__context__, _Complete):
                self._complete()
            elif isinstance(exc.__context__, TooLarge):
                self._refuse()
            else:
                self._hand_off(b"".join(self._received))
        except httptools.HttpParserError:  # aiohttp answers it (400) and closes
            self._hand_off(b"".join(self._received))
        else:
            if not self._gauge.done and self._gauge.over(data):
                self._refuse()

    def _refuse(self) -> None:
        """A head over the limits: aiohttp, whose parser has the same ones (``core.protocol.limits``),
        answers its 400 and closes; only the bytes up to the limit were kept."""
        self._hand_off(b"".join(self._received))

    def _forget(self) -> None:
        """Drop what the connection holds (the parser refers back to it: a cycle that only
        the cyclic collector would free, with every byte held in it)."""
        self._parser = _DEAD_PARSER
        self._received, self._body, self._headers = [], [], CIMultiDict()
        self._backlog.clear()

    # httptools callbacks

    def on_url(self, url: bytes) -> None:
        self._url += url  # it may come in pieces
        self._gauge.on_url(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        self._gauge.on_header(lower, value)
        if self._gauge.doubled:  # aiohttp answers 400 at once, finished head or not
            raise _HandOff
        if lower in _HANDED_OFF_HEADERS:
            raise _HandOff
        if lower == b"content-length":
            if not value.isdigit() or self._length >= 0:  # a second one: aiohttp refuses it
                raise _HandOff
            self._length = int(value)
        elif (
            lower == b"authorization"
            and self._expected_auth is not None
            and not hmac.compare_digest(value, self._expected_auth)
        ):
            raise _HandOff  # aiohttp's middleware answers 401
        self._headers.add(
            name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape")
        )

    def on_headers_complete(self) -> None:
        self._gauge.done = True
        if not self._gauge.usable:
            raise _HandOff  # no Host (RFC 9112 section 3.2), or a header twice: aiohttp's 400
        parser = self._parser
        route = _RELAYED.get((parser.get_method(), self._url))
        if route is None or parser.get_http_version() != "1.1":
            raise _HandOff
        if not 0 <= self._length <= self._state.config.max_body_bytes:
            raise _HandOff  # no Content-Length, or more than the limit: aiohttp answers
        if self._expected_auth is not None and "Authorization" not in self._headers:
            raise _HandOff
        self._route = route

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        raise _Complete

    def _serve_known(self, data: bytes, at: int) -> bool:
        """Serve the request in ``data[at:]`` without parsing it, if its head is one served
        here before (``LeanSite.heads``) and its body is all in; False when it is not."""
        head_end = data.find(b"\r\n\r\n", at)
        if head_end < 0:
            return False
        found = head_key(data, head_end, at)
        if found is None:
            return False
        known = self._site.heads.get(found[0])
        length = found[1]
        size = head_end + 4 + length
        if known is None or size > len(data) or length > self._state.config.max_body_bytes:
            return False
        self._backlog.keep(data, size)  # served from there on, without a copy
        self._start(known.route, known.facts, data[head_end + 4 : size], known.keep_alive)
        return True

    def _complete(self) -> None:
        """A whole relayed request is in: serve it; bytes after it wait for the answer's end."""
        received = b"".join(self._received)
        body = b"".join(self._body)
        head_end = received.find(b"\r\n\r\n")
        size = head_end + 4 + self._length
        if head_end < 0 or size > len(received) or received[head_end + 4 : size] != body:
            self._hand_off(received)  # not framed as this parser read it: aiohttp decides
            return
        self._backlog.keep(received, size)
        keep_alive = self._parser.should_keep_alive()
        route, headers = self._route, self._headers
        assert route is not None
        self._received, self._body, self._headers = [], [], CIMultiDict()
        self._url, self._route, self._length = b"", None, -1
        self._gauge = HeadGauge()
        self._parser = httptools.HttpRequestParser(self)
        facts = header_facts(self._state.config, headers, shared=True)
        found = head_key(received, head_end)
        if found is not None and isinstance(facts, HeaderFacts):  # not one ``plan`` refuses
            heads = self._site.heads
            if len(heads) >= KNOWN_HEADS:
                heads.clear()
            heads[found[0]] = KnownHead(route, keep_alive, facts)
        self._start(route, facts, body, keep_alive)
