"""ResponseMeter failure classification, partial data, and split-invariance."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from specproxy.core.measurement.measure import MAX_ERROR_CHARS, ResponseMeter
from specproxy.core.protocol.errortext import MAX_HEAD_CHARS
from specproxy.core.protocol.events import Dialect
from specproxy.core.protocol.sse import encode_json_event
from specproxy.core.records.model import AcceptanceSource, ErrorKind, Measurement, Route
from specproxy.testing.captures import LLAMACPP, sglang_exchange

_DONE = b"data: [DONE]\n\n"


def _run(
    route: Route, stream: bool, status: int, body: bytes, dialect: Dialect | None = None
) -> Measurement:
    meter = ResponseMeter(route, stream, dialect=dialect)
    meter.on_headers(1_000, status)
    meter.feed(2_000, body)
    return meter.finish(3_000)


def _chat(delta: dict[str, object], finish: str | None = None) -> bytes:
    return encode_json_event({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def test_http_errors_keep_the_servers_message() -> None:
    """Status >= 400 is http_4xx/http_5xx with the status, the error's identifiers and the message's head."""
    flat = b'{"object":"error","message":"max_tokens too large","type":"BadRequestError","param":null,"code":400}'
    m = _run(Route.CHAT, True, 400, flat)
    assert (m.error_kind, m.error_message, m.status) == (
        ErrorKind.HTTP_4XX,
        "HTTP 400: BadRequestError; code=400; max_tokens too large",
        400,
    )
    m = _run(Route.GENERATE, False, 401, b'{"error": "Unauthorized"}')
    assert (m.error_kind, m.error_message) == (ErrorKind.HTTP_4XX, "HTTP 401: Unauthorized")
    m = _run(Route.GENERATE, False, 400, b'{"error": {"message": "prompt too long"}}')
    assert m.error_message == "HTTP 400: prompt too long"
    llama = (LLAMACPP / "tiny/baseline/error_bad_json.json").read_bytes()
    m = _run(Route.CHAT, False, 500, llama)
    assert m.error_kind is ErrorKind.HTTP_5XX
    assert m.error_message is not None
    assert m.error_message == "HTTP 500: server_error; code=500"  # the quoted input is not kept
    m = _run(Route.CHAT, False, 503, b"")
    assert (m.error_kind, m.error_message) == (ErrorKind.HTTP_5XX, "HTTP 503")


def test_error_message_is_trimmed() -> None:
    """A long error message keeps only its head, well within the 300-character cap."""
    m = _run(Route.CHAT, False, 400, orjson.dumps({"error": {"message": "x" * 5000}}))
    assert m.error_message == "HTTP 400: " + "x" * MAX_HEAD_CHARS
    assert len(m.error_message) <= MAX_ERROR_CHARS


def test_error_status_body_is_not_decoded_as_sse() -> None:
    """With status >= 400 on a stream request, feed returns no events (the relay forwards bytes)."""
    meter = ResponseMeter(Route.CHAT, True)
    meter.on_headers(10, 400)
    assert meter.feed(20, b'data: {"error": "x"}\n\n') == []


def test_in_stream_error_event_is_stream_error_with_partial_data() -> None:
    """An in-stream error event gives stream_error and keeps the chunks that came before it."""
    err = {"error": {"message": "scheduler failed", "type": "invalid_request_error", "code": 400}}
    body = _chat({"role": "assistant", "content": ""}) + _chat({"content": "hi"})
    body += encode_json_event(err) + _DONE
    m = _run(Route.CHAT, True, 200, body)
    assert (m.error_kind, m.error_message) == (ErrorKind.STREAM_ERROR, "scheduler failed")
    assert m.ttft_us == 2_000
    assert len(m.chunk_offsets_us) == 1


def test_stream_cut_before_done_is_truncated() -> None:
    """A real stream cut just before [DONE] is stream_truncated, with all its chunks kept."""
    _entry, cap = sglang_exchange("run_a_init0.1/sa_copy", "generate_stream")
    cut = cap.body[: cap.body.rindex(b"data: [DONE]")]
    m = _run(Route.GENERATE, True, 200, cut)
    assert m.error_kind is ErrorKind.STREAM_TRUNCATED
    assert len(m.chunk_offsets_us) == 45
    assert m.completion_tokens == 64
    assert m.acceptance is not None
    assert m.acceptance.verify_ct == 44


def test_native_llamacpp_stream_cut_before_stop_is_truncated() -> None:
    """llama.cpp's native stream has no [DONE]; cut before its stop event it is truncated."""
    body = (LLAMACPP / "tiny/spec-noisy/native_completion_stream.sse").read_bytes()
    cut = body[: body.index(b'"stop":true') - 60]
    cut = cut[: cut.rindex(b"\n\n") + 2]
    m = _run(Route.COMPLETIONS, True, 200, cut, dialect=Dialect.LLAMACPP_COMPLETION)
    assert m.error_kind is ErrorKind.STREAM_TRUNCATED
    whole = _run(Route.COMPLETIONS, True, 200, body, dialect=Dialect.LLAMACPP_COMPLETION)
    assert whole.ok


def test_abort_finish_reasons_are_aborted() -> None:
    """finish_reason abort (chat word, or /generate object with message) classifies as aborted."""
    chat = _chat({"content": "a"}) + _chat({}, finish="abort") + _DONE
    m = _run(Route.CHAT, True, 200, chat)
    assert (m.error_kind, m.finish_reason) == (ErrorKind.ABORTED, "abort")
    meta = {
        "completion_tokens": 1,
        "finish_reason": {"type": "abort", "message": "Abort before prefill"},
    }
    gen = orjson.dumps({"text": "", "output_ids": [5], "meta_info": meta})
    m = _run(Route.GENERATE, False, 200, gen)
    assert (m.error_kind, m.error_message) == (ErrorKind.ABORTED, "Abort before prefill")


def test_fail_keeps_partial_data_and_trims_the_message() -> None:
    """A transport failure mid-stream keeps TTFT and chunks and records the given kind."""
    meter = ResponseMeter(Route.CHAT, True, keep_text=True)
    meter.on_headers(500, 200)
    meter.feed(1_000, _chat({"content": "ab"}))
    meter.feed(2_000, _chat({"content": "cd"}) + b'data: {"cho')
    m = meter.fail(2_500, ErrorKind.CLIENT_CANCELLED, "gone " * 100)
    assert m.error_kind is ErrorKind.CLIENT_CANCELLED
    assert m.error_message is not None
    assert len(m.error_message) == MAX_ERROR_CHARS
    assert (m.ttft_us, m.e2e_us, m.chunk_offsets_us) == (1_000, 2_500, (1_000, 2_000))
    assert m.output_text == "abcd"
    assert meter.finish(9_999) is m  # final: later calls return the same measurement


def test_fail_before_headers() -> None:
    """A connect failure has no status, no headers time, and the failure's own kind."""
    m = ResponseMeter(Route.GENERATE, False).fail(700, ErrorKind.CONNECT, "refused")
    assert (m.status, m.headers_us, m.error_kind, m.e2e_us) == (None, None, ErrorKind.CONNECT, 700)


def test_json_body_where_a_stream_was_asked_is_read_as_a_body() -> None:
    """A server that answers a stream request with one JSON body is still measured."""
    _, cap = sglang_exchange("run_a_init0.1/sa_copy", "generate")
    m = _run(Route.GENERATE, True, 200, cap.body)
    assert m.ok
    assert m.completion_tokens == 64
    assert m.acceptance is not None
    assert m.acceptance.verify_ct == 44


def test_bad_json_is_a_protocol_error() -> None:
    """A data event or a body that is not JSON gives the protocol error kind."""
    m = _run(Route.CHAT, True, 200, b"data: {nope\n\n" + _DONE)
    assert m.error_kind is ErrorKind.PROTOCOL
    m = _run(Route.CHAT, False, 200, b"<html>")
    assert m.error_kind is ErrorKind.PROTOCOL


def test_sglext_event_gives_per_request_acceptance() -> None:
    """A 0.5.19+ stream's trailing sglext event is the acceptance source (no chunk estimate)."""
    details = {"spec_accept_length": 3.0, "spec_verify_ct": 2, "spec_num_correct_drafts": 3}
    body = _chat({"content": "a"}) + _chat({"content": "bcde"}) + _chat({}, finish="stop")
    body += encode_json_event({"choices": [], "sglext": {"spec_tokens_details": details}})
    body += encode_json_event(
        {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 6}}
    )
    m = _run(Route.CHAT, True, 200, body + _DONE)
    assert m.ok
    assert m.acceptance is not None
    assert m.acceptance.source is AcceptanceSource.SGLEXT
    assert m.acceptance.accept_length == 3.0
    assert m.chunk_tokens == (1, 5)  # the prefill token first, then the rest
    assert m.chunk_tokens_estimated


def test_continuous_usage_gives_exact_chunk_tokens() -> None:
    """With continuous usage stats the chunk tokens are exact and not flagged as estimated."""
    body = b""
    for text, running in (("a", 1), ("bcd", 4), ("e", 5)):
        chunk = {
            "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
            "usage": {"prompt_tokens": 2, "completion_tokens": running},
        }
        body += encode_json_event(chunk)
    m = _run(Route.CHAT, True, 200, body + _DONE)
    assert (m.chunk_tokens, m.chunk_tokens_estimated, m.completion_tokens) == ((1, 3, 1), False, 5)


def test_missing_headers_is_a_protocol_error() -> None:
    """finish without on_headers cannot classify an HTTP status, so it is a protocol error."""
    assert ResponseMeter(Route.CHAT, False).finish(5).error_kind is ErrorKind.PROTOCOL


_CAPTURES = [
    ("run_a_init0.1/sa_copy", "generate_stream", Route.GENERATE),
    ("run_a_init0.1/ngram", "chat_stream_usage", Route.CHAT),
    ("run_b_attn_off/sa_copy_b", "completions_stream_usage", Route.COMPLETIONS),
]


@settings(max_examples=40, deadline=None)
@given(which=st.sampled_from(_CAPTURES), cuts=st.lists(st.integers(min_value=0), max_size=20))
def test_any_split_gives_the_same_measurement(
    which: tuple[str, str, Route], cuts: list[int]
) -> None:
    """However a body is split into reads (at one instant), the measurement is the same."""
    server, name, route = which
    _, cap = sglang_exchange(server, name)
    whole = _run(route, True, 200, cap.body)
    meter = ResponseMeter(route, True)
    meter.on_headers(1_000, 200)
    points = sorted({c % (len(cap.body) + 1) for c in cuts})
    for a, b in zip([0, *points], [*points, len(cap.body)], strict=True):
        meter.feed(2_000, cap.body[a:b])
    assert meter.finish(3_000) == whole
