"""The proxy's own routes: every request the server answers that is not relayed for measuring.

``GET /health`` (the proxy's own health plus each server's), ``/_specproxy/metrics``
(Prometheus) and ``/_specproxy/status`` (JSON), and SGLang's other routes, relayed to the
primary only (``proxy.admin``'s tables). ``find`` gives a request's handler, or the
answer to a path that is not a route (404) or a method a route does not take (405, with
``Allow``). The generation routes (``RELAYED``) are not in the table: the server relays
them itself; here they count only for the 405 of another method.

Auth: with ``api_key`` set, every route but ``OPEN_PATHS`` needs
``Authorization: Bearer <key>`` (as SGLang exempts its health and metrics); the server
checks it (``proxy.intake``) before anything else of the request is read.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

from multidict import CIMultiDict

from specproxy.core.records.model import Role, Route, SendMode
from specproxy.errors import SpecproxyError
from specproxy.proxy.admin import (
    ADMIN_ROUTES,
    PROMETHEUS_TEXT,
    READ_PATHS,
    REFUSED_PATHS,
    handle_admin,
    handle_read,
    handle_refused,
)
from specproxy.proxy.messages import Request, Response, error_response, json_response
from specproxy.proxy.state import ProxyState

RELAYED: dict[tuple[str, str], Route] = {("POST", r.value): r for r in Route}
RELAYED[("PUT", Route.GENERATE.value)] = Route.GENERATE
"""(method, path) of each relayed generation route (``PUT /generate`` too, as SGLang
accepts it): the server (``proxy.lean``) relays and measures them."""
Handler = Callable[[ProxyState, Request], Awaitable[Response]]
OPEN_PATHS = frozenset({"/health", "/_specproxy/metrics"})
_MODEL = "/v1/models/{model}"  # the one route with a parameter: one path segment


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


async def handle_health(state: ProxyState, request: Request) -> Response:
    """200 when every side that answers clients is healthy, else 503; JSON with each side."""
    cfg = state.config
    sides = cfg.sides
    results = await asyncio.gather(*(_backend_health(state, r) for r in sides))
    backends = dict(zip((str(r) for r in sides), results, strict=True))
    serving = sides if cfg.mode is SendMode.SPLIT else (cfg.primary,)
    healthy = all(backends[str(r)]["healthy"] for r in serving if str(r) in backends)
    body = {"status": "ok" if healthy else "unhealthy", "proxy": "ok", "backends": backends}
    return json_response(body, status=200 if healthy else 503)


async def handle_status(state: ProxyState, request: Request) -> Response:
    """The proxy's JSON status: configuration summary and per-side counts."""
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


async def handle_metrics(state: ProxyState, request: Request) -> Response:
    """The proxy's own Prometheus metrics."""
    if state.relay is not None:
        state.relay.records.flush()  # what has ended is counted, also if its record is still waiting
    text = state.metrics.render()
    return Response(200, text.encode(), CIMultiDict({"Content-Type": PROMETHEUS_TEXT}))


def _table() -> dict[str, dict[str, Handler | None]]:
    """Path to {method: handler}; a relayed route's methods map to None (the server's own)."""
    table: dict[str, dict[str, Handler | None]] = {}
    for method, path in RELAYED:
        table.setdefault(path, {})[method] = None
    own: list[tuple[str, str, Handler]] = [
        ("GET", "/health", handle_health),
        ("GET", "/_specproxy/metrics", handle_metrics),
        ("GET", "/_specproxy/status", handle_status),
    ]
    own += [("GET", path, handle_read) for path in READ_PATHS]
    own += [(m, path, handle_admin) for path, methods in ADMIN_ROUTES.items() for m in methods]
    own += [("POST", path, handle_refused) for path in REFUSED_PATHS]
    for method, path, handler in own:
        table.setdefault(path, {})[method] = handler
    return table


ROUTES = _table()


def _methods(path: str) -> dict[str, Handler | None] | None:
    found = ROUTES.get(path)
    if found is None and path.startswith("/v1/models/"):
        model = path[len("/v1/models/") :]
        if model and "/" not in model:
            found = ROUTES[_MODEL]
    return found


def find(method: str, path: str) -> Handler | Response:
    """The handler of ``method`` on ``path``; else the 404 or 405 to answer."""
    methods = _methods(path)
    if methods is None:
        message = "the proxy has no such route"
        return error_response(404, message, type_="invalid_request_error", code="not_found")
    handler = methods.get(method)
    if handler is None:  # (a relayed route's own method is served before this is asked)
        allowed = ", ".join(sorted(methods))
        resp = error_response(
            405,
            f"{path} takes {allowed} only",
            type_="invalid_request_error",
            code="method_not_allowed",
        )
        resp.headers["Allow"] = allowed
        return resp
    return handler


def answering(response: Response) -> Handler:
    """A handler that answers ``response`` (a 404 or 405 on a connection kept open)."""

    async def answer(state: ProxyState, request: Request) -> Response:
        return response

    return answer
