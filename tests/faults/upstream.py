"""A stand-in SGLang upstream that picks a fault per request from the ``x-fault`` header.

The header's value is ``FAULT`` (applies on every stand-in) or ``FAULT@NAME`` (applies
only on the stand-in called NAME, e.g. ``truncate@candidate``); several are separated
by commas. Without the header the stand-in uses its ``default`` fault (how the replay
rows, which cannot set headers, pick one). Faults:

- ``ok``: a normal answer (``CHAT_EVENTS`` or ``CHAT_BODY``);
- ``slow=S``: a normal answer whose headers come after S seconds;
- ``never``: no headers until the stand-in stops;
- ``drop``: the connection is closed before any answer (the client sees a disconnect);
- ``status=N``: HTTP N with an SGLang-shaped error body;
- ``echo400``: SGLang's pydantic 400, quoting the request's first message;
- ``echo422``: FastAPI's 422, with the whole request as ``input``;
- ``text500``: a plain-text 500 that quotes the request body;
- ``truncate``: one stream event, then the connection is cut;
- ``stall``: one stream event, then nothing until the stand-in stops;
- ``stream_error``: one event, then an in-stream ``{"error": ...}`` event quoting the prompt;
- ``abort``: a stream whose last choice has ``finish_reason: "abort"``;
- ``garbage``: 200 with bytes that are neither SSE nor JSON.

``stream`` is read as pydantic reads it (``"true"`` streams), as SGLang does.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from specproxy.testing.harness import CHAT_BODY, CHAT_EVENTS, Rig, Upstream, rig, serve_app

FAULT_HEADER = "x-fault"
_TRUE = {"true", "1", "yes", "on", "t", "y"}


def _streams(body: dict[str, Any]) -> bool:
    value = body.get("stream")
    if isinstance(value, str):
        return value.strip().lower() in _TRUE
    return value is True or value == 1


def _first_text(body: dict[str, Any]) -> str:
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict):
        return str(messages[0].get("content", ""))
    return str(body.get("prompt", body.get("text", "")))


@dataclass
class FaultServer:
    """The stand-in; ``name`` is what ``FAULT@NAME`` selects, ``api_key`` is in its server info."""

    name: str
    default: str = "ok"
    api_key: str | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    faults_seen: list[str] = field(default_factory=list)

    def fault_for(self, header: str | None) -> str:
        """The fault this stand-in applies for a request carrying ``header``."""
        for item in (header or "").split(","):
            fault, _, target = item.strip().partition("@")
            if fault and target in ("", self.name):
                return fault
        return self.default

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw)
        fault = self.fault_for(request.headers.get(FAULT_HEADER))
        self.faults_seen.append(fault)
        name, _, arg = fault.partition("=")
        if name == "slow":
            await asyncio.sleep(float(arg))
        if name == "never":
            await self.stop.wait()
            return web.Response(status=503)
        if name == "drop":
            assert request.transport is not None
            request.transport.close()
            return web.Response(status=503)  # never written: the connection is gone
        if name in ("status", "echo400", "echo422", "text500"):
            return self._error(name, arg, body, raw)
        if name == "garbage":
            return web.Response(body=b"\x00\xffnot sse {{{", content_type="text/event-stream")
        if not _streams(body):
            return web.Response(body=CHAT_BODY, content_type="application/json")
        return await self._stream(request, name, body)

    def _error(self, name: str, arg: str, body: dict[str, Any], raw: bytes) -> web.Response:
        text = _first_text(body)
        if name == "echo400":
            message = (
                "1 validation error for ChatCompletionRequest\nmessages.0.content\n"
                f"  Input should be a valid string [type=string_type, input_value={text!r}, "
                "input_type=str]"
            )
            error = {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
            return web.json_response(error, status=400)
        if name == "echo422":
            detail = [
                {
                    "type": "missing",
                    "loc": ["body", "model"],
                    "msg": "Field required",
                    "input": body,
                }
            ]
            return web.json_response({"detail": detail}, status=422)
        if name == "text500":
            return web.Response(status=500, text=f"Internal error while handling {raw.decode()}")
        status = int(arg or "500")
        error = {"object": "error", "message": f"fault {status}", "type": "Fault", "code": status}
        return web.json_response(error, status=status)

    async def _stream(
        self, request: web.Request, name: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        with contextlib.suppress(ConnectionError):
            await resp.prepare(request)
            await resp.write(CHAT_EVENTS[0])
            await resp.write(CHAT_EVENTS[1])
            if name == "truncate":
                assert request.transport is not None
                request.transport.close()
                return resp
            if name == "stall":
                await self.stop.wait()
                return resp
            if name == "stream_error":
                quoted = _first_text(body)
                error = {"error": {"message": f"bad input {quoted!r}", "type": "x", "code": 400}}
                await resp.write(b"data: " + orjson.dumps(error) + b"\n\n")
            elif name == "abort":
                await resp.write(CHAT_EVENTS[2].replace(b'"stop"', b'"abort"'))
            else:
                await resp.write(CHAT_EVENTS[2])
            await resp.write(CHAT_EVENTS[3])
            await resp.write_eof()
        return resp

    async def _server_info(self, _request: web.Request) -> web.Response:
        info = {
            "version": "0.5.16",
            "model_path": "stand-in/model",
            "api_key": self.api_key,
            "admin_api_key": self.api_key,
            "internal_states": [{"api_key": self.api_key}],
        }
        return web.json_response(info)

    async def _ok(self, _request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stand-in/model"}]})

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        """The stand-in on an ephemeral loopback port; yields its base URL."""
        app = web.Application()
        for path in ("/v1/chat/completions", "/v1/completions", "/generate"):
            app.router.add_post(path, self._generate)
        for path in ("/server_info", "/get_server_info"):
            app.router.add_get(path, self._server_info)
        for path in ("/health", "/v1/models", "/model_info", "/get_model_info"):
            app.router.add_get(path, self._ok)
        async with serve_app(app, on_stop=self.stop) as url:
            yield url


@contextlib.asynccontextmanager
async def fault_rig(
    run_dir: Path,
    *,
    baseline: FaultServer | Upstream = None,
    candidate: FaultServer | Upstream = None,
    **options: Any,
) -> AsyncIterator[Rig]:
    """``specproxy.testing.harness.rig`` that also takes stand-ins for either side."""
    async with contextlib.AsyncExitStack() as stack:
        urls: list[Upstream] = []
        for side in (baseline, candidate):
            if isinstance(side, FaultServer):
                urls.append(await stack.enter_async_context(side.running()))
            else:
                urls.append(side)
        async with rig(run_dir, baseline=urls[0], candidate=urls[1], **options) as r:
            yield r
