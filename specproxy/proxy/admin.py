"""SGLang's own non-generation routes, relayed to the primary only.

Three kinds, each a table below (the paths and methods of SGLang 0.5.16's
``http_server.py``, as the protocol reference lists them):

- ``READ_PATHS``: read-only GETs (model list, server info, loads, ``/metrics``...);
- ``ADMIN_ROUTES``: routes that act on the server (``/flush_cache``, ``/abort_request``,
  ``/set_internal_state``, ``/pause_generation``, ``/continue_generation``,
  ``/start_profile``, ``/stop_profile``) and the tokenizer helpers;
- ``REFUSED_PATHS``: weight updates, answered by the proxy itself with 403 and
  ``code: not_relayed``, because changing one server's weights would end the comparison.

Relayed calls go to the primary (``--primary``; the first configured side when the
primary has no URL), never to the shadow, and are never recorded as measured requests:
they are no traffic to compare. Each is counted in the proxy's metrics
(``specproxy_admin_requests_total``) and logged (``admin_relayed``: path, side, status).
Status and body come back as the server sent them; JSON bodies have their credentials
removed (``core.launch.config.redact``), as SGLang's ``/server_info`` carries its API keys.
"""

from __future__ import annotations

import json
import re

import orjson

from specproxy.core.launch.config import REDACTED, is_secret_key, redact, redact_command
from specproxy.core.records.model import Role
from specproxy.errors import BackendTimeout, SpecproxyError
from specproxy.log import get_logger
from specproxy.proxy.messages import Request, Response, bad_request, error_response
from specproxy.proxy.state import ProxyState

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
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
ADMIN_ROUTES: dict[str, tuple[str, ...]] = {
    "/flush_cache": ("GET", "POST"),
    "/abort_request": ("POST",),
    "/set_internal_state": ("POST", "PUT"),
    "/pause_generation": ("POST",),
    "/continue_generation": ("POST",),
    "/start_profile": ("GET", "POST"),
    "/stop_profile": ("GET", "POST"),
    "/tokenize": ("POST",),
    "/v1/tokenize": ("POST",),
    "/detokenize": ("POST",),
    "/v1/detokenize": ("POST",),
}
REFUSED_PATHS = (
    "/update_weights_from_disk",
    "/update_weights_from_tensor",
    "/update_weights_from_distributed",
)


_JSON_PAIR = re.compile(r'("((?:[^"\\]|\\.){1,64})"\s*:\s*)("(?:[^"\\]|\\.)*"|[^,}\]\s]+)')


def redact_text(text: str) -> str:
    """``text`` that may be broken JSON, with every ``"secret-name": value`` pair's value,
    credential flag and ``Bearer`` token replaced (what ``redact`` does, on text)."""

    def pair(m: re.Match[str]) -> str:
        return m.group(1) + f'"{REDACTED}"' if is_secret_key(m.group(2)) else m.group(0)

    return redact_command(_JSON_PAIR.sub(pair, text))


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
    """``body`` with every credential removed (``core.launch.config.redact``); fails closed.

    SGLang's ``/server_info`` carries ``api_key`` and ``admin_api_key`` verbatim; a relayed
    read must never hand them to the proxy's clients. JSON (after any BOM, with NaN or
    Infinity too) is redacted as an object; anything else, broken JSON included, as text
    (``core.launch.config.redact_text``). Bodies without a secret pass byte for byte.
    """
    stripped = body.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped[:1] in (b"{", b"["):
        try:
            obj = json.loads(stripped)
        except (ValueError, RecursionError):
            pass
        else:
            cleaned = redact(obj)
            return body if cleaned == obj else json.dumps(cleaned).encode()
    text = body.decode("utf-8", "surrogateescape")
    cleaned_text = redact_text(text)
    return body if cleaned_text == text else cleaned_text.encode("utf-8", "surrogateescape")


def primary_side(state: ProxyState) -> Role:
    """The side that answers relayed calls: the primary, else the first configured side."""
    primary = state.config.primary
    return primary if primary in state.backends else next(iter(state.backends))


def _timeout_s(request: Request, base_s: float) -> float:
    """The upstream wait: the proxy's first-byte timeout, plus a ``?timeout=`` the call asks."""
    try:
        asked = float(request.query_value("timeout") or "0")
    except ValueError:
        asked = 0.0
    return base_s + asked if 0 < asked < 86_400 else base_s


async def relay_to_primary(state: ProxyState, request: Request, body: object = None) -> Response:
    """``request`` (method, path and query) sent to the primary; its status and body back."""
    cfg = state.config
    side = primary_side(state)
    client_key = None  # relayed only when the proxy holds no key of its own for this side
    if cfg.upstream_key(side) is None and cfg.api_key is None:
        client_key = _bearer(request.headers.get("Authorization"))
    timeout_s = _timeout_s(request, cfg.first_byte_timeout_s)
    try:
        status, raw = await state.backends[side].call(
            request.method, request.target, body, timeout_s=timeout_s, api_key=client_key
        )
    except BackendTimeout as exc:
        return error_response(504, str(exc), type_="upstream_error", code="upstream_timeout")
    except SpecproxyError as exc:
        return error_response(502, str(exc), type_="upstream_error", code="upstream_unreachable")
    raw = redact_body(raw)
    resp = Response(status, raw)
    content_type = _content_type(request.path, raw)
    if content_type is not None:
        resp.headers["Content-Type"] = content_type
    return resp


async def handle_read(state: ProxyState, request: Request) -> Response:
    """Pass a read-only SGLang endpoint to the primary (status and body as the server sent them)."""
    return await relay_to_primary(state, request)


async def handle_admin(state: ProxyState, request: Request) -> Response:
    """Relay an admin or tokenizer call (its JSON body, if any) to the primary only; count it."""
    raw = request.body
    body: object = None
    if raw.strip():
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return bad_request(f"{request.path}: the body must be JSON", code="invalid_body")
    resp = await relay_to_primary(state, request, body)
    side = primary_side(state)
    state.metrics.admin(request.path, side, resp.status)
    get_logger().info("admin_relayed", path=request.path, side=str(side), status=resp.status)
    return resp


async def handle_refused(state: ProxyState, request: Request) -> Response:
    """403: a weight update on one server would end the comparison; it is not relayed."""
    message = (
        f"specproxy does not relay {request.path}: changing one server's weights ends the"
        " comparison; update both servers directly"
    )
    return error_response(403, message, type_="invalid_request_error", code="not_relayed")
