"""SGLang-specific reads: server info, model info, Prometheus snapshots, cache flush.

Every read goes through a started ``Backend`` (``backends.http.HttpBackend``: one
session per upstream, one one-shot request with one error mapping). A refused or reset
connection is ``BackendUnreachable``, a deadline is ``BackendTimeout``, an HTTP error
status on an info route is ``BackendError`` naming the route and status, and a body
that is not the JSON object SGLang sends is ``ProtocolError``. Everything returned is
redacted (``api_key``/``admin_api_key`` appear verbatim in ``/server_info`` and in each
``internal_states`` entry) before any caller sees it.

Routes (docs/sglang.md, Routes): ``/server_info`` with fallback to the deprecated
``/get_server_info``; ``/model_info`` with fallback to ``/get_model_info``;
``/metrics`` exists only with ``--enable-metrics`` (404 otherwise);
``/flush_cache`` answers 400 while requests are running.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import orjson

from specproxy.backends.base import InfoReader
from specproxy.core.launch.config import LaunchConfig, build_launch_config, redact
from specproxy.errors import BackendError, BackendTimeout, BackendUnreachable, ProtocolError

DEFAULT_TIMEOUT_S = 10.0


def _json_object(url: str, body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"{url}: body is not JSON") from exc
    if not isinstance(value, dict):
        raise ProtocolError(f"{url}: expected a JSON object, got {type(value).__name__}")
    return value


async def _read_info(
    backend: InfoReader, paths: tuple[str, str], *, timeout_s: float
) -> dict[str, Any] | None:
    """GET the first path, falling back to the second on 404; the redacted object, or None."""
    for path in paths:
        target = backend.spec.url + path
        status, body = await backend.get(path, timeout_s=timeout_s)
        if status == 404:
            continue
        if status in (401, 403):
            raise BackendError(f"{target}: HTTP {status}: unauthorized (check the API key)")
        if status != 200:
            raise BackendError(f"{target}: HTTP {status}")
        redacted: dict[str, Any] = redact(_json_object(target, body))
        return redacted
    return None


async def fetch_server_info(
    backend: InfoReader, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, Any]:
    """The redacted ``/server_info`` object (``/get_server_info`` on servers without it)."""
    info = await _read_info(backend, ("/server_info", "/get_server_info"), timeout_s=timeout_s)
    if info is None:
        raise BackendError(f"{backend.spec.url}: neither /server_info nor /get_server_info exists")
    return info


async def fetch_model_info(
    backend: InfoReader, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, Any] | None:
    """The redacted ``/model_info`` object, or None when the server has neither route."""
    return await _read_info(backend, ("/model_info", "/get_model_info"), timeout_s=timeout_s)


async def fetch_launch_config(
    backend: InfoReader,
    *,
    declared: Mapping[str, Any] | None = None,
    launcher: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> LaunchConfig:
    """Read one server's launch configuration, merged with launcher and declared facts."""
    server_info = await fetch_server_info(backend, timeout_s=timeout_s)
    model_info = await fetch_model_info(backend, timeout_s=timeout_s)
    return build_launch_config(
        server_info, model_info=model_info, launcher=launcher, declared=declared
    )


async def fetch_snapshot(
    backend: InfoReader, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, Any]:
    """``{"server_info": redacted, "metrics_text": str | None, "t_unix_s": float}``.

    ``metrics_text`` is None when ``/metrics`` answers 404 (``--enable-metrics`` off);
    ``server_info`` is None for a server that has none (any non-SGLang server).
    ``t_unix_s`` is the wall time just before the server info was requested.
    """
    t_unix_s = time.time()
    server_info: dict[str, Any] | None
    try:
        server_info = await fetch_server_info(backend, timeout_s=timeout_s)
    except (BackendUnreachable, BackendTimeout):
        raise
    except BackendError:
        server_info = None  # not SGLang (llama.cpp, vLLM...): its /metrics still counts
    status, body = await backend.get("/metrics", timeout_s=timeout_s)
    if status == 404:
        metrics_text = None
    elif status == 200:
        metrics_text = body.decode("utf-8", errors="replace")
    else:
        raise BackendError(f"{backend.spec.url}/metrics: HTTP {status}")
    return {"server_info": server_info, "metrics_text": metrics_text, "t_unix_s": t_unix_s}


async def flush_cache(backend: InfoReader, *, wait_s: float = 0.0, timeout_s: float = 60.0) -> bool:
    """Flush the KV/radix caches and reset the speculative counters (docs/sglang.md, Routes).

    True when flushed; False when the server refused because it was not idle within
    ``wait_s`` (HTTP 400). Any other status raises ``BackendError``.
    """
    path = f"/flush_cache?timeout={wait_s:g}"
    status, _ = await backend.post_json(path, None, timeout_s=timeout_s)
    if status == 200:
        return True
    if status == 400:
        return False
    raise BackendError(f"{backend.spec.url}{path}: HTTP {status}")
