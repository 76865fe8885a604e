"""The aiohttp application: thin handlers over ``policy``, ``shaping`` and ``relay``.

Routes: the three generation routes (``POST``; ``PUT /generate`` too, as SGLang
accepts it), ``GET /health`` (the proxy's own health plus each server's),
``/_specproxy/metrics`` (Prometheus) and ``/_specproxy/status`` (JSON). SGLang's other
routes (reads, admin calls, tokenizer helpers; weight updates refused) are in
``proxy.admin``: relayed to the primary only, never mirrored, never recorded.

Auth: with ``api_key`` set, every route but ``/health`` and ``/_specproxy/metrics``
needs ``Authorization: Bearer <key>`` (as SGLang exempts its health and metrics), and
the client's Authorization is then not sent upstream. Without it, the client's
Authorization goes upstream unchanged unless a per-side upstream key is configured.
Prompt text, output text and keys never reach a log line from here. The request headers
``x-specproxy-side``, ``x-specproxy-warmup`` and ``x-specproxy-category`` (``core.protocol.headers``)
are read here and never sent upstream.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from aiohttp import web

from specproxy.backends.base import (
    FRAMING_HEADERS,
    EventFilter,
    SharedHeaders,
    UpstreamRequest,
)
from specproxy.core.protocol.headers import (
    CATEGORY_HEADER,
    CATEGORY_MAX_CHARS,
    SIDE_HEADER,
    WARMUP_HEADER,
    parse_category,
)
from specproxy.core.records.model import Role, Route, SendMode
from specproxy.errors import SpecproxyError
from specproxy.proxy import admin, lifecycle
from specproxy.proxy.admin import PROMETHEUS_TEXT
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.policy import Decision, ProxiedRequest, parse_forced_side, sticky_user
from specproxy.proxy.responses import bad_request, error_response, expect_handler, json_response
from specproxy.proxy.shaping import BadRequest, is_streaming, parse_body, plan_upstream
from specproxy.proxy.state import STATE, ProxyState

_OPEN_PATHS = frozenset({"/health", "/_specproxy/metrics"})
RELAYED: dict[tuple[str, str], Route] = {("POST", r.value): r for r in Route}
RELAYED[("PUT", Route.GENERATE.value)] = Route.GENERATE
"""(method, path) of each relayed generation route (``build_app`` and ``proxy.lean``)."""
_NOT_FORWARDED = FRAMING_HEADERS | {
    "host",
    "accept-encoding",
    "content-encoding",  # aiohttp has already decoded the request body
    "proxy-authorization",
    "expect",  # met here (aiohttp's 100 Continue); the body goes upstream whole
    SIDE_HEADER,
    WARMUP_HEADER,
    CATEGORY_HEADER,
}
_CANONICAL = {"authorization": "Authorization", "content-type": "Content-Type"}
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _BodyTooLarge(Exception):
    pass


def upstream_headers(headers: Mapping[str, str], *, keep_auth: bool) -> dict[str, str]:
    """The client's headers to send upstream (framing, our own and maybe auth removed).

    The only place they are filtered: the backend sends an UpstreamRequest's headers as given.
    """
    out: dict[str, str] = {}
    for name, value in headers.items():
        lower = name.lower()
        if lower in _NOT_FORWARDED or (lower == "authorization" and not keep_auth):
            continue
        out[_CANONICAL.get(lower, name)] = value
    return out


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole request body, or ``_BodyTooLarge`` as soon as it exceeds ``limit`` bytes."""
    length = request.content_length
    if length is not None:
        if length > limit:
            raise _BodyTooLarge
        return await request.read()
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise _BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> web.Response:
    resp = error_response(
        413,
        f"request body is larger than the limit of {limit} bytes",
        type_="invalid_request_error",
        code="body_too_large",
    )
    resp.force_close()  # the rest of the body was not read
    return resp


async def _proxied_request(
    request: web.Request, state: ProxyState, route: Route
) -> ProxiedRequest | web.Response:
    """Read, parse and decide; an error response when the client's request cannot be used."""
    arrived_us = state.clock.now_us()
    try:
        raw = await read_body(request, state.config.max_body_bytes)
    except _BodyTooLarge:
        return _too_large(state.config.max_body_bytes)
    except web.RequestPayloadError:  # a body its Content-Encoding does not decode, a bad chunk
        encoding = request.headers.get("Content-Encoding", "identity")
        resp = bad_request(
            f"the request body could not be read (Content-Encoding: {encoding[:40]})",
            code="invalid_body_encoding",
        )
        resp.force_close()
        request.content.feed_eof()  # aiohttp would read the rest after it, and fail again
        return resp
    return decide_request(state, route, request.headers, raw, arrived_us)


class RequestIds:
    """Request ids: 16 hex digits, a random prefix drawn once per process and a counter.

    Unique within a run (each worker of ``serve --workers N`` draws its own prefix; a
    forked child draws anew), without a system call per request as ``secrets.token_hex``
    makes; after 2**32 ids a new prefix is drawn."""

    __slots__ = ("_next", "_prefix")

    def __init__(self) -> None:
        self._prefix = ""
        self._next = 1 << 32
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        """Draw the next id from a new prefix."""
        self._next = 1 << 32

    def __call__(self) -> str:
        n = self._next
        if n >= 1 << 32:
            self._prefix = secrets.token_hex(4)
            n = 0
        self._next = n + 1
        return f"{self._prefix}{n:08x}"


_request_ids = RequestIds()


@dataclass(frozen=True, slots=True)
class HeaderFacts:
    """What ``plan`` reads from a request's headers: a function of the headers alone, so
    ``proxy.lean`` keeps it for a request head it has seen before (``upstream`` is then
    ``SharedHeaders``, shared by those requests and read only)."""

    forced: Role | None  # x-specproxy-side
    category: str | None  # x-specproxy-category
    warmup: bool  # x-specproxy-warmup
    sticky: str | None  # the sticky header's value, when one is configured
    upstream: dict[str, str]  # the headers to send upstream (``upstream_headers``)


def header_facts(
    cfg: ProxyConfig, headers: Mapping[str, str], *, shared: bool = False
) -> HeaderFacts | web.Response:
    """``headers`` read for ``plan``; an error response when they cannot be used.

    ``shared``: the facts will serve many requests (``proxy.lean``'s known heads), so the
    upstream headers are ``SharedHeaders``, whose upstream head a backend keeps."""
    try:
        forced = parse_forced_side(headers.get(SIDE_HEADER))
    except ValueError as exc:
        return bad_request(str(exc), code="invalid_side_header", param=SIDE_HEADER)
    category = headers.get(CATEGORY_HEADER)
    if category is not None and (category := parse_category(category)) is None:
        message = f"{CATEGORY_HEADER} must be 1 to {CATEGORY_MAX_CHARS} printable ASCII characters"
        return bad_request(message, code="invalid_category_header", param=CATEGORY_HEADER)
    keep_auth = cfg.api_key is None
    return HeaderFacts(
        forced,
        category,
        headers.get(WARMUP_HEADER, "").strip() in {"1", "true"},
        None if cfg.sticky_header is None else headers.get(cfg.sticky_header),
        (SharedHeaders if shared else dict)(upstream_headers(headers, keep_auth=keep_auth)),
    )


class Planned(NamedTuple):
    """A request ``plan`` has decided: what its upstream request needs, and the rest of
    its ``ProxiedRequest`` (made by ``proxied_request``)."""

    obj: dict[str, Any]  # the client's body, parsed
    decision: Decision
    upstream: UpstreamRequest
    drop_event: EventFilter | None
    facts: HeaderFacts
    arrived_us: int


def plan(
    state: ProxyState,
    route: Route,
    facts: HeaderFacts | web.Response,
    raw: bytes,
    arrived_us: int,
) -> Planned | web.Response:
    """Parse a whole request body and decide its sides; an error response when it cannot be used.

    ``facts``: ``header_facts`` of the request's headers (their error response, if any, is
    returned after the body's: a body that cannot be used is named first)."""
    cfg = state.config
    try:
        obj = parse_body(raw)
        stream = is_streaming(obj)
    except BadRequest as exc:
        return bad_request(str(exc), code="invalid_body")
    if isinstance(facts, web.Response):
        return facts
    sticky = sticky_user(obj) if cfg.sticky_user else facts.sticky
    assert state.policy is not None
    decision = state.policy.decide(forced=facts.forced, sticky=sticky)
    if decision.primary not in state.backends:
        return bad_request(
            f"no {decision.primary} server is configured", code="side_not_configured"
        )
    allowed = state.allowed_injection(decision.primary, decision.shadow)
    body = plan_upstream(route, raw, obj, stream=stream, allowed=allowed)
    upstream = UpstreamRequest(route, body.body, stream, facts.upstream)
    return Planned(obj, decision, upstream, body.drop_event, facts, arrived_us)


def proxied_request(state: ProxyState, planned: Planned) -> ProxiedRequest:
    """The ``ProxiedRequest`` of a planned request (counted in the sampling tally): what
    only its answer and records need, so ``proxy.lean`` makes it after the upstream write."""
    state.sampling.observe(planned.upstream.route, planned.obj)
    facts = planned.facts
    return ProxiedRequest(
        _request_ids(),
        planned.decision,
        planned.upstream,
        planned.drop_event,
        warmup=facts.warmup,
        arrived_us=planned.arrived_us,
        client_body=planned.obj if state.config.record else None,
        category=facts.category,
    )


def decide_request(
    state: ProxyState, route: Route, headers: Mapping[str, str], raw: bytes, arrived_us: int
) -> ProxiedRequest | web.Response:
    """The aiohttp handlers' way: ``header_facts``, ``plan``, then ``proxied_request``
    (``headers``: case-insensitive)."""
    planned = plan(state, route, header_facts(state.config, headers), raw, arrived_us)
    return planned if isinstance(planned, web.Response) else proxied_request(state, planned)


def _generation(route: Route) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        proxied = await _proxied_request(request, state, route)
        if isinstance(proxied, web.Response):
            return proxied
        assert state.relay is not None
        return await state.relay.serve(request, proxied)

    handle.__name__ = f"handle_{route.name.lower()}"
    return handle


async def _backend_health(state: ProxyState, role: Role) -> dict[str, Any]:
    cfg = state.config
    url = cfg.url(role)
    t0 = state.clock.now_us()
    try:
        status, _ = await state.backends[role].get("/health", timeout_s=cfg.health_timeout_s)
    except SpecproxyError as exc:
        return {"url": url, "healthy": False, "status": None, "error": str(exc)}
    elapsed_us = state.clock.now_us() - t0
    return {"url": url, "healthy": status == 200, "status": status, "latency_us": elapsed_us}


async def handle_health(request: web.Request) -> web.StreamResponse:
    """200 when every side that answers clients is healthy, else 503; JSON with each side."""
    state = request.app[STATE]
    cfg = state.config
    sides = cfg.sides
    results = await asyncio.gather(*(_backend_health(state, r) for r in sides))
    backends = dict(zip((str(r) for r in sides), results, strict=True))
    serving = sides if cfg.mode is SendMode.SPLIT else (cfg.primary,)
    healthy = all(backends[str(r)]["healthy"] for r in serving if str(r) in backends)
    body = {"status": "ok" if healthy else "unhealthy", "proxy": "ok", "backends": backends}
    return json_response(body, status=200 if healthy else 503)


async def handle_status(request: web.Request) -> web.StreamResponse:
    """The proxy's JSON status: configuration summary and per-side counts."""
    state = request.app[STATE]
    cfg = state.config
    if state.relay is not None:
        state.relay.records.flush()  # what has ended is counted, also if its record is still waiting
    sides = state.metrics.status()
    for role in Role:
        sides[str(role)].update(
            url=cfg.url(role), version=state.version(role), fingerprint=state.fingerprint(role)
        )
    shadows = state.shadows
    return json_response(
        {
            "experiment_id": state.experiment_id,
            "run_dir": str(state.run_dir),
            "mode": str(cfg.mode),
            "primary": str(cfg.primary),
            "split": cfg.split,
            "uptime_s": round(state.clock.now_us() / 1e6, 3),
            "workers": cfg.workers,
            "worker": None if state.worker is None else state.worker.index,
            "pid": os.getpid(),
            "shadow_in_flight": 0 if shadows is None else shadows.in_flight,
            "max_shadow_in_flight": cfg.max_shadow_in_flight,
            "sides": sides,
        }
    )


async def handle_metrics(request: web.Request) -> web.StreamResponse:
    """The proxy's own Prometheus metrics."""
    state = request.app[STATE]
    if state.relay is not None:
        state.relay.records.flush()  # what has ended is counted, also if its record is still waiting
    text = state.metrics.render()
    return web.Response(body=text.encode(), headers={"Content-Type": PROMETHEUS_TEXT})


def _auth_middleware(expected: bytes) -> Any:

    @web.middleware
    async def check_key(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in _OPEN_PATHS:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return error_response(
                    401,
                    "missing or wrong API key",
                    type_="authentication_error",
                    code="invalid_api_key",
                )
        return await handler(request)

    return check_key


def build_app(state: ProxyState) -> web.Application:
    """The proxy application for ``state`` (whose parts the lifecycle contexts fill in)."""
    cfg = state.config
    expected = cfg.client_authorization
    middlewares = [_auth_middleware(expected)] if expected is not None else []
    app = web.Application(client_max_size=cfg.max_body_bytes, middlewares=middlewares)
    app[STATE] = state
    app.cleanup_ctx.extend([lifecycle.upstreams, lifecycle.recording, lifecycle.relaying])
    app.on_shutdown.append(lifecycle.mark_shutdown)
    for (method, path), route in RELAYED.items():
        app.router.add_route(method, path, _generation(route), expect_handler=expect_handler)
    for path, handler in (
        ("/health", handle_health),
        ("/_specproxy/metrics", handle_metrics),
        ("/_specproxy/status", handle_status),
    ):
        app.router.add_get(path, handler, allow_head=False, expect_handler=expect_handler)
    admin.add_routes(app)
    return app
