"""ResponseMeter replaying real SGLang and llama.cpp captures at their recorded read times."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from specproxy.core.measurement.measure import ResponseMeter
from specproxy.core.protocol.events import Dialect
from specproxy.core.records.model import AcceptanceSource, Route
from specproxy.testing.captures import (
    LLAMACPP,
    LLAMACPP_CONFIGS,
    SGLANG_SERVERS,
    data_events,
    llamacpp_lines,
    llamacpp_manifest,
    replay_llamacpp,
    replay_sglang,
    sglang_exchange,
)

_STREAMS = {
    "generate_stream": Route.GENERATE,
    "completions_stream_usage": Route.COMPLETIONS,
    "completions_stream_no_usage": Route.COMPLETIONS,
    "chat_stream_usage": Route.CHAT,
    "chat_stream_no_usage": Route.CHAT,
}
# README: "For 64 tokens, sa_copy sent 45 events, sa_copy_b sent 17 and ngram sent 27; base sent 64."
_GENERATE_EVENTS = {
    "run_a_init0.1/base": 64,
    "run_a_init0.1/sa_copy": 45,
    "run_a_init0.1/ngram": 27,
    "run_b_attn_off/sa_copy_b": 17,
}


def _us(seconds: float) -> int:
    return round(seconds * 1_000_000)


def _is_output(route: Route, payload: dict[str, Any]) -> bool:
    """Independent reading of the captured payloads: does this event carry output?"""
    if route is Route.GENERATE:
        return True  # every /generate event of these captures adds tokens
    choices = payload.get("choices") or []
    if not choices:
        return False
    if route is Route.CHAT:
        return bool(choices[0]["delta"].get("content"))
    return bool(choices[0]["text"]) or choices[0]["finish_reason"] is None


def _expected_ttft_us(entry: dict[str, Any], route: Route, body: bytes) -> int:
    """The first socket read whose data-count includes the first output event."""
    payloads = [json.loads(d) for d in data_events(body) if d != "[DONE]"]
    nth = 1 + next(i for i, p in enumerate(payloads) if _is_output(route, p))
    return next(_us(t) for t, _b, count in entry["recv_timings"] if count >= nth)


@pytest.mark.parametrize("server", SGLANG_SERVERS)
@pytest.mark.parametrize("name", list(_STREAMS))
def test_sglang_stream_replay(server: str, name: str) -> None:
    """TTFT, E2E, chunk count, tokens and text match what each SGLang stream capture shows."""
    route = _STREAMS[name]
    entry, cap = sglang_exchange(server, name)
    meter = ResponseMeter(route, True, keep_text=True)
    m, events = replay_sglang(meter, entry, cap)
    assert b"".join(e.raw for e in events) == cap.body  # every byte in exactly one event
    payloads = [json.loads(d) for d in data_events(cap.body) if d != "[DONE]"]
    outputs = [p for p in payloads if _is_output(route, p)]
    assert m.ok, m.error_message
    assert m.status == 200
    assert m.ttft_us == _expected_ttft_us(entry, route, cap.body)
    assert m.e2e_us == _us(entry["recv_timings"][-1][0])
    assert len(m.chunk_offsets_us) == len(outputs)
    assert list(m.chunk_offsets_us) == sorted(m.chunk_offsets_us)
    assert m.finish_reason == "length"
    with_usage = route is Route.GENERATE or name.endswith("stream_usage")
    assert m.completion_tokens == (64 if with_usage else None)
    assert m.prompt_tokens == (None if not with_usage else 39 if route is Route.CHAT else 35)
    if with_usage:
        assert sum(m.chunk_tokens) == 64
        assert m.tpot_us == (m.e2e_us - m.ttft_us) // 63
    else:
        assert m.tpot_us is None
    assert m.chunk_tokens_estimated is (route is not Route.GENERATE)
    assert m.output_text == _expected_text(route, payloads)
    assert m.output_sha256 == hashlib.sha256(m.output_text.encode()).hexdigest()


def _expected_text(route: Route, payloads: list[dict[str, Any]]) -> str:
    if route is Route.GENERATE:
        text: str = payloads[-1]["text"]
        return text
    choices = [c for p in payloads for c in p.get("choices") or []]
    if route is Route.COMPLETIONS:
        return "".join(c["text"] for c in choices)
    return "".join(c["delta"].get("content") or "" for c in choices)


@pytest.mark.parametrize("server", list(_GENERATE_EVENTS))
def test_generate_stream_event_counts_match_the_readme(server: str) -> None:
    """The /generate streams carry 64/45/27/17 output events for 64 tokens (README)."""
    entry, cap = sglang_exchange(server, "generate_stream")
    m, _ = replay_sglang(ResponseMeter(Route.GENERATE, True), entry, cap)
    assert len(m.chunk_offsets_us) == _GENERATE_EVENTS[server]
    assert entry["recv_timings"][-1][2] - 1 == _GENERATE_EVENTS[server]  # minus [DONE]


@pytest.mark.parametrize("server", SGLANG_SERVERS)
def test_generate_stream_exact_tokens_and_acceptance(server: str) -> None:
    """Exact per-chunk tokens from meta_info deltas; acceptance and server E2E from the final event."""
    entry, cap = sglang_exchange(server, "generate_stream")
    m, _ = replay_sglang(ResponseMeter(Route.GENERATE, True), entry, cap)
    payloads = [json.loads(d) for d in data_events(cap.body) if d != "[DONE]"]
    running = [p["meta_info"]["completion_tokens"] for p in payloads]
    assert list(m.chunk_tokens) == [b - a for a, b in zip([0, *running], running, strict=False)]
    final = payloads[-1]["meta_info"]
    assert m.server_e2e_us == _us(final["e2e_latency"])
    assert m.cached_tokens == final["cached_tokens"]
    a = m.acceptance
    assert a is not None
    if "spec_verify_ct" in final:
        assert a.source is AcceptanceSource.META_INFO
        assert a.accept_length == final["spec_accept_length"]
        assert a.verify_ct == final["spec_verify_ct"]
        assert a.histogram == tuple(final["spec_correct_drafts_histogram"])
    else:  # baseline: tokens per chunk, 64 tokens in 64 chunks
        assert a.source is AcceptanceSource.CHUNK_ESTIMATE
        assert a.accept_length == pytest.approx(64 / 63)


def test_sa_copy_generate_non_stream() -> None:
    """sa_copy 11_generate: 64 tokens, accept length 1.4545.., 44 verifies, server e2e from meta."""
    entry, cap = sglang_exchange("run_a_init0.1/sa_copy", "generate")
    m, events = replay_sglang(ResponseMeter(Route.GENERATE, False), entry, cap)
    assert events == []
    body = json.loads(cap.body)
    assert (m.completion_tokens, m.prompt_tokens) == (64, 35)
    assert m.ttft_us is None
    assert m.tpot_us is None
    assert m.e2e_us == _us(0.926391)
    assert m.server_e2e_us == _us(body["meta_info"]["e2e_latency"])
    assert m.output_sha256 == hashlib.sha256(body["text"].encode()).hexdigest()
    assert m.output_text is None  # keep_text off
    a = m.acceptance
    assert a is not None
    assert a.accept_length == pytest.approx(1.4545454545454546)
    assert (a.verify_ct, a.correct_drafts, a.proposed_drafts) == (44, 19, 132)


@pytest.mark.parametrize("server", SGLANG_SERVERS)
@pytest.mark.parametrize(
    ("name", "route"), [("completions", Route.COMPLETIONS), ("chat", Route.CHAT)]
)
def test_openai_non_stream_bodies_have_usage_and_no_acceptance(
    server: str, name: str, route: Route
) -> None:
    """OpenAI non-stream bodies of 0.5.16 carry usage but no spec fields (README)."""
    entry, cap = sglang_exchange(server, name)
    m, _ = replay_sglang(ResponseMeter(route, False), entry, cap)
    assert m.ok
    assert m.completion_tokens == json.loads(cap.body)["usage"]["completion_tokens"] == 64
    assert m.acceptance is None


def test_stream_estimate_matches_generate_on_the_same_server() -> None:
    """sa_copy's completions stream has one chunk per step: the estimate equals 64/44."""
    entry, cap = sglang_exchange("run_a_init0.1/sa_copy", "completions_stream_usage")
    m, _ = replay_sglang(ResponseMeter(Route.COMPLETIONS, True), entry, cap)
    a = m.acceptance
    assert a is not None
    assert a.source is AcceptanceSource.CHUNK_ESTIMATE
    assert a.accept_length == pytest.approx(1.4545454545454546)
    assert a.verify_ct == 44


def test_stream_without_usage_has_no_estimate() -> None:
    """Without usage there is no token count, so neither TPOT nor an acceptance estimate."""
    entry, cap = sglang_exchange("run_a_init0.1/sa_copy", "chat_stream_no_usage")
    m, _ = replay_sglang(ResponseMeter(Route.CHAT, True), entry, cap)
    assert m.acceptance is None
    assert set(m.chunk_tokens) == {1}


_LLAMA_STREAMS = [
    ("chat_stream", Route.CHAT, None),
    ("completions_stream", Route.COMPLETIONS, None),
    ("native_completion_stream", Route.COMPLETIONS, Dialect.LLAMACPP_COMPLETION),
]


def _llama_first_output_us(config: str, stream: str) -> int:
    """Arrival of the blank line that completes the first event with text."""
    lines = llamacpp_lines(config, stream)
    for i, (_ms, line) in enumerate(lines):
        if line.startswith("data: {") and _has_text(json.loads(line[6:])):
            return next(round(ms * 1000) for ms, blank in lines[i + 1 :] if blank == "\n")
    raise AssertionError("no text")


def _has_text(obj: dict[str, Any]) -> bool:
    if "content" in obj:
        return bool(obj["content"])
    choice = (obj.get("choices") or [{}])[0]
    return bool(choice.get("text") or (choice.get("delta") or {}).get("content"))


@pytest.mark.parametrize("config", LLAMACPP_CONFIGS)
@pytest.mark.parametrize(("stream", "route", "dialect"), _LLAMA_STREAMS)
def test_llamacpp_stream_replay(
    config: str, stream: str, route: Route, dialect: Dialect | None
) -> None:
    """llama.cpp streams: TTFT at the first text event, 64 tokens, acceptance from timings."""
    m = replay_llamacpp(ResponseMeter(route, True, dialect=dialect), config, stream)
    manifest = llamacpp_manifest(config)[stream]
    assert m.ok, m.error_message
    assert m.ttft_us == _llama_first_output_us(config, stream)
    assert abs(m.ttft_us - manifest["ttft_ms"] * 1000) < 100  # the capture's own TTFT (data line)
    assert m.e2e_us == round(manifest["t_total_ms"] * 1000)
    assert m.completion_tokens == 64
    assert len(m.chunk_offsets_us) == 64  # one event per token, even with speculation
    assert sum(m.chunk_tokens) == 64
    assert m.chunk_tokens_estimated is (dialect is None)  # native events list their tokens
    assert m.finish_reason == "length"
    final = _final_timings(config, stream)
    if "draft_n" in final:
        a = m.acceptance
        assert a is not None
        assert a.source is AcceptanceSource.LLAMACPP_TIMINGS
        assert (a.proposed_drafts, a.correct_drafts) == (
            final["draft_n"],
            final["draft_n_accepted"],
        )
        assert a.verify_ct == 64 - final["draft_n_accepted"] - 1
    else:
        assert m.acceptance is None  # no chunk estimate: one event per token says nothing


def _final_timings(config: str, stream: str) -> dict[str, Any]:
    for _ms, line in reversed(llamacpp_lines(config, stream)):
        if '"timings"' in line:
            timings: dict[str, Any] = json.loads(line[6:])["timings"]
            return timings
    raise AssertionError("no timings")


@pytest.mark.parametrize("config", LLAMACPP_CONFIGS)
@pytest.mark.parametrize(
    ("name", "route", "dialect"),
    [
        ("chat_nonstream.json", Route.CHAT, None),
        ("completions_nonstream.json", Route.COMPLETIONS, None),
        ("native_completion.json", Route.COMPLETIONS, Dialect.LLAMACPP_COMPLETION),
    ],
)
def test_llamacpp_non_stream_bodies(
    config: str, name: str, route: Route, dialect: Dialect | None
) -> None:
    """llama.cpp non-stream bodies give tokens, text hash and acceptance from timings."""
    raw = (LLAMACPP / config / name).read_bytes()
    meter = ResponseMeter(route, False, dialect=dialect, keep_text=True)
    meter.on_headers(100, 200)
    meter.feed(150, raw)
    m = meter.finish(200)
    body = json.loads(raw)
    assert m.completion_tokens == 64
    text = body.get("content")
    if text is None:
        choice = body["choices"][0]
        text = choice.get("text") or choice["message"]["content"]
    assert m.output_text == text
    timings = body["timings"]
    a = m.acceptance
    if "draft_n" in timings:
        assert a is not None
        assert a.proposed_drafts == timings["draft_n"]
    else:
        assert a is None
