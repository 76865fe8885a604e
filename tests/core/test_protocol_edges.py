"""Protocol edge cases of issue 10: reasoning output, accept length from verify_ct, SSE framing."""

from __future__ import annotations

import orjson
import pytest

from specproxy.core.measurement import acceptance as acc
from specproxy.core.measurement.measure import ResponseMeter
from specproxy.core.protocol.sse import BOM, SseDecoder, encode_json_event
from specproxy.core.records.model import AcceptanceSource, Measurement, Route
from specproxy.testing.captures import replay_sglang, sglang_exchange

_DONE = b"data: [DONE]\n\n"


def _run(route: Route, stream: bool, pieces: list[tuple[int, bytes]]) -> Measurement:
    meter = ResponseMeter(route, stream, keep_text=True)
    meter.on_headers(1, 200)
    for t_us, data in pieces:
        meter.feed(t_us, data)
    return meter.finish(pieces[-1][0] + 1)


def _chat(delta: dict[str, object], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return encode_json_event({"object": "chat.completion.chunk", "choices": [choice]})


def test_delta_reasoning_is_output_and_starts_ttft() -> None:
    """``delta.reasoning`` (newer OpenAI-compatible servers) is output: TTFT is its first token."""
    usage = encode_json_event({"choices": [], "usage": {"completion_tokens": 4}})
    m = _run(
        Route.CHAT,
        True,
        [
            (5, _chat({"role": "assistant", "content": ""})),
            (10, _chat({"reasoning": "think"})),
            (20, _chat({"reasoning": " more"})),
            (40, _chat({"content": "answer"})),
            (45, _chat({}, finish="stop")),
            (46, usage + _DONE),
        ],
    )
    assert m.ok
    assert m.ttft_us == 10
    assert len(m.chunk_offsets_us) == 3
    assert m.output_text == "think moreanswer"


def test_reasoning_in_a_non_streamed_message_is_output_text() -> None:
    """A non-streamed chat message's ``reasoning`` is part of its output text."""
    body = {
        "choices": [{"index": 0, "message": {"reasoning": "r", "content": "c"}}],
        "usage": {"completion_tokens": 2},
    }
    m = _run(Route.CHAT, False, [(5, orjson.dumps(body))])
    assert m.output_text == "rc"


def test_accept_length_from_verify_ct_when_the_length_is_missing() -> None:
    """sa_copy's real /generate body without ``spec_accept_length`` still gives 64 / 44."""
    entry, cap = sglang_exchange("run_a_init0.1/sa_copy", "generate")
    body = orjson.loads(cap.body)
    del body["meta_info"]["spec_accept_length"]
    m = _run(Route.GENERATE, False, [(5, orjson.dumps(body))])
    a = m.acceptance
    assert a is not None
    assert a.source is AcceptanceSource.META_INFO
    assert a.accept_length == pytest.approx(64 / 44)
    assert a.accept_length_from == acc.TOKENS_PER_VERIFY
    reported, _ = replay_sglang(ResponseMeter(Route.GENERATE, False), entry, cap)
    assert reported.acceptance is not None
    assert reported.acceptance.accept_length_from == acc.REPORTED


def test_verify_ct_without_tokens_gives_no_length_and_no_origin() -> None:
    """Without completion_tokens nothing can be computed: the length and its origin stay None."""
    a = acc.from_meta_info({"spec_verify_ct": 4})
    assert a is not None
    assert (a.accept_length, a.accept_length_from) == (None, None)


def test_leading_bom_keeps_the_first_event() -> None:
    """A stream that starts with a UTF-8 BOM measures like one without it, split anywhere."""
    entry, cap = sglang_exchange("run_a_init0.1/sa_copy", "generate_stream")
    plain, _ = replay_sglang(ResponseMeter(Route.GENERATE, True), entry, cap)
    for cut in (1, 2, 3, 4, 40):
        meter = ResponseMeter(Route.GENERATE, True)
        meter.on_headers(1, 200)
        data = BOM + cap.body
        events = meter.feed(10, data[:cut]) + meter.feed(20, data[cut:])
        m = meter.finish(30)
        assert b"".join(e.raw for e in events) == data
        assert m.ok
        assert len(m.chunk_offsets_us) == len(plain.chunk_offsets_us) == 45
        assert m.chunk_tokens == plain.chunk_tokens
        assert m.acceptance == plain.acceptance


def test_bom_is_stripped_only_at_the_start() -> None:
    """A BOM later in the stream is not a BOM: it stays part of the field name, as the standard says."""
    events = SseDecoder().feed(b"data: a\n\n" + BOM + b"data: b\n\n")
    assert [e.data for e in events] == ["a", None]


@pytest.mark.parametrize("line", [b"data:\n\n", b"data: \n\n", b"data:\r\n\r\n"])
def test_bare_data_line_does_not_fail_the_request(line: bytes) -> None:
    """An empty data field is dispatched with empty data and carries nothing: not ``protocol``."""
    (event,) = SseDecoder().feed(line)
    assert event.data == ""
    entry, cap = sglang_exchange("run_a_init0.1/sa_copy", "generate_stream")
    plain, _ = replay_sglang(ResponseMeter(Route.GENERATE, True), entry, cap)
    first_end = cap.body.index(b"\n\n") + 2
    m = _run(Route.GENERATE, True, [(10, cap.body[:first_end] + line + cap.body[first_end:])])
    assert m.ok, m.error_message
    assert m.chunk_tokens == plain.chunk_tokens
