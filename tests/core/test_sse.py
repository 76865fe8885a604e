"""Deterministic cases of the SSE decoder that the property tests found or that SGLang sends."""

from __future__ import annotations

import orjson

from specproxy.core.protocol.sse import SseDecoder, encode_event, encode_json_event
from specproxy.testing.captures import sglang_exchange


def test_final_cr_at_end_of_stream_ends_its_block() -> None:
    """A stream whose last block ends with CR CR is complete at flush (the CR is not held forever)."""
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\r\r") == []  # the last CR could still be half of CRLF
    (event,) = decoder.flush()
    assert (event.data, event.complete, event.raw) == ("a", True, b"data: a\r\r")


def test_cut_off_block_is_incomplete() -> None:
    """A block cut off by the end of the stream comes back from flush marked incomplete."""
    decoder = SseDecoder()
    assert decoder.feed(b"data: [DONE]\n") == []
    (event,) = decoder.flush()
    assert (event.data, event.complete) == ("[DONE]", False)


def test_padding_comments_and_fields() -> None:
    """Padding lines and comment blocks are data-less events; event/id fields are parsed."""
    raw = b"\n: keep-alive\n\nevent: sglext_ids\nid: 7\ndata: {}\n\n"
    events = SseDecoder().feed(raw)
    assert [(e.data, e.event, e.id) for e in events] == [
        (None, None, None),
        (None, None, None),
        ("{}", "sglext_ids", "7"),
    ]
    assert b"".join(e.raw for e in events) == raw


def test_encoders_round_trip() -> None:
    """encode_json_event and multi-line encode_event decode back to their payloads."""
    obj = {"text": "a\nb", "n": 1}
    (event,) = SseDecoder().feed(encode_json_event(obj))
    assert event.json() == obj
    (multi,) = SseDecoder().feed(encode_event("line1\nline2", event="x"))
    assert (multi.data, multi.event) == ("line1\nline2", "x")


def test_real_sglang_stream_decodes_into_its_data_events() -> None:
    """The de-chunked sa_copy /generate stream decodes into 45 JSON events and [DONE]."""
    _, cap = sglang_exchange("run_a_init0.1/sa_copy", "generate_stream")
    decoder = SseDecoder()
    events = decoder.feed(cap.body) + decoder.flush()
    assert len(events) == 46
    assert events[-1].is_done
    assert all(isinstance(orjson.loads(e.data or ""), dict) for e in events[:-1])
