"""Body parsing, version comparison and what the proxy adds to (and strips from) streams."""

from __future__ import annotations

import orjson
import pytest

from specproxy.core.protocol.shaping import (
    NO_INJECTION,
    BadRequest,
    Injection,
    parse_body,
    plan_upstream,
)
from specproxy.core.protocol.sse import SseDecoder
from specproxy.core.protocol.versions import supports_spec_details, version_tuple
from specproxy.core.records.model import Route

BOTH = Injection(spec_details=True, usage=True)
TAIL = (
    b'data: {"id":"a","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"id":"a","choices":[],"sglext":{"spec_tokens_details":{"spec_verify_ct":3}}}\n\n'
    b'data: {"id":"a","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":4}}\n\n'
    b"data: [DONE]\n\n"
)


def _kept(plan_drop: object, raw: bytes) -> list[bytes]:
    events = SseDecoder().feed(raw)
    assert callable(plan_drop)
    return [e.raw for e in events if not plan_drop(e)]


def test_invalid_json_names_the_position() -> None:
    """A malformed body is refused with the parser's message and the byte position."""
    with pytest.raises(BadRequest, match=r"request body is not valid JSON: .* at position 9"):
        parse_body(b'{"model":,}')


@pytest.mark.parametrize(
    ("raw", "message"),
    [(b"", "request body is empty"), (b"[1, 2]", "must be a JSON object, got list")],
)
def test_body_must_be_an_object(raw: bytes, message: str) -> None:
    """Empty bodies and JSON that is not an object are refused by name."""
    with pytest.raises(BadRequest, match=message):
        parse_body(raw)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("0.5.16", False),
        ("0.5.9", False),
        ("0.5.19", True),
        ("0.5.23", True),
        ("0.5.19.post1", True),
        ("0.5.20rc1", True),
        ("0.6.0", True),
        ("0.10.1", True),
        (None, False),
        ("dev", False),
    ],
)
def test_spec_details_version_gate_is_numeric(version: str | None, expected: bool) -> None:
    """return_spec_tokens_details is used from SGLang 0.5.19 on, comparing numbers not strings."""
    assert supports_spec_details(version) is expected


def test_version_tuple_parses_suffixes() -> None:
    """Suffixes after the numeric part are ignored."""
    assert version_tuple("v0.5.23+gabc") == (0, 5, 23)


def test_non_streaming_and_generate_bodies_are_forwarded_unchanged() -> None:
    """Without a stream, or on /generate, the upstream body is the client's exact bytes."""
    raw = b'{"model": "m",  "messages": []}'
    obj = orjson.loads(raw)
    assert plan_upstream(Route.CHAT, raw, obj, stream=False, allowed=BOTH).body is raw
    gen = b'{"text": "x", "stream": true}'
    plan = plan_upstream(Route.GENERATE, gen, orjson.loads(gen), stream=True, allowed=BOTH)
    assert plan.body is gen
    assert plan.drop_event is None


def test_stream_gets_both_injections_and_both_events_are_dropped() -> None:
    """A plain stream gets spec details and include_usage upstream; the client loses both events."""
    obj = {"model": "m", "stream": True, "stream_options": {"continuous_usage_stats": False}}
    plan = plan_upstream(Route.CHAT, orjson.dumps(obj), obj, stream=True, allowed=BOTH)
    sent = orjson.loads(plan.body)
    assert sent["return_spec_tokens_details"] is True
    assert sent["stream_options"] == {"continuous_usage_stats": False, "include_usage": True}
    kept = _kept(plan.drop_event, TAIL)
    assert kept == [TAIL.split(b"\n\n")[0] + b"\n\n", b"data: [DONE]\n\n"]


def test_client_that_asked_for_usage_keeps_its_usage_event() -> None:
    """When the client asked for include_usage itself, only the injected sglext event is dropped."""
    obj = {"stream": True, "stream_options": {"include_usage": True}}
    plan = plan_upstream(Route.COMPLETIONS, orjson.dumps(obj), obj, stream=True, allowed=BOTH)
    assert orjson.loads(plan.body)["return_spec_tokens_details"] is True
    kept = _kept(plan.drop_event, TAIL)
    assert len(kept) == 3
    assert b'"usage"' in kept[1]


def test_client_that_asked_for_sglext_content_gets_nothing_added() -> None:
    """A client asking for any sglext content gets no spec details injected, so its event is intact."""
    obj = {
        "stream": True,
        "return_cached_tokens_details": True,
        "stream_options": {"include_usage": True},
    }
    raw = orjson.dumps(obj)
    plan = plan_upstream(Route.CHAT, raw, obj, stream=True, allowed=BOTH)
    assert plan.body is raw
    assert plan.drop_event is None


def test_nothing_added_when_nothing_is_allowed() -> None:
    """Servers that allow no injection (kind openai, unknown version) get the client's bytes."""
    obj = {"stream": True}
    raw = orjson.dumps(obj)
    assert plan_upstream(Route.CHAT, raw, obj, stream=True, allowed=NO_INJECTION).body is raw
    usage_only = plan_upstream(Route.CHAT, raw, obj, stream=True, allowed=Injection(usage=True))
    assert "return_spec_tokens_details" not in orjson.loads(usage_only.body)


def test_mirror_allows_only_what_both_sides_allow() -> None:
    """The AND of two injections keeps only what both servers accept."""
    assert (BOTH & Injection(usage=True)) == Injection(spec_details=False, usage=True)
