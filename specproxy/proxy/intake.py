"""The request-reading half of the server's connections (``proxy.lean``).

``RequestReader`` is the ``asyncio.Protocol`` side that reads requests: each read goes to
``httptools`` (``data_received``), whose callbacks check the head as it comes, in this
order: the head's limits and headers (``framing.HeadGauge``; a header that may come once
came twice, no ``Host``, a ``Content-Length`` that is not one number: 400), the route
(``app.RELAYED``, else ``routes.find``), an ``Expect`` (``100-continue`` on HTTP/1.1 is
answered at once, anything else is 417), the API key (401, but on ``routes.OPEN_PATHS``),
a path that is not a route (404) or a method it does not take (405), and a body over the
limit (413, declared or as it arrives, chunked or after decoding).

A request leaves it one of three ways: whole, on a relayed route, to ``_start``; whole,
for one of the proxy's own routes, to ``_start_own`` (``LeanConnection`` serves both); or
refused, to ``_refuse``, which answers and closes the connection without reading
further. A body is read whole before it is served, as sent or chunked
(``framing.chunked_end`` finds its end), its ``Content-Encoding`` undone
(``framing.decode_body``: gzip, deflate).

A request head served before is not parsed again (``_serve_known``): ``framing.head_key``
(the head less its ``Content-Length`` value) finds what was read from it the first time
(``framing.KnownHead``: route, keep-alive, ``app.HeaderFacts``), when the whole request
is in one read. Only plain heads (HTTP/1.1, a ``Content-Length``, none of ``Expect``,
``Transfer-Encoding``, ``Content-Encoding``, ``Upgrade``) on a relayed route, whose
headers ``plan`` could use, are kept, at most ``framing.KNOWN_HEADS`` (all dropped when
full): clients send the same head on every request but for its length. Bytes pipelined
behind a request in flight wait in the connection's ``framing.Backlog``.

A closed connection drops its parser and buffers at once (``_forget``: the parser refers
back to the reader, a cycle only the collector would free).
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import unquote

import httptools
from multidict import CIMultiDict

from specproxy.core.records.model import Route
from specproxy.proxy.app import RELAYED, HeaderFacts, header_facts
from specproxy.proxy.framing import (
    KNOWN_HEADS,
    Backlog,
    DecodedTooLarge,
    HeadGauge,
    KnownHead,
    Undecodable,
    chunked_end,
    decode_body,
    head_key,
)
from specproxy.proxy.messages import (
    Request,
    Response,
    malformed,
    refusal,
    too_large,
    unauthorized,
)
from specproxy.proxy.routes import OPEN_PATHS, Handler, answering, find
from specproxy.proxy.state import ProxyState

if TYPE_CHECKING:
    from specproxy.proxy.lean_site import LeanSite

_UNUSUAL = frozenset({b"expect", b"upgrade", b"transfer-encoding", b"content-encoding"})
_RELAYED = {(m.encode(), p.encode()): r for (m, p), r in RELAYED.items()}


class _Stop(Exception):
    """Raised inside a parser callback to stop the parser; the reason is the reader's
    ``_why`` (an exception's context is not: raised while another is handled, it is that)."""


_WHOLE = Response(0)  # ``_why`` when the request is whole
_DEAD_PARSER = httptools.HttpRequestParser(object())  # a closed connection's: holds nothing


def split_target(url: bytes) -> tuple[str, str, str] | None:
    """A request-target's path (percent-decoded), query, and the target to send on (its
    path and query as sent, from an absolute form too); None when it is not one."""
    try:
        parsed = httptools.parse_url(url)
    except httptools.HttpParserInvalidURLError:
        return None
    raw_path = (parsed.path or b"/").decode("utf-8", "surrogateescape")
    query = (parsed.query or b"").decode("utf-8", "surrogateescape")
    target = f"{raw_path}?{query}" if query else raw_path
    return unquote(raw_path, errors="surrogateescape"), query, target


class RequestReader(asyncio.Protocol):
    """A connection's reading half: requests parsed, known heads, the backlog; see the
    module docstring for where a request goes."""

    __slots__ = (
        "_auth",
        "_backlog",
        "_body",
        "_body_size",
        "_busy",
        "_chunked",
        "_encoding",
        "_expect",
        "_expected_auth",
        "_gauge",
        "_headers",
        "_idle_since",
        "_length",
        "_loop",
        "_own",
        "_parser",
        "_received",
        "_route",
        "_site",
        "_state",
        "_upgrade",
        "_url",
        "_why",
        "transport",
    )
    _loop: asyncio.AbstractEventLoop  # set when the connection is made
    # What the connection (``lean.LeanConnection``) does with a request read: serve a whole
    # relayed one (its route, header facts, body, keep-alive, and chunked: False for an
    # HTTP/1.0 client, whose stream cannot be), serve an own route's, or refuse one.
    _start: Callable[[Route, HeaderFacts | Response, bytes, bool, bool], None]
    _start_own: Callable[[Handler, Request, bool], None]
    _refuse: Callable[[Response], None]

    def __init__(self, site: LeanSite, state: ProxyState, expected_auth: bytes | None) -> None:
        self._site = site
        self._state = state
        self._expected_auth = expected_auth
        self.transport: asyncio.Transport | None = None
        self._backlog = Backlog()  # bytes that arrived while a request was being served
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
        self._chunked = self._upgrade = False
        self._gauge = HeadGauge()  # the current request head against the limits

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
        self._why = None
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:
            if self._why is None:  # a bug in a callback (its exception is the context)
                raise RuntimeError("a request callback failed") from exc
        except httptools.HttpParserError:  # (an upgrade included: none is taken)
            self._why = malformed()
        else:
            if not self._gauge.done and self._gauge.over(data):
                self._why = malformed()
        why, self._why = self._why, None
        if why is _WHOLE:
            self._complete()
        elif why is not None:
            self._refuse(why)

    def _stop(self, why: Response) -> NoReturn:
        """Stop the parser (from a callback): the request is whole (``_WHOLE``), or to be
        refused with ``why``."""
        self._why = why
        raise _Stop

    def _forget(self) -> None:
        """Drop what the connection holds (the parser refers back to it: a cycle that only
        the cyclic collector would free, with every byte held in it)."""
        self._parser = _DEAD_PARSER
        self._received, self._body, self._headers = [], [], CIMultiDict()
        self._backlog.clear()

    # httptools callbacks

    def on_url(self, url: bytes) -> None:
        self._url += url  # it may come in pieces
        if not self._gauge.on_url(len(url)):
            self._stop(malformed())

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._gauge.done:  # a chunked body's trailer: within the limits, not a header
            if not self._gauge.on_trailer(name, value):
                self._stop(malformed())
            return
        lower = name.lower()
        if not self._gauge.on_header(lower, value):  # over a limit, or a header twice
            self._stop(malformed())
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
        self._gauge.done = True
        http11 = self._parser.get_http_version() == "1.1"  # (1.0, or 0.9 read as 1.0)
        if http11 and not self._gauge.has_host():
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
        split = split_target(self._url)
        if split is None:
            self._stop(malformed())
        path, query, target = split
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
        facts = header_facts(cfg, headers, shared=plain)
        found = head_key(received, head_end) if plain else None
        if found is not None and isinstance(facts, HeaderFacts):  # not one ``plan`` refuses
            heads = self._site.heads
            if len(heads) >= KNOWN_HEADS:
                heads.clear()
            heads[found[0]] = KnownHead(route, keep_alive, facts)
        self._start(route, facts, body, keep_alive, http11)
