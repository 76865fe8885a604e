"""SGLang-specific reads: server info, model info, Prometheus snapshots, cache flush.

The edge where aiohttp's exceptions become ours: a refused or reset connection is
``BackendUnreachable``, a deadline is ``BackendTimeout``, an HTTP error status on an
info route is ``BackendError`` naming the route and status, and a body that is not the
JSON object SGLang sends is ``ProtocolError``. Everything returned is redacted
(``api_key``/``admin_api_key`` appear verbatim in ``/server_info`` and in each
``internal_states`` entry) before any caller sees it.

Routes (docs/sglang.md, Routes): ``/server_info`` with fallback to the deprecated
``/get_server_info``; ``/model_info`` with fallback to ``/get_model_info``;
``/metrics`` exists only with ``--enable-metrics`` (404 otherwise);
``/flush_cache`` answers 400 while requests are running.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import orjson

from specproxy.core.launch import LaunchConfig, build_launch_config, redact
from specproxy.errors import BackendError, BackendTimeout, BackendUnreachable, ProtocolError

DEFAULT_TIMEOUT_S = 10.0


@contextlib.asynccontextmanager
async def _session_for(
    session: aiohttp.ClientSession | None,
) -> AsyncIterator[aiohttp.ClientSession]:
    """The caller's session, or a private one that is closed on exit."""
    if session is not None:
        yield session
        return
    async with aiohttp.ClientSession() as own:
        yield own


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def request(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    api_key: str | None = None,
    body: Any = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> tuple[int, bytes]:
    """One request; returns (status, body). Transport failures raise our errors."""
    data = None if body is None else orjson.dumps(body)
    headers = _headers(api_key)
    if data is not None:
        headers["Content-Type"] = "application/json"
    try:
        async with session.request(
            method,
            url,
            data=data,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            return resp.status, await resp.read()
    except TimeoutError as exc:
        raise BackendTimeout(f"{url}: no answer within {timeout_s:g} s") from exc
    except (aiohttp.ClientError, OSError) as exc:
        raise BackendUnreachable(f"{url}: {type(exc).__name__}: {exc}"[:300]) from exc


def _json_object(url: str, body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"{url}: body is not JSON") from exc
    if not isinstance(value, dict):
        raise ProtocolError(f"{url}: expected a JSON object, got {type(value).__name__}")
    return value


async def _read_info(
    url: str,
    paths: tuple[str, str],
    *,
    api_key: str | None,
    session: aiohttp.ClientSession | None,
    timeout_s: float,
) -> dict[str, Any] | None:
    """GET the first path, falling back to the second on 404; the redacted object, or None."""
    async with _session_for(session) as s:
        for path in paths:
            target = url.rstrip("/") + path
            status, body = await request(s, "GET", target, api_key=api_key, timeout_s=timeout_s)
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
    url: str,
    *,
    api_key: str | None = None,
    session: aiohttp.ClientSession | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """The redacted ``/server_info`` object (``/get_server_info`` on servers without it)."""
    paths = ("/server_info", "/get_server_info")
    info = await _read_info(url, paths, api_key=api_key, session=session, timeout_s=timeout_s)
    if info is None:
        raise BackendError(f"{url}: neither /server_info nor /get_server_info exists")
    return info


async def fetch_model_info(
    url: str,
    *,
    api_key: str | None = None,
    session: aiohttp.ClientSession | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any] | None:
    """The redacted ``/model_info`` object, or None when the server has neither route."""
    paths = ("/model_info", "/get_model_info")
    return await _read_info(url, paths, api_key=api_key, session=session, timeout_s=timeout_s)


async def fetch_launch_config(
    url: str,
    *,
    api_key: str | None = None,
    session: aiohttp.ClientSession | None = None,
    declared: Mapping[str, Any] | None = None,
    launcher: Mapping[str, Any] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> LaunchConfig:
    """Read one server's launch configuration, merged with launcher and declared facts."""
    async with _session_for(session) as s:
        server_info = await fetch_server_info(url, api_key=api_key, session=s, timeout_s=timeout_s)
        model_info = await fetch_model_info(url, api_key=api_key, session=s, timeout_s=timeout_s)
    return build_launch_config(
        server_info, model_info=model_info, launcher=launcher, declared=declared
    )


async def fetch_snapshot(
    url: str,
    *,
    api_key: str | None = None,
    session: aiohttp.ClientSession | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict[str, Any]:
    """``{"server_info": redacted, "metrics_text": str | None, "t_unix_s": float}``.

    ``metrics_text`` is None when ``/metrics`` answers 404 (``--enable-metrics`` off);
    ``server_info`` is None for a server that has none (any non-SGLang server).
    ``t_unix_s`` is the wall time just before the server info was requested.
    """
    t_unix_s = time.time()
    async with _session_for(session) as s:
        server_info: dict[str, Any] | None
        try:
            server_info = await fetch_server_info(
                url, api_key=api_key, session=s, timeout_s=timeout_s
            )
        except (BackendUnreachable, BackendTimeout):
            raise
        except BackendError:
            server_info = None  # not SGLang (llama.cpp, vLLM...): its /metrics still counts
        metrics_url = url.rstrip("/") + "/metrics"
        status, body = await request(s, "GET", metrics_url, api_key=api_key, timeout_s=timeout_s)
    if status == 404:
        metrics_text = None
    elif status == 200:
        metrics_text = body.decode("utf-8", errors="replace")
    else:
        raise BackendError(f"{metrics_url}: HTTP {status}")
    return {"server_info": server_info, "metrics_text": metrics_text, "t_unix_s": t_unix_s}


async def flush_cache(
    url: str,
    *,
    api_key: str | None = None,
    session: aiohttp.ClientSession | None = None,
    wait_s: float = 0.0,
    timeout_s: float = 60.0,
) -> bool:
    """Flush the KV/radix caches and reset the speculative counters (docs/sglang.md, Routes).

    True when flushed; False when the server refused because it was not idle within
    ``wait_s`` (HTTP 400). Any other status raises ``BackendError``.
    """
    target = url.rstrip("/") + f"/flush_cache?timeout={wait_s:g}"
    async with _session_for(session) as s:
        status, _ = await request(s, "POST", target, api_key=api_key, timeout_s=timeout_s)
    if status == 200:
        return True
    if status == 400:
        return False
    raise BackendError(f"{target}: HTTP {status}")
