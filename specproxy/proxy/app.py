"""The aiohttp application: thin handlers over ``policy``, ``shaping`` and ``relay``.

Routes: the three generation routes (``POST``; ``PUT /generate`` too, as SGLang
accepts it), ``GET /health`` (the proxy's own health plus each server's), the SGLang
read endpoints in ``READ_PATHS`` (passed to the primary), ``/_specproxy/metrics``
(Prometheus) and ``/_specproxy/status`` (JSON).

Auth: with ``api_key`` set, every route but ``/health`` and ``/_specproxy/metrics``
needs ``Authorization: Bearer <key>`` (as SGLang exempts its health and metrics), and
the client's Authorization is then not sent upstream. Without it, the client's
Authorization goes upstream unchanged unless a per-side upstream key is configured.
Prompt text, output text and keys never reach a log line from here.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from specproxy.backends.base import FRAMING_HEADERS, UpstreamRequest
from specproxy.core.headers import SIDE_HEADER, WARMUP_HEADER
from specproxy.core.launch import redact
from specproxy.core.model import Role, Route, SendMode
from specproxy.errors import BackendTimeout, SpecproxyError
from specproxy.proxy import lifecycle
from specproxy.proxy.policy import parse_forced_side, sticky_key
from specproxy.proxy.relay import ProxiedRequest
from specproxy.proxy.responses import bad_request, error_response, json_response
from specproxy.proxy.shaping import BadRequest, is_streaming, parse_body, plan_upstream
from specproxy.proxy.state import STATE, ProxyState

READ_PATHS = (
    "/v1/models",
    "/v1/models/{model}",
    "/health_generate",
    "/ready",
    "/ping",
    "/server_info",
    "/get_server_info",
    "/model_info",
    "/get_model_info",
    "/v1/loads",
    "/get_load",
    "/metrics",
)
_OPEN_PATHS = frozenset({"/health", "/_specproxy/metrics"})
_NOT_FORWARDED = FRAMING_HEADERS | {
    "host",
    "accept-encoding",
    "content-encoding",  # aiohttp has already decoded the request body
    "proxy-authorization",
    SIDE_HEADER,
    WARMUP_HEADER,
}
_CANONICAL = {"authorization": "Authorization", "content-type": "Content-Type"}
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
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
    """Parse and decide; an error response when the client's request cannot be used."""
    cfg = state.config
    arrived_us = state.clock.now_us()
    try:
        raw = await read_body(request, cfg.max_body_bytes)
    except _BodyTooLarge:
        return _too_large(cfg.max_body_bytes)
    try:
        obj = parse_body(raw)
        stream = is_streaming(obj)
        forced = parse_forced_side(request.headers.get(SIDE_HEADER))
    except BadRequest as exc:
        return bad_request(str(exc), code="invalid_body")
    except ValueError as exc:
        return bad_request(str(exc), code="invalid_side_header", param=SIDE_HEADER)
    sticky = sticky_key(request.headers, obj, header=cfg.sticky_header, use_user=cfg.sticky_user)
    assert state.policy is not None
    decision = state.policy.decide(forced=forced, sticky=sticky)
    if decision.primary not in state.backends:
        return bad_request(
            f"no {decision.primary} server is configured", code="side_not_configured"
        )
    state.sampling.observe(route, obj)
    warmup = request.headers.get(WARMUP_HEADER, "").strip() in {"1", "true"}
    allowed = state.allowed_injection(decision.primary, decision.shadow)
    plan = plan_upstream(route, raw, obj, stream=stream, allowed=allowed)
    headers = upstream_headers(request.headers, keep_auth=cfg.api_key is None)
    upstream = UpstreamRequest(route, plan.body, stream, headers)
    return ProxiedRequest(
        secrets.token_hex(8),
        decision,
        upstream,
        plan.drop_event,
        warmup=warmup,
        arrived_us=arrived_us,
        client_body=obj if cfg.record else None,
    )


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


def _bearer(header: str | None) -> str | None:
    if header and header[:7].lower() == "bearer ":
        return header[7:].strip() or None
    return None


def _content_type(path: str, body: bytes) -> str | None:
    if not body:
        return None
    if path == "/metrics":
        return PROMETHEUS_TEXT
    return "application/json" if body.lstrip()[:1] in (b"{", b"[") else "text/plain"


def redact_body(body: bytes) -> bytes:
    """``body`` with every credential removed when it is JSON holding one (``core.launch.redact``).

    SGLang's ``/server_info`` carries ``api_key`` and ``admin_api_key`` verbatim; a relayed
    read must never hand them to the proxy's clients. Bodies without a secret pass byte for byte.
    """
    if body.lstrip()[:1] not in (b"{", b"["):
        return body
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    cleaned = redact(obj)
    return body if cleaned == obj else orjson.dumps(cleaned)


async def handle_read(request: web.Request) -> web.StreamResponse:
    """Pass a read-only SGLang endpoint to the primary (status and body as the server sent them)."""
    state = request.app[STATE]
    cfg = state.config
    side = cfg.primary if cfg.primary in state.backends else next(iter(state.backends))
    client_key = None
    if cfg.upstream_key(side) is None and cfg.api_key is None:
        client_key = _bearer(request.headers.get("Authorization"))
    try:
        status, body = await state.backends[side].get(
            request.path_qs, timeout_s=cfg.first_byte_timeout_s, api_key=client_key
        )
    except BackendTimeout as exc:
        return error_response(504, str(exc), type_="upstream_error", code="upstream_timeout")
    except SpecproxyError as exc:
        return error_response(502, str(exc), type_="upstream_error", code="upstream_unreachable")
    body = redact_body(body)
    resp = web.Response(status=status, body=body)
    content_type = _content_type(request.path, body)
    if content_type is not None:
        resp.headers["Content-Type"] = content_type
    return resp


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
            "shadow_in_flight": 0 if shadows is None else shadows.in_flight,
            "max_shadow_in_flight": cfg.max_shadow_in_flight,
            "sides": sides,
        }
    )


async def handle_metrics(request: web.Request) -> web.StreamResponse:
    """The proxy's own Prometheus metrics."""
    text = request.app[STATE].metrics.render()
    return web.Response(body=text.encode(), headers={"Content-Type": PROMETHEUS_TEXT})


def _auth_middleware(api_key: str) -> Any:
    expected = f"Bearer {api_key}".encode()

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
    middlewares = [_auth_middleware(cfg.api_key)] if cfg.api_key else []
    app = web.Application(client_max_size=cfg.max_body_bytes, middlewares=middlewares)
    app[STATE] = state
    app.cleanup_ctx.extend([lifecycle.upstreams, lifecycle.recording, lifecycle.relaying])
    app.on_shutdown.append(lifecycle.mark_shutdown)
    for route in Route:
        app.router.add_post(route.value, _generation(route))
    app.router.add_put(Route.GENERATE.value, _generation(Route.GENERATE))
    app.router.add_get("/health", handle_health, allow_head=False)
    app.router.add_get("/_specproxy/metrics", handle_metrics, allow_head=False)
    app.router.add_get("/_specproxy/status", handle_status, allow_head=False)
    for path in READ_PATHS:
        app.router.add_get(path, handle_read, allow_head=False)
    return app
