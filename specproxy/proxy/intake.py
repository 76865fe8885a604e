"""The request-reading half of the server's connections (``proxy.lean``).

``RequestReader`` feeds each read to ``httptools`` (``_take``), whose callbacks check the
head as it comes, in this order: its limits (``core.protocol.limits``: the finished parts
exactly, an unfinished head after each read, so that a head over one is refused before
more than one read past it is held) and headers (a header that may come once came twice,
no ``Host``, a ``Content-Length`` that is not one number: 400), the route
(``routes.RELAYED``, else ``routes.find``), an ``Expect`` (``100-continue`` on HTTP/1.1 is
answered at once, anything else is 417), the API key (401, but on ``routes.OPEN_PATHS``),
a path that is not a route (404) or a method it does not take (405), and a body over the
limit (413, declared or as it arrives, chunked or after decoding).

A request leaves it one of three ways: whole, on a relayed route, to ``_start``; whole,
for one of the proxy's own routes, to ``_start_own`` (``LeanConnection`` serves both); or
refused, to ``_refuse``, which answers and closes the connection without reading
further. A body is read whole before it is served, as sent or chunked, its
``Content-Encoding`` undone (``framing``: gzip, deflate).

A request head served before is not parsed again (``_serve_known``: by its ``head_key``,
its ``KnownHead``) when the whole request is in one read. Only plain heads (HTTP/1.1, a
``Content-Length``, none of ``_UNUSUAL``) on a relayed route, whose headers ``plan`` could
use, are kept: clients send the same head on every request but for its length.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import unquote

import httptools
from aiohttp.http_parser import SINGLETON_HEADERS
from multidict import CIMultiDict

from specproxy.core.protocol.headers import HeaderFacts, HeaderProblem, header_facts
from specproxy.core.protocol.limits import MAX_FIELD_BYTES, MAX_HEADERS, MAX_LINE_BYTES
from specproxy.core.records.model import Route
from specproxy.proxy.framing import DecodedTooLarge, Undecodable, chunked_end, decode_body
from specproxy.proxy.messages import (
    Request,
    Response,
    malformed,
    refusal,
    too_large,
    unauthorized,
)
from specproxy.proxy.routes import OPEN_PATHS, RELAYED, Handler, answering, find
from specproxy.proxy.state import ProxyState

if TYPE_CHECKING:
    from specproxy.proxy.lean import Backlog
    from specproxy.proxy.lean_site import LeanSite

_LINE_SO_FAR = MAX_FIELD_BYTES
_LINES_SO_FAR = MAX_HEADERS + 1
# Headers a request may carry once (aiohttp's list: a second one is a 400), Host included.
_SINGLE = frozenset(name.lower().encode() for name in SINGLETON_HEADERS)
KNOWN_HEADS = 1024  # request heads kept (``LeanSite.heads``); all dropped when full
_UNUSUAL = frozenset({b"expect", b"upgrade", b"transfer-encoding", b"content-encoding"})
_RELAYED = {(m.encode(), p.encode()): r for (m, p), r in RELAYED.items()}


class _Stop(Exception):
    """Raised inside a parser callback to stop the parser; the reason is the reader's
    ``_why`` (an exception's context is not: raised while another is handled, it is that)."""


_WHOLE = Response(0)  # ``_why`` when the request is whole


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


@dataclass(frozen=True, slots=True)
class KnownHead:
    """A request head served here before: its route, keep-alive and headers as read."""

    route: Route
    keep_alive: bool
    facts: HeaderFacts


class RequestReader(asyncio.Protocol):
    """A connection's reading half: requests parsed, known heads; see the module docstring
    for where a request goes."""

    __slots__ = (
        "_auth",
        "_body",
        "_body_size",
        "_busy",
        "_chunked",
        "_encoding",
        "_expect",
        "_expected_auth",
        "_fields",
        "_head_done",
        "_headers",
        "_idle_since",
        "_length",
        "_line",
        "_lines",
        "_loop",
        "_own",
        "_parser",
        "_received",
        "_route",
        "_singles",
        "_site",
        "_state",
        "_upgrade",
        "_url",
        "_why",
        "transport",
    )
    _loop: asyncio.AbstractEventLoop  # set when the connection is made
    _backlog: Backlog  # the connection's: what came behind the request being served
    # What the connection (``lean.LeanConnection``) does with a request read: serve a whole
    # relayed one (its route, header facts, body, keep-alive, and chunked: False for an
    # HTTP/1.0 client, whose stream cannot be), serve an own route's, or refuse one.
    _start: Callable[[Route, HeaderFacts | HeaderProblem, bytes, bool, bool], None]
    _start_own: Callable[[Handler, Request, bool], None]
    _refuse: Callable[[Response], None]

    def __init__(self, site: LeanSite, state: ProxyState, expected_auth: bytes | None) -> None:
        self._site = site
        self._state = state
        self._expected_auth = expected_auth
        self.transport: asyncio.Transport | None = None
        self._busy = False  # a request is being served (its first steps may have ended it)
        self._idle_since = 0.0
        self._why: Response | None = None  # why a callback stopped the parser (``_stop``)
        self._next_request()

    def _next_request(self) -> None:
        """What is read of one request, afresh (its parser too)."""
        self._parser = httptools.HttpRequestParser(self)
        self._received: list[bytes] = []  # the current request's bytes so far
        self._headers: CIMultiDict[str] = CIMultiDict()
        self._body: list[bytes] = []
        self._body_size = 0
        self._url = b""
        self._route: Route | None = None  # a relayed route's, else
        self._own: tuple[Handler, str, str, str] | None = None  # handler, path, query, target
        self._length = -1  # the Content-Length, -1 until one is read
        self._auth: bytes | None = None
        self._expect: bytes | None = None
        self._encoding = ""
        self._chunked = self._upgrade = self._head_done = False
        # the head against the limits: its last line's length, lines, headers (and trailers),
        # and the headers it may carry once (seen, so a second one is refused at once)
        self._line = self._lines = self._fields = 0
        self._singles: set[bytes] = set()

    def _take(self, data: bytes, at: int) -> None:
        """Read a request from ``data[at:]`` (the next bytes of the connection)."""
        if not self._received:  # a request begins: its wait for the rest counts from here
            self._idle_since = self._loop.time()
            if self._serve_known(data, at):
                return
        if at:
            data = data[at:]
        self._received.append(data)
        self._why = None
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if self._why is None:  # a bug in a callback (its exception is the context)
                raise RuntimeError("a request callback failed") from exc
        except httptools.HttpParserError:  # (an upgrade included: none is taken)
            self._why = malformed()
        else:
            if not self._head_done and self._head_over(data):
                self._why = malformed()
        why, self._why = self._why, None
        if why is _WHOLE:
            self._complete()
        elif why is not None:
            self._refuse(why)

    def _head_over(self, data: bytes) -> bool:
        """True when the head, still unfinished after ``data``, may be over the limits: a
        line (finished or not) or the count of lines past the bounds above."""
        first = data.find(b"\n")
        if first < 0:
            self._line += len(data)
            return self._line > _LINE_SO_FAR
        if self._line + first > _LINE_SO_FAR:
            return True
        last = data.rfind(b"\n")
        if last > first and max(map(len, data[first + 1 : last].split(b"\n"))) > _LINE_SO_FAR:
            return True
        self._line = len(data) - last - 1
        self._lines += data.count(b"\n")
        return self._line > _LINE_SO_FAR or self._lines > _LINES_SO_FAR

    def _stop(self, why: Response) -> NoReturn:
        """Stop the parser (from a callback): the request is whole (``_WHOLE``), or to be
        refused with ``why``."""
        self._why = why
        raise _Stop

    # httptools callbacks

    def on_url(self, url: bytes) -> None:
        self._url += url  # it may come in pieces
        if len(self._url) > MAX_LINE_BYTES:
            self._stop(malformed())

    def on_header(self, name: bytes, value: bytes) -> None:
        self._fields += 1
        if self._fields > MAX_HEADERS or len(name) > MAX_FIELD_BYTES:
            self._stop(malformed())
        if len(value) > MAX_FIELD_BYTES:
            self._stop(malformed())
        if self._head_done:  # a chunked body's trailer: within the limits, not a header
            return  # (a ``Host`` in it is no second ``Host``)
        lower = name.lower()
        if lower in _SINGLE:  # one that may come once came twice: aiohttp's 400 too
            if lower in self._singles:
                self._stop(malformed())
            self._singles.add(lower)
        if lower in _UNUSUAL:
            if lower == b"expect":
                self._expect = value
            elif lower == b"content-encoding":
                self._encoding = value.decode("latin-1")
            elif lower == b"transfer-encoding":
                self._chunked = True  # (``httptools`` takes only chunked, and decodes it)
            else:
                self._upgrade = True  # not given: the connection ends after the answer
        elif lower == b"content-length":
            if not value.isdigit() or self._length >= 0:
                self._stop(malformed())
            self._length = int(value)
        elif lower == b"authorization" and self._auth is None:  # the first one counts
            self._auth = value
        self._headers.add(
            name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape")
        )

    def on_headers_complete(self) -> None:
        self._head_done = True
        http11 = self._parser.get_http_version() == "1.1"  # (1.0, or 0.9 read as 1.0)
        if http11 and b"host" not in self._singles:  # HTTP/1.1 needs one (RFC 9112 3.2)
            self._stop(malformed())
        path, found = self._resolve()
        expect = self._expect
        ok_expect = http11 and expect is not None and expect.lower() == b"100-continue"
        if expect is not None and not ok_expect and not isinstance(found, Response):
            message = "the only Expect this proxy takes is 100-continue"
            self._stop(refusal(417, message, "expectation_failed"))
        expected = self._expected_auth
        if (
            expected is not None
            and path not in OPEN_PATHS
            and (self._auth is None or not hmac.compare_digest(self._auth, expected))
        ):
            self._stop(unauthorized())
        if isinstance(found, Response):  # a 404 or 405
            if self._length > 0 or self._chunked:  # with a body, which is not read
                found.close = True
                self._stop(found)
            self._own = (answering(found), path, "", "")  # else answered, and the connection kept
        limit = self._state.config.max_body_bytes
        if self._length > limit:
            self._stop(too_large(limit))
        if ok_expect and self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _resolve(self) -> tuple[str, Response | None]:
        """The request's path, and the 404 or 405 to answer if it is not a route;
        ``_route`` or ``_own`` set for one that is."""
        method = self._parser.get_method()
        self._route = _RELAYED.get((method, self._url))
        if self._route is not None:
            return "", None  # (a relayed route: not an open path)
        try:  # the path percent-decoded; the target as sent (from an absolute form too)
            parsed = httptools.parse_url(self._url)
        except httptools.HttpParserInvalidURLError:
            self._stop(malformed())
        raw_path = (parsed.path or b"/").decode("utf-8", "surrogateescape")
        query = (parsed.query or b"").decode("utf-8", "surrogateescape")
        target = f"{raw_path}?{query}" if query else raw_path
        path = unquote(raw_path, errors="surrogateescape")
        name = method.decode("latin-1")
        self._route = RELAYED.get((name, path))
        if self._route is not None:
            return path, None
        found = find(name, path)
        if isinstance(found, Response):
            return path, found
        self._own = (found, path, query, target)
        return path, None

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self._state.config.max_body_bytes:  # chunked, past the limit
            self._stop(too_large(self._state.config.max_body_bytes))
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._stop(_WHOLE)

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
        self._start(known.route, known.facts, data[head_end + 4 : size], known.keep_alive, True)
        return True

    def _request_end(self, received: bytes, head_end: int, body: bytes) -> int | None:
        """Where the request just parsed ends in ``received`` (its head ends at
        ``head_end``); None when its framing is not the one this reader found (then it is
        not served)."""
        if self._parser.get_http_version() == "0.9":  # a request line alone, then the close
            return received.find(b"\n") + 1
        if head_end < 0:
            return None
        start = head_end + 4
        if self._chunked:
            return chunked_end(received, start)
        end = start + max(self._length, 0)
        return end if received[start:end] == body and end <= len(received) else None

    def _complete(self) -> None:
        """A whole request is in: serve it; bytes after it wait for the answer's end."""
        received = b"".join(self._received)
        body = b"".join(self._body)
        head_end = received.find(b"\r\n\r\n")
        end = self._request_end(received, head_end, body)
        if end is None:
            self._refuse(malformed())
            return
        self._backlog.keep(received, end)
        http11 = self._parser.get_http_version() == "1.1"
        # HTTP/1.0: one request a connection (its keep-alive would need a header of its own)
        keep_alive = http11 and self._parser.should_keep_alive() and not self._upgrade
        route, own, headers, encoding = self._route, self._own, self._headers, self._encoding
        # a plain head (none of ``_UNUSUAL``, HTTP/1.1) may be kept as a known head
        unusual = self._expect is not None or self._chunked or self._upgrade or encoding
        plain = http11 and not unusual
        method = self._parser.get_method()
        self._next_request()
        cfg = self._state.config
        if encoding:
            try:
                body = decode_body(body, encoding, cfg.max_body_bytes)
            except Undecodable:
                message = f"the request body could not be read (Content-Encoding: {encoding[:40]})"
                self._refuse(refusal(400, message, "invalid_body_encoding"))
                return
            except DecodedTooLarge:
                self._refuse(too_large(cfg.max_body_bytes))
                return
        if own is not None:
            handler, path, query, target = own
            request = Request(method.decode("latin-1"), path, target, query, headers, body)
            self._start_own(handler, request, keep_alive)
            return
        assert route is not None
        facts = header_facts(
            headers, keep_auth=cfg.api_key is None, sticky_header=cfg.sticky_header, shared=plain
        )
        found = head_key(received, head_end) if plain else None
        if found is not None and isinstance(facts, HeaderFacts):  # not one ``plan`` refuses
            heads = self._site.heads
            if len(heads) >= KNOWN_HEADS:
                heads.clear()
            heads[found[0]] = KnownHead(route, keep_alive, facts)
        self._start(route, facts, body, keep_alive, http11)
