"""``HttpBackend.send`` with nothing to relay to goes through the keep-alive pool
(``backends.h1``) and gives the Measurement the relaying path gives, one per send."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator

import orjson
import pytest

from specproxy.backends.base import BackendSpec, UpstreamRequest
from specproxy.backends.http import HttpBackend
from specproxy.core.model import ErrorKind, Measurement, Role, Route
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from tests.backends.test_http import FAST, _chat, _Sink

TIMING = ("headers_us", "ttft_us", "e2e_us", "tpot_us", "server_e2e_us")
SERVER_STATE = ("cached_tokens",)  # the second send of a prompt finds it cached


@pytest.fixture
async def backend() -> AsyncIterator[HttpBackend]:
    async with serve_in_background(SimConfig(speculative_algorithm="EAGLE", **FAST)) as url:
        started = HttpBackend(BackendSpec(url=url, role=Role.CANDIDATE))
        await started.start()
        try:
            assert started.streams_at_transport_level
            yield started
        finally:
            await started.close()


def _content(m: Measurement) -> Measurement:
    """``m`` without its times (the chunks' count kept) and the server's cache hits."""
    offsets = tuple(range(len(m.chunk_offsets_us)))
    return dataclasses.replace(m, chunk_offsets_us=offsets, **dict.fromkeys(TIMING + SERVER_STATE))


def _generate(stream: bool, tokens: int) -> UpstreamRequest:
    body = {"text": "a b c", "stream": stream, "sampling_params": {"max_new_tokens": tokens}}
    return UpstreamRequest(route=Route.GENERATE, body=orjson.dumps(body), stream=stream)


@pytest.mark.parametrize("stream", [True, False])
async def test_pooled_and_relayed_sends_measure_alike(backend: HttpBackend, stream: bool) -> None:
    for request in (_chat(stream), _generate(stream, 24)):
        done: list[Measurement] = []
        pooled = await backend.send(request, on_done=done.append)
        relayed = await backend.send(request, on_done=done.append, sink=_Sink())
        assert done == [pooled, relayed]
        assert pooled.ok and pooled.status == 200 and pooled.output_sha256
        assert len(pooled.chunk_offsets_us) == len(pooled.chunk_tokens)
        assert _content(pooled) == _content(relayed)
    assert backend.in_flight == 0


async def test_a_cancelled_pooled_send_reports_once(backend: HttpBackend) -> None:
    done: list[Measurement] = []
    task = asyncio.get_running_loop().create_task(
        backend.send(_generate(True, 5000), on_done=done.append)
    )
    while backend.in_flight == 0:
        await asyncio.sleep(0)  # until the send has begun
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(done) == 1 and done[0].error_kind is ErrorKind.CLIENT_CANCELLED
    assert backend.in_flight == 0
