"""What aiohttp's server answers to the same bytes: a test oracle for the proxy's client side.

A small aiohttp ``web.Application``, served by aiohttp's own HTTP/1.1 server, that takes
the requests the proxy takes and answers them by the proxy's rules, but relays nothing:
``socket_fuzz`` writes the same bytes to the proxy and to this reference and compares the
first status. It models the client-side HTTP semantics only:

- framing, head limits and malformed bytes: aiohttp's parser, with the proxy's limits
  (``core.protocol.limits``), and a 400 that quotes nothing and logs nothing (aiohttp's
  default logs a traceback and echoes the bytes);
- ``Expect``: ``100-continue`` on HTTP/1.1 gets the interim ``100 Continue``, any other
  value or version a 417, on every route below (a path without one: aiohttp's own rule);
- the API key: with ``api_key``, every route but the proxy's open ones needs
  ``Authorization: Bearer <key>`` (401);
- the relayed routes (``proxy.routes.RELAYED``): the body read up to ``max_body_bytes``
  (413 past it; 400 when its ``Content-Encoding`` does not decode), parsed as the proxy
  parses it (``core.protocol.shaping``) with the proxy's request headers read as it reads them
  (``core.protocol.headers``): 400 when they cannot be used, else 200
  with ``RELAYED_BODY``. That 200 stands for "relayed": whatever the upstream answered;
- the proxy's own GETs (``/health``, ``/_specproxy/status``, ``/_specproxy/metrics``) and
  the relayed reads (``proxy.admin.READ_PATHS``): 200 (``/health``: with healthy
  servers; a read: relayed); the admin routes
  (``ADMIN_ROUTES``): the body read (413, or 400 when it is not JSON), then 200 (relayed);
  the weight updates (``REFUSED_PATHS``): 403; any other path or method: aiohttp's
  router (404, 405).

The route tables and limits are imported from the product, never copied, so the reference
cannot drift from them; the rules are written here again, so it does not share their code.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

import orjson
from aiohttp import web
from aiohttp.web_protocol import RequestHandler, RequestPayloadError
from aiohttp.web_request import BaseRequest

from specproxy.core.protocol.headers import (
    CATEGORY_HEADER,
    SIDE_HEADER,
    parse_category,
    parse_forced_side,
)
from specproxy.core.protocol.limits import MAX_FIELD_BYTES, MAX_HEADERS, MAX_LINE_BYTES
from specproxy.core.protocol.shaping import BadRequest, is_streaming, parse_body
from specproxy.core.records.model import Role
from specproxy.proxy import admin
from specproxy.proxy.config import DEFAULT_MAX_BODY_BYTES
from specproxy.proxy.routes import OPEN_PATHS as _OPEN_PATHS
from specproxy.proxy.routes import RELAYED

RELAYED_BODY = b'{"reference":"relayed"}'
"""The body of the reference's 200 to a request the proxy would relay."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_LIMIT = web.AppKey("limit", int)  # the body limit
_SIDES = web.AppKey("sides", frozenset)  # the configured servers


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)


def _relayed() -> web.Response:
    return web.Response(body=RELAYED_BODY, content_type="application/json")


async def _expect(request: web.Request) -> web.Response | None:
    """The ``Expect`` rule: ``100-continue`` on HTTP/1.1 is met, anything else is a 417."""
    if request.version >= (1, 1) and request.headers["Expect"].lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the final answer's head is still to come
        return None
    return _error(417, "the only Expect taken is 100-continue")


async def _body(request: web.Request) -> bytes | web.Response:
    """The whole body, or the answer when it cannot be read: 413 at once when its
    ``Content-Length`` is over the limit, 413 when a chunked one grows past it, 400 when
    its ``Content-Encoding`` does not decode. Both close the connection."""
    limit = request.app[_LIMIT]
    try:
        if (request.content_length or 0) > limit:
            raise web.HTTPRequestEntityTooLarge(limit, request.content_length or 0)
        return await request.read()  # ``client_max_size`` is ``limit``
    except web.HTTPRequestEntityTooLarge:
        resp = _error(413, f"request body is larger than {limit} bytes")
    except RequestPayloadError:
        resp = _error(400, "the request body could not be read")
        request.content.feed_eof()  # aiohttp would read the rest after the answer, and fail
    resp.force_close()
    return resp


def _header_problem(request: web.Request) -> str | None:
    """What makes the proxy's request headers unusable (side, category), or None."""
    try:
        side = parse_forced_side(request.headers.get(SIDE_HEADER))
    except ValueError:
        return f"{SIDE_HEADER} is neither side"
    if side is not None and side not in request.app[_SIDES]:
        return f"no {side} server is configured"
    category = request.headers.get(CATEGORY_HEADER)
    if category is not None and parse_category(category) is None:
        return f"{CATEGORY_HEADER} is not a category"
    return None


async def _generation(request: web.Request) -> web.StreamResponse:
    """A relayed route: 200 (relayed) when its body and headers can be used, else 400/413."""
    raw = await _body(request)
    if isinstance(raw, web.Response):
        return raw
    try:
        is_streaming(parse_body(raw))
    except BadRequest as exc:
        return _error(400, str(exc))
    problem = _header_problem(request)
    return _relayed() if problem is None else _error(400, problem)


async def _own(_request: web.Request) -> web.StreamResponse:
    """The proxy's own GETs and the relayed reads."""
    return _relayed()


async def _admin(request: web.Request) -> web.StreamResponse:
    """An admin call: relayed when its body, if any, is JSON."""
    raw = await _body(request)
    if isinstance(raw, web.Response):
        return raw
    if raw.strip():
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _error(400, f"{request.path}: the body must be JSON")
    return _relayed()


async def _refused(_request: web.Request) -> web.StreamResponse:
    return _error(403, "weight updates are not relayed")


def _auth(expected: bytes) -> Any:
    @web.middleware
    async def check_key(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in _OPEN_PATHS:
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
            if not hmac.compare_digest(given, expected):
                return _error(401, "missing or wrong API key")
        return await handler(request)

    return check_key


def reference_app(
    *,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    api_key: str | None = None,
    sides: Iterable[Role] = tuple(Role),
) -> web.Application:
    """The reference for a proxy with these settings (``sides``: the configured servers)."""
    middlewares = [] if api_key is None else [_auth(f"Bearer {api_key}".encode())]
    app = web.Application(client_max_size=max_body_bytes, middlewares=middlewares)
    app[_LIMIT] = max_body_bytes
    app[_SIDES] = frozenset(sides)
    add = app.router.add_route
    for method, path in RELAYED:
        add(method, path, _generation, expect_handler=_expect)
    gets = ("/health", "/_specproxy/status", "/_specproxy/metrics", *admin.READ_PATHS)
    for path in gets:
        app.router.add_get(path, _own, allow_head=False, expect_handler=_expect)
    for path, methods in admin.ADMIN_ROUTES.items():
        for method in methods:
            add(method, path, _admin, expect_handler=_expect)
    for path in admin.REFUSED_PATHS:
        add("POST", path, _refused, expect_handler=_expect)
    return app


class _QuietHandler(RequestHandler):
    """aiohttp's connection handler, whose refusals quote nothing and log nothing."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500:  # the reference itself failed: aiohttp's answer, and its log line
            return super().handle_error(request, status, exc)
        if request.writer.output_size > 0:
            raise ConnectionError("the response had begun; it cannot become an error response")
        resp = _error(status, "the request could not be parsed as HTTP")
        resp.force_close()
        return resp

    def log_exception(self, *args: Any, **kwargs: Any) -> None:
        """A body left unread whose ``Content-Encoding`` does not decode is a refused
        request, not a failure (aiohttp reads on after the answer to drop it)."""
        if not isinstance(kwargs.get("exc_info"), RequestPayloadError):
            super().log_exception(*args, **kwargs)


class _QuietServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _QuietHandler(self, loop=self._loop, **self._kwargs)


class _Runner(web.AppRunner):
    """``web.AppRunner`` with ``_QuietHandler``, the head limits of ``core.protocol.limits``
    and handlers cancelled when their client goes, as the proxy's requests are."""

    def __init__(self, app: web.Application) -> None:
        limits: dict[str, Any] = {"max_line_size": MAX_LINE_BYTES, "max_headers": MAX_HEADERS}
        limits["handler_cancellation"] = True  # a client gone cancels the handler, as in serve
        super().__init__(app, access_log=None, max_field_size=MAX_FIELD_BYTES, **limits)

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _QuietServer  # aiohttp offers no public hook for the handler class
        return server


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` served by aiohttp on 127.0.0.1 (a free port); yields its base URL."""
    runner = _Runner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
