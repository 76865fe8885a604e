"""The aiohttp application of a simulated SGLang server: routes, auth, counters, headers.

Auth follows SGLang: with ``--api-key`` every route needs ``Authorization: Bearer
KEY`` except paths starting with ``/health`` and ``/metrics`` (401
``{"error": "Unauthorized"}`` otherwise). The OpenAI POST routes refuse a body that
is not ``application/json`` (400). ``/metrics`` exists only with ``enable_metrics``
(FastAPI's 404 otherwise). Every response, errors included, carries
``x-specproxy-simulated: true``; no body shape is changed for it. The generation
routes live in ``generation.py``; this module holds the rest.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from specproxy.sim import generation, info, metrics, scoring_route, shapes
from specproxy.sim.engine import SimJob
from specproxy.sim.state import SimServer
from specproxy.sim.text import OUTPUT_ID_BASE, OutputPlan, tokenize

SIMULATED_HEADER = "x-specproxy-simulated"
HEALTH_TIMEOUT_S = 20.0
FLUSH_OK = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SERVER_KEY = web.AppKey("sim_server", SimServer)


def _server(request: web.Request) -> SimServer:
    return request.app[SERVER_KEY]


async def _add_simulated_header(_request: web.Request, response: web.StreamResponse) -> None:
    response.headers[SIMULATED_HEADER] = "true"


def _metrics_middleware(server: SimServer) -> Any:
    @web.middleware
    async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
        endpoint, method = request.path, request.method
        server.stats.http_started(endpoint, method)
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            server.stats.http_finished(endpoint, method, status)

    return count


def _auth_middleware(server: SimServer) -> Any:
    exempt = ("/health", "/metrics", "/ready")

    @web.middleware
    async def authorise(request: web.Request, handler: Handler) -> web.StreamResponse:
        key = server.config.api_key
        authorised = request.headers.get("Authorization", "") == f"Bearer {key}"
        if key and not authorised and not request.path.startswith(exempt):
            return generation.sim_json_response({"error": "Unauthorized"}, 401)
        if (
            request.method == "POST"
            and request.path.startswith("/v1/")
            and request.content_type != "application/json"
        ):
            message = f"Content-Type must be application/json, got {request.content_type!r}"
            return generation.sim_json_response(
                shapes.openai_error(message, "BadRequestError", 400), 400
            )
        return await handler(request)

    return authorise


async def health(request: web.Request) -> web.Response:
    """``/health`` and ``/health_generate``: 200 once the engine makes progress after the probe."""
    server = _server(request)
    if not server.ready():
        return web.Response(status=503)
    probe = SimJob(
        rid=f"HEALTH_CHECK_{uuid.uuid4().hex}",
        prompt_ids=[0],
        plan=OutputPlan((OUTPUT_ID_BASE,), "length"),
        counted=False,
    )
    progress = server.engine.next_progress()
    server.engine.submit(probe)
    try:
        await asyncio.wait_for(progress, HEALTH_TIMEOUT_S)
    except TimeoutError:
        return web.Response(status=503)
    finally:
        probe.finish_aborted("health probe done")
    return web.Response()


async def ping(_request: web.Request) -> web.Response:
    return web.Response()


async def server_info(request: web.Request) -> web.Response:
    server = _server(request)
    return generation.sim_json_response(info.server_info(server.config, server.spec, server.live()))


async def model_info(request: web.Request) -> web.Response:
    return generation.sim_json_response(info.model_info(_server(request).config))


async def models(request: web.Request) -> web.Response:
    server = _server(request)
    return generation.sim_json_response(info.models_list(server.config, created=server.created))


async def one_model(request: web.Request) -> web.Response:
    server = _server(request)
    name = request.match_info["model"]
    cards = info.models_list(server.config, created=server.created)["data"]
    if name != server.config.model_name:
        message = f"The model `{name}` does not exist."
        return generation.sim_json_response(
            shapes.openai_error(message, "NotFoundError", 404) | {"param": "model"}, 404
        )
    return generation.sim_json_response(cards[0])


async def prometheus(request: web.Request) -> web.Response:
    server = _server(request)
    if not server.config.enable_metrics:
        return generation.sim_json_response({"detail": "Not Found"}, 404)
    spec = server.spec
    view = metrics.SchedulerView(
        model_name=server.config.model_name,
        speculative=spec is not None,
        num_steps=spec.num_steps if spec else 0,
        num_draft_tokens=spec.num_draft_tokens if spec else 0,
        running=server.engine.num_running,
        waiting=server.engine.num_waiting,
        max_total_num_tokens=info.max_total_num_tokens(server.config, spec),
        context_len=server.config.context_length,
        used_tokens=server.engine.used_tokens,
    )
    text = metrics.render_exposition(server.stats, view)
    return web.Response(body=text.encode("utf-8"), headers={"Content-Type": METRICS_CONTENT_TYPE})


async def v1_loads(request: web.Request) -> web.Response:
    server = _server(request)
    start = time.perf_counter_ns()
    body = info.loads(server.config, server.spec, server.live())
    server.stats.hist["loads"].observe((time.perf_counter_ns() - start) / 1e9)
    if request.query.get("format") == "prometheus":
        return web.Response(text=info.loads_prometheus(body), content_type="text/plain")
    return generation.sim_json_response(body)


async def get_load(request: web.Request) -> web.Response:
    server = _server(request)
    if server.version >= (0, 5, 21):
        return generation.sim_json_response({"detail": "Not Found"}, 404)
    return generation.sim_json_response(info.get_load(server.live()))


async def flush_cache(request: web.Request) -> web.Response:
    """Flush only when idle (waiting up to ``?timeout=`` seconds); resets spec counters."""
    server = _server(request)
    try:
        timeout_s = max(0.0, float(request.query.get("timeout", "0")))
    except ValueError:
        return web.Response(status=400, text="timeout must be a number\n")
    deadline = time.monotonic() + timeout_s
    while not server.engine.idle and (remaining := deadline - time.monotonic()) > 0:
        try:
            await asyncio.wait_for(server.engine.next_progress(), remaining)
        except TimeoutError:
            break
    if not server.engine.idle:
        return web.Response(status=400, text=FLUSH_OK)
    server.engine.cache.clear()
    server.stats.reset_spec()
    return web.Response(text=FLUSH_OK)


async def abort_request(request: web.Request) -> web.Response:
    server = _server(request)
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        body = {}
    body = body if isinstance(body, dict) else {}
    rid = body.get("rid")
    if body.get("abort_all"):
        server.engine.abort(None, "Abort requested")
    elif isinstance(rid, str):
        server.engine.abort(rid, "Abort requested")
    return web.Response()


async def tokenize_route(request: web.Request) -> web.Response:
    server = _server(request)
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError as exc:
        return generation.sglang_error_response(
            "tokenize", f"invalid JSON: {exc}", 400, "BadRequestError"
        )
    prompt = body.get("prompt") if isinstance(body, dict) else None
    limit = server.config.context_length
    if isinstance(prompt, str):
        ids = tokenize(prompt)
        return generation.sim_json_response(
            {"tokens": ids, "count": len(ids), "max_model_len": limit}
        )
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        lists = [tokenize(p) for p in prompt]
        return generation.sim_json_response(
            {"tokens": lists, "count": [len(t) for t in lists], "max_model_len": limit}
        )
    return generation.sglang_error_response(
        "tokenize", "prompt: expected a string or a list of strings", 400, "BadRequestError"
    )


def _generation_route(route: str) -> Handler:
    async def serve(request: web.Request) -> web.StreamResponse:
        if route == "generate" and (
            scored := await scoring_route.answer(_server(request), request)
        ):
            return scored
        return await generation.handle(_server(request), request, route)

    return serve


def build_sim_app(server: SimServer) -> web.Application:
    """The aiohttp application serving ``server``."""
    app = web.Application(
        middlewares=[_metrics_middleware(server), _auth_middleware(server)],
        client_max_size=64 * 1024 * 1024,
    )
    app[SERVER_KEY] = server
    app.on_response_prepare.append(_add_simulated_header)
    get: list[tuple[str, Handler]] = [
        ("/health", health),
        ("/health_generate", health),
        ("/ping", ping),
        ("/server_info", server_info),
        ("/get_server_info", server_info),
        ("/model_info", model_info),
        ("/get_model_info", model_info),
        ("/v1/models", models),
        ("/v1/models/{model}", one_model),
        ("/metrics", prometheus),
        ("/v1/loads", v1_loads),
        ("/get_load", get_load),
        ("/flush_cache", flush_cache),
    ]
    for path, handler in get:
        app.router.add_get(path, handler, allow_head=False)
    post: list[tuple[str, Handler]] = [
        ("/flush_cache", flush_cache),
        ("/abort_request", abort_request),
        ("/tokenize", tokenize_route),
        ("/v1/tokenize", tokenize_route),
        ("/generate", _generation_route("generate")),
        ("/v1/completions", _generation_route("completions")),
        ("/v1/chat/completions", _generation_route("chat")),
    ]
    for path, handler in post:
        app.router.add_post(path, handler)
    app.router.add_put("/generate", _generation_route("generate"))
    return app
