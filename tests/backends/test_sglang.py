"""SGLang info reads over loopback against captured bodies: fallbacks, redaction, errors."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from specproxy.backends.base import BackendSpec
from specproxy.backends.http import HttpBackend, open_backend
from specproxy.backends.sglang import (
    fetch_launch_config,
    fetch_model_info,
    fetch_server_info,
    fetch_snapshot,
    flush_cache,
)
from specproxy.errors import BackendError, BackendTimeout, BackendUnreachable
from tests.launch.capture_server import CaptureServer, closed_port_url, running

KEY = "sk-test-reads-31337"


def reader(
    url: str, api_key: str | None = None
) -> contextlib.AbstractAsyncContextManager[HttpBackend]:
    """A started backend for one server read, as the launcher and preflight open one."""
    return open_backend(BackendSpec(url, None, api_key=api_key))


async def test_launch_config_is_read_and_redacted() -> None:
    """fetch_launch_config returns the candidate's settings with its API key removed."""
    server = CaptureServer("sa_copy", api_key=KEY)
    async with running(server) as url, reader(url, KEY) as backend:
        config = await fetch_launch_config(backend, declared={"gpu": "H200"})
    assert config.speculative_algorithm == "STANDALONE"
    assert config.data["model_info"]["architectures"] == ["LlamaForCausalLM"]
    assert config.data["facts"] == {"gpu": "H200"}
    assert KEY not in config.canonical
    assert server.seen_auth[0] == f"Bearer {KEY}"


async def test_old_routes_are_used_when_the_new_ones_are_missing() -> None:
    """/get_server_info and /get_model_info answer when /server_info and /model_info are 404."""
    async with (
        running(CaptureServer("base", legacy_routes_only=True)) as url,
        reader(url) as server,
    ):
        info = await fetch_server_info(server)
        model = await fetch_model_info(server)
    assert info["version"] == "0.5.16"
    assert model is not None
    assert model["model_type"] == "llama"


async def test_a_wrong_key_is_a_backend_error_naming_the_route() -> None:
    """HTTP 401 on /server_info raises BackendError that says to check the API key."""
    async with running(CaptureServer("base", api_key=KEY)) as url, reader(url, "wrong") as server:
        with pytest.raises(BackendError, match=r"/server_info: HTTP 401.*API key"):
            await fetch_server_info(server)


async def test_snapshot_holds_redacted_info_and_metrics_text() -> None:
    """fetch_snapshot returns redacted server info, the Prometheus text and a wall time."""
    async with running(CaptureServer("sa_copy", api_key=KEY)) as url, reader(url, KEY) as server:
        snapshot = await fetch_snapshot(server)
    assert snapshot["server_info"]["api_key"] == "[redacted]"
    assert all(s["api_key"] == "[redacted]" for s in snapshot["server_info"]["internal_states"])
    assert "sglang:spec_accept_length" in snapshot["metrics_text"]
    assert snapshot["t_unix_s"] > 1.6e9


async def test_snapshot_without_metrics_has_none() -> None:
    """A server without --enable-metrics (404 on /metrics) gives metrics_text None."""
    async with running(CaptureServer("base", metrics=False)) as url, reader(url) as server:
        snapshot = await fetch_snapshot(server)
    assert snapshot["metrics_text"] is None


@pytest.mark.parametrize(("status", "flushed"), [(200, True), (400, False)])
async def test_flush_cache_reports_whether_it_flushed(status: int, flushed: bool) -> None:
    """200 means flushed, 400 means the server was busy."""
    async with running(CaptureServer("base", flush_status=status)) as url, reader(url) as server:
        assert await flush_cache(server) is flushed


async def test_a_closed_port_is_unreachable() -> None:
    """A refused connection raises BackendUnreachable naming the URL."""
    url = closed_port_url()
    async with reader(url) as server:
        with pytest.raises(BackendUnreachable, match=r"127\.0\.0\.1"):
            await fetch_launch_config(server)


async def test_a_silent_server_times_out() -> None:
    """A server that never answers raises BackendTimeout after the deadline."""
    stall = asyncio.Event()
    async with running(CaptureServer("base", stall=stall)) as url, reader(url) as server:
        with pytest.raises(BackendTimeout, match="no answer"):
            await fetch_server_info(server, timeout_s=0.2)
        stall.set()
