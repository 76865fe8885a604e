"""``measure_recorded`` (the relay's fold at the end) equals the per-read meter on the same reads.

The hot path keeps every upstream read as ``(t_us, bytes)`` and measures once at the end;
these tests hold it to the Measurement that ``ResponseMeter`` builds when fed read by read
at the same times: on real SGLang and llama.cpp captures split at arbitrary points, on
arbitrary SSE streams (CR line ends, padding, comments, cut-off tails), on simulator
output received over HTTP, and with failures.
"""

from __future__ import annotations

import time
from itertools import pairwise

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core.measurement.measure import ResponseMeter, measure_recorded
from specproxy.core.protocol.sse_split import simple_events
from specproxy.core.records.model import ErrorKind, Measurement, Route
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.testing.captures import LLAMACPP, SGLANG_SERVERS, sglang_exchange
from tests.core.test_sse_property import _stream

STREAMS = [
    ("generate_stream", Route.GENERATE),
    ("chat_stream_usage", Route.CHAT),
    ("chat_stream_no_usage", Route.CHAT),
    ("completions_stream_usage", Route.COMPLETIONS),
    ("completions_stream_no_usage", Route.COMPLETIONS),
]


def _per_read(
    route: Route,
    chunks: list[tuple[int, bytes]],
    *,
    status: int = 200,
    end_us: int,
    failure: tuple[ErrorKind, str] | None = None,
    stream: bool = True,
) -> Measurement:
    meter = ResponseMeter(route, stream, keep_text=True)
    meter.on_headers(10, status)
    for t_us, data in chunks:
        meter.feed(t_us, data)
    if failure is None:
        return meter.finish(end_us)
    return meter.fail(end_us, *failure)


def _reads(data: bytes, cuts: list[int]) -> list[tuple[int, bytes]]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [(100 * (i + 1), data[a:b]) for i, (a, b) in enumerate(pairwise(bounds)) if b > a]


def _both(
    route: Route,
    chunks: list[tuple[int, bytes]],
    *,
    status: int = 200,
    failure: tuple[ErrorKind, str] | None = None,
    stream: bool = True,
) -> tuple[Measurement, Measurement]:
    end_us = 100 * (len(chunks) + 2)
    folded = measure_recorded(
        route,
        stream,
        status=status,
        headers_us=10,
        chunks=chunks,
        end_us=end_us,
        failure=failure,
        keep_text=True,
    )
    expected = _per_read(
        route, chunks, status=status, end_us=end_us, failure=failure, stream=stream
    )
    return folded, expected


@pytest.mark.parametrize("server", SGLANG_SERVERS)
@pytest.mark.parametrize(("name", "route"), STREAMS)
@settings(max_examples=15, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0), max_size=40))
def test_sglang_captures_fold_like_the_per_read_meter(
    server: str, name: str, route: Route, cuts: list[int]
) -> None:
    _, cap = sglang_exchange(server, name)
    chunks = _reads(cap.body, cuts)
    assert simple_events(chunks) is not None  # the split path, not the decoder's
    folded, expected = _both(route, chunks)
    assert folded == expected
    assert folded.error_kind is None and folded.chunk_offsets_us


@pytest.mark.parametrize("stream_name", ["chat_stream", "completions_stream"])
@settings(max_examples=15, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0), max_size=40))
def test_llamacpp_captures_fold_like_the_per_read_meter(stream_name: str, cuts: list[int]) -> None:
    body = (LLAMACPP / "tiny/baseline" / f"{stream_name}.sse").read_bytes()
    route = Route.CHAT if stream_name == "chat_stream" else Route.COMPLETIONS
    folded, expected = _both(route, _reads(body, cuts))
    assert folded == expected
    assert folded.completion_tokens


@settings(max_examples=400, deadline=None)
@given(
    data=_stream(),
    cuts=st.lists(st.integers(min_value=0), max_size=12),
    route=st.sampled_from(list(Route)),
)
def test_any_sse_stream_folds_like_the_per_read_meter(
    data: bytes, cuts: list[int], route: Route
) -> None:
    """Padding, comments, CR line ends, a BOM and cut-off tails: the slow path decides."""
    folded, expected = _both(route, _reads(data, cuts))
    assert folded == expected


def test_a_crlf_stream_splits_its_events_where_the_decoder_does() -> None:
    """A CR at the end of a read waits for the next: the event is that read's, in both."""
    body = b'data: {"text":"a","meta_info":{"completion_tokens":1}}\r\n\r'
    chunks = [(100, body), (900, b"\ndata: [DONE]\r\n\r\n")]
    folded, expected = _both(Route.GENERATE, chunks)
    assert folded == expected
    assert folded.chunk_offsets_us == (900,)


@pytest.mark.parametrize(
    "failure",
    [(ErrorKind.STREAM_TRUNCATED, "cut"), (ErrorKind.CLIENT_CANCELLED, "client disconnected")],
)
def test_failures_keep_what_arrived(failure: tuple[ErrorKind, str]) -> None:
    _, cap = sglang_exchange("run_a_init0.1/base", "chat_stream_usage")
    chunks = _reads(cap.body[: len(cap.body) // 2], [7, 300, 800])
    folded, expected = _both(Route.CHAT, chunks, failure=failure)
    assert folded == expected
    assert folded.error_kind is failure[0] and folded.chunk_offsets_us


def test_unary_and_error_bodies_fold_like_the_per_read_meter() -> None:
    _, cap = sglang_exchange("run_a_init0.1/base", "chat")
    folded, expected = _both(Route.CHAT, _reads(cap.body, [5, 50]), stream=False)
    assert folded == expected and folded.completion_tokens
    error = b'{"object":"error","message":"bad","type":"BadRequestError","code":400}'
    folded, expected = _both(Route.CHAT, [(100, error)], status=400)
    assert folded == expected and folded.error_kind is ErrorKind.HTTP_4XX


def test_no_response_is_a_failure_without_status() -> None:
    m = measure_recorded(
        Route.CHAT,
        True,
        status=None,
        headers_us=0,
        chunks=[],
        end_us=50,
        failure=(ErrorKind.CONNECT, "refused"),
    )
    assert m.status is None and m.error_kind is ErrorKind.CONNECT and m.e2e_us == 50


@pytest.mark.parametrize(
    ("path", "body", "route"),
    [
        ("/generate", {"text": "a b c", "stream": True}, Route.GENERATE),
        (
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
                "stream_options": {"include_usage": True},
            },
            Route.CHAT,
        ),
        ("/v1/completions", {"prompt": "hi", "stream": True}, Route.COMPLETIONS),
    ],
)
async def test_simulator_streams_fold_like_the_per_read_meter(
    path: str, body: dict[str, object], route: Route
) -> None:
    """Reads as they came off a real socket from the simulator, with their real times."""
    config = SimConfig(decode_step_ms=0.5, prefill_us_per_token=1.0)
    async with serve_in_background(config) as url, aiohttp.ClientSession() as session:
        t0 = time.perf_counter_ns()
        async with session.post(url + path, json={**body, "max_tokens": 24}) as resp:
            assert resp.status == 200
            chunks = [
                ((time.perf_counter_ns() - t0) // 1000, data)
                async for data in resp.content.iter_any()
            ]
    folded, expected = _both(route, chunks)
    assert folded == expected
    assert folded.error_kind is None and len(folded.chunk_offsets_us) >= 2
