"""specproxy's own meter on the real engine: per-request acceptance equals the server's window.

Requests go through ``HttpBackend`` (so through ``core.measurement.measure`` and ``core.measurement.acceptance``);
the window's truth is the ``llamacpp:`` counter deltas, read by the tests' own parser and by
``core.measurement.acceptance_window.llamacpp_window``. Every request is long enough to draft (32 tokens): a
request of one or two tokens never drafts, has no ``draft_n`` and so no per-request figure,
while its target decode calls still move the window's counters.
"""

from __future__ import annotations

import aiohttp
import orjson
import pytest

from specproxy.backends.base import BackendKind, BackendSpec, UpstreamRequest
from specproxy.backends.http import HttpBackend
from specproxy.backends.send import send
from specproxy.core.measurement import acceptance_window
from specproxy.core.protocol import prometheus
from specproxy.core.records.model import AcceptanceSource, Measurement, Role, Route
from tests.engine.llama_http import (
    ACCEPTED,
    DRAFTED,
    PROMPTS,
    STEPS,
    chat_body,
    metrics_text,
    parse_counters,
)
from tools.engine.llamacpp import PairUrls

pytestmark = pytest.mark.engine

MAX_TOKENS = 32


async def _send_all(url: str, bodies: list[dict[str, object]]) -> list[Measurement]:
    """Send ``bodies`` one after another through one HttpBackend (pooled connections)."""
    backend = HttpBackend(BackendSpec(url, Role.CANDIDATE, kind=BackendKind.OPENAI))
    await backend.start()
    done: list[Measurement] = []
    try:
        for body in bodies:
            stream = bool(body["stream"])
            request = UpstreamRequest(Route.CHAT, orjson.dumps(body), stream)
            await send(backend, request, on_done=done.append)
    finally:
        await backend.close()
    assert len(done) == len(bodies)
    return done


async def _send(url: str, body: dict[str, object]) -> Measurement:
    return (await _send_all(url, [body]))[0]


async def _window(url: str) -> tuple[list[Measurement], str, str]:
    """Metrics text before, four measured requests (two streamed), metrics text after."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        before = await metrics_text(s, url)
        bodies = [
            chat_body(p, max_tokens=MAX_TOKENS, stream=i % 2 == 0)
            for i, p in enumerate(PROMPTS[:4])
        ]
        measurements = await _send_all(url, bodies)
        after = await metrics_text(s, url)
    return measurements, before, after


@pytest.mark.parametrize(
    ("server", "rate_low", "rate_high"), [("spec_same", 1.0, 1.0), ("spec_small", 0.0, 0.01)]
)
async def test_meter_acceptance_equals_the_counter_window(
    llama_pair: PairUrls, server: str, rate_low: float, rate_high: float
) -> None:
    """Σ per-request drafted/accepted/verify steps from the meter equal the counter deltas."""
    measurements, before, after = await _window(getattr(llama_pair, server))
    assert [m.error_kind for m in measurements] == [None] * 4
    assert [m.completion_tokens for m in measurements] == [MAX_TOKENS] * 4
    found = [m.acceptance for m in measurements]
    assert all(a is not None and a.source is AcceptanceSource.LLAMACPP_TIMINGS for a in found)
    parts = [a for a in found if a is not None]
    proposed = sum(a.proposed_drafts or 0 for a in parts)
    correct = sum(a.correct_drafts or 0 for a in parts)
    verify = sum(a.verify_ct or 0 for a in parts)
    delta = {
        k: parse_counters(after)[k] - parse_counters(before).get(k, 0.0)
        for k in (DRAFTED, ACCEPTED, STEPS)
    }
    assert (proposed, correct) == (delta[DRAFTED], delta[ACCEPTED])
    assert rate_low <= correct / proposed <= rate_high

    window = acceptance_window.llamacpp_window(
        prometheus.parse_exposition(before), prometheus.parse_exposition(after), requests=4
    )
    assert window is not None
    assert (window.proposed_drafts, window.accepted_drafts) == (proposed, correct)
    assert window.verify_steps == verify
    assert window.accept_length == pytest.approx(4 * MAX_TOKENS / verify)
    assert window.histogram is not None
    assert sum(window.histogram) == delta[STEPS]  # steps that verified at least one draft


async def test_baseline_measurement_has_no_acceptance(llama_pair: PairUrls) -> None:
    """A baseline stream yields no acceptance: one SSE event per token says nothing of steps."""
    measurement = await _send(llama_pair.baseline, chat_body(PROMPTS[0], stream=True))
    assert measurement.error_kind is None
    assert measurement.completion_tokens == 48
    assert measurement.acceptance is None
    assert len(measurement.chunk_tokens) == 48


async def test_exact_copy_stream_still_arrives_one_token_per_event(llama_pair: PairUrls) -> None:
    """With speculation llama.cpp still sends one event per token: the meter counts 1 per chunk."""
    measurement = await _send(llama_pair.spec_same, chat_body(PROMPTS[1], stream=True))
    assert measurement.chunk_tokens == (1,) * 48
    assert measurement.ttft_us is not None
    assert measurement.e2e_us is not None
    assert measurement.e2e_us >= measurement.ttft_us


async def test_backend_reuses_no_connection_the_server_closed(llama_pair: PairUrls) -> None:
    """One HttpBackend can send a non-streamed request right after a streamed one."""
    backend = HttpBackend(
        BackendSpec(llama_pair.spec_same, Role.CANDIDATE, kind=BackendKind.OPENAI)
    )
    await backend.start()
    try:
        kinds = []
        for stream in (True, False, True, True):
            body = orjson.dumps(chat_body(PROMPTS[2], max_tokens=8, stream=stream))
            m = await send(
                backend, UpstreamRequest(Route.CHAT, body, stream), on_done=lambda _m: None
            )
            kinds.append(m.error_kind)
    finally:
        await backend.close()
    assert kinds == [None] * 4
