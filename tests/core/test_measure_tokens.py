"""Tokens per stream event and per-token latency (ITL): exact where streams say, else estimated."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from specproxy.core.measurement.measure import ResponseMeter
from specproxy.core.protocol.sse import encode_json_event
from specproxy.core.records.model import Measurement, RequestRecord, Role, Route
from specproxy.testing.captures import SGLANG_SERVERS, data_events, replay_sglang, sglang_exchange

_DONE = b"data: [DONE]\n\n"


def _mean_itl_us(m: Measurement) -> float:
    pairs = m.itl_us
    return sum(v * n for v, n in pairs) / sum(n for _, n in pairs)


def _run_events(route: Route, stream: bool, events: list[tuple[int, bytes]]) -> Measurement:
    meter = ResponseMeter(route, stream)
    meter.on_headers(1, 200)
    for t_us, data in events:
        meter.feed(t_us, data)
    return meter.finish(events[-1][0] + 1 if events else 2)


@pytest.mark.parametrize("server", SGLANG_SERVERS)
@pytest.mark.parametrize(
    ("name", "route"),
    [("completions_stream_usage", Route.COMPLETIONS), ("chat_stream_usage", Route.CHAT)],
)
def test_total_only_stream_gives_the_exact_mean_itl(server: str, name: str, route: Route) -> None:
    """With only a final usage total, mean ITL is (last - first event) / (tokens - 1), as on
    SGLang the first event is the single prefill token (shown by the same server's /generate)."""
    g_entry, g_cap = sglang_exchange(server, "generate_stream")
    generate, _ = replay_sglang(ResponseMeter(Route.GENERATE, True), g_entry, g_cap)
    assert generate.chunk_tokens[0] == 1 and not generate.chunk_tokens_estimated
    entry, cap = sglang_exchange(server, name)
    m, _ = replay_sglang(ResponseMeter(route, True), entry, cap)
    assert m.completion_tokens == 64
    offsets = m.chunk_offsets_us
    exact = (offsets[-1] - offsets[0]) / (m.completion_tokens - 1)
    assert m.chunk_tokens[0] == 1
    assert sum(n for _, n in m.itl_us) == m.completion_tokens - 1
    assert exact - 1 < _mean_itl_us(m) <= exact  # integer division loses < 1 us per token
    assert m.itl_estimated


def test_ngram_total_only_stream_weights_later_events_by_text() -> None:
    """NGRAM's 7-event completions stream: 1 prefill token, then 63 shared by text length."""
    entry, cap = sglang_exchange("run_a_init0.1/ngram", "completions_stream_usage")
    m, _ = replay_sglang(ResponseMeter(Route.COMPLETIONS, True), entry, cap)
    payloads = [json.loads(d) for d in data_events(cap.body) if d != "[DONE]"]
    texts = [p["choices"][0]["text"] for p in payloads if p["choices"]]
    assert len(texts) == len(m.chunk_tokens) == 7
    assert sum(m.chunk_tokens) == 64
    longest = max(range(1, 7), key=lambda i: len(texts[i]))
    shortest = min(range(1, 7), key=lambda i: len(texts[i]))
    assert m.chunk_tokens[longest] > m.chunk_tokens[shortest]


@pytest.mark.parametrize("server", SGLANG_SERVERS)
def test_generate_stream_itl_is_exact(server: str) -> None:
    """/generate running counts make ITL exact: its tokens are all output tokens but the first."""
    entry, cap = sglang_exchange(server, "generate_stream")
    m, _ = replay_sglang(ResponseMeter(Route.GENERATE, True), entry, cap)
    assert not m.itl_estimated
    assert sum(n for _, n in m.itl_us) == m.completion_tokens - m.chunk_tokens[0]


def _chat_chunk(delta: dict[str, Any], **extra: Any) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": None, **extra}
    return encode_json_event({"object": "chat.completion.chunk", "choices": [choice]})


def test_chat_logprobs_entries_are_exact_token_counts() -> None:
    """Per-token ``logprobs.content`` entries count each chunk's tokens exactly."""

    def lp(n: int) -> dict[str, Any]:
        return {"content": [{"token": "t", "logprob": -0.1}] * n}

    usage = encode_json_event({"choices": [], "usage": {"completion_tokens": 6}})
    m = _run_events(
        Route.CHAT,
        True,
        [
            (10, _chat_chunk({"role": "assistant", "content": ""})),
            (10, _chat_chunk({"content": "a"}, logprobs=lp(1))),
            (30, _chat_chunk({"content": "bcdef"}, logprobs=lp(2))),
            (50, _chat_chunk({"content": "g"}, logprobs=lp(3))),
            (51, usage + _DONE),
        ],
    )
    assert (m.chunk_tokens, m.chunk_tokens_estimated) == ((1, 2, 3), False)
    assert m.itl_us == [(10, 2), (6, 3)]


def test_completions_token_ids_are_exact_token_counts() -> None:
    """``choices[].token_ids`` (servers that return ids per chunk) count tokens exactly."""

    def chunk(text: str, ids: list[int]) -> bytes:
        choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": None}
        return encode_json_event({"choices": [choice]})

    usage = encode_json_event({"choices": [], "usage": {"completion_tokens": 4}})
    m = _run_events(
        Route.COMPLETIONS,
        True,
        [(5, chunk("a", [7])), (9, chunk("bcd", [8, 9, 10])), (10, usage + _DONE)],
    )
    assert (m.chunk_tokens, m.chunk_tokens_estimated) == ((1, 3), False)


def test_llamacpp_timings_per_token_are_exact_running_counts() -> None:
    """llama.cpp ``timings_per_token``: ``timings.predicted_n`` on each chunk is a running count."""

    def chunk(text: str, predicted: int) -> bytes:
        choice = {"index": 0, "delta": {"content": text}, "finish_reason": None}
        return encode_json_event({"choices": [choice], "timings": {"predicted_n": predicted}})

    final = encode_json_event(
        {"choices": [], "usage": {"completion_tokens": 5}, "timings": {"predicted_n": 5}}
    )
    m = _run_events(
        Route.CHAT,
        True,
        [(5, chunk("a", 1)), (9, chunk("bc", 3)), (20, chunk("de", 5)), (21, final)],
    )
    assert (m.chunk_tokens, m.chunk_tokens_estimated, m.completion_tokens) == ((1, 2, 2), False, 5)


def test_exact_counts_that_miss_the_total_are_flagged() -> None:
    """Per-event counts that do not add up to the server's total are not called exact."""
    usage = encode_json_event({"choices": [], "usage": {"completion_tokens": 9}})
    lp = {"content": [{"token": "t"}]}
    m = _run_events(
        Route.CHAT,
        True,
        [
            (5, _chat_chunk({"content": "a"}, logprobs=lp)),
            (9, _chat_chunk({"content": "b"}, logprobs=lp)),
            (10, usage + _DONE),
        ],
    )
    assert m.chunk_tokens == (1, 1)
    assert m.chunk_tokens_estimated


def _generate_event(index: int, text: str, running: int, *, final: bool = False) -> bytes:
    meta: dict[str, Any] = {
        "id": f"r{index}",
        "prompt_tokens": 35,
        "completion_tokens": running,
        "cached_tokens": 3,
        "finish_reason": {"type": "length", "length": running} if final else None,
    }
    ids = list(range(running))
    return encode_json_event({"index": index, "text": text, "output_ids": ids, "meta_info": meta})


# Two choices of a /generate n=2 stream, interleaved as SGLang sends them (cumulative text).
_N2_EVENTS = [
    (10_000, _generate_event(0, "a", 1)),
    (12_000, _generate_event(1, "x", 1)),
    (20_000, _generate_event(0, "abc", 3)),
    (30_000, _generate_event(1, "xy", 2)),
    (40_000, _generate_event(0, "abcd", 4, final=True)),
    (44_000, _generate_event(1, "xyz", 3, final=True) + _DONE),
]


def test_generate_n2_stream_sums_tokens_over_choices_like_its_body() -> None:
    """A /generate n=2 stream counts both choices' tokens, as the non-streamed body does."""
    streamed = _run_events(Route.GENERATE, True, _N2_EVENTS)
    items = [
        {"index": i, "text": t, "meta_info": orjson.loads(e[6:])["meta_info"]}
        for i, t, e in ((0, "abcd", _N2_EVENTS[4][1]), (1, "xyz", _N2_EVENTS[5][1][: -len(_DONE)]))
    ]
    body = _run_events(Route.GENERATE, False, [(50_000, orjson.dumps(items))])
    assert streamed.ok and body.ok
    assert streamed.completion_tokens == body.completion_tokens == 7
    assert streamed.prompt_tokens == body.prompt_tokens == 70
    assert streamed.cached_tokens == body.cached_tokens == 6
    assert streamed.output_sha256 == body.output_sha256
    assert sum(streamed.chunk_tokens) == 7 and not streamed.chunk_tokens_estimated


def test_generate_n2_stream_takes_itl_gaps_within_each_choice() -> None:
    """Per-token gaps of an n=2 stream run from a choice's previous event, never across choices."""
    m = _run_events(Route.GENERATE, True, _N2_EVENTS)
    assert m.chunk_choices == (0, 1, 0, 1, 0, 1)
    assert m.ttft_us == 10_000
    # choice 0: 10 ms for 2 tokens, then 20 ms for 1; choice 1: 18 ms for 1, then 14 ms for 1
    assert m.itl_us == [(5_000, 2), (18_000, 1), (20_000, 1), (14_000, 1)]


def _completion_chunk(index: int, text: str, **extra: Any) -> bytes:
    choice = {"index": index, "text": text, "finish_reason": None, **extra}
    return encode_json_event({"object": "text_completion", "choices": [choice]})


def test_completions_n2_total_only_estimate_is_per_choice() -> None:
    """n=2 with only a final total: each choice opens with its prefill token; gaps stay in-choice."""
    usage = encode_json_event({"choices": [], "usage": {"completion_tokens": 9}})
    m = _run_events(
        Route.COMPLETIONS,
        True,
        [
            (10, _completion_chunk(0, "a")),
            (12, _completion_chunk(1, "b")),
            (20, _completion_chunk(0, "cccc")),
            (30, _completion_chunk(1, "dd")),
            (31, usage + _DONE),
        ],
    )
    assert m.chunk_choices == (0, 1, 0, 1)
    # 9 tokens: 1 per opener, 1 + share of the 5 left (4:2 by text) for the others
    assert m.chunk_tokens == (1, 1, 4, 3)
    assert m.chunk_tokens_estimated and m.itl_estimated
    assert m.itl_us == [(10 // 4, 4), (18 // 3, 3)]


def test_uncounted_events_share_what_the_counted_ones_leave() -> None:
    """Mixed streams keep the exact counts and estimate only the rest, by text length."""
    usage = encode_json_event({"choices": [], "usage": {"completion_tokens": 10}})
    lp = {"content": [{"token": "a"}]}
    m = _run_events(
        Route.CHAT,
        True,
        [
            (5, _chat_chunk({"content": "a"}, logprobs=lp)),
            (9, _chat_chunk({"content": "bbbb"})),
            (20, _chat_chunk({"content": "cc"})),
            (21, usage + _DONE),
        ],
    )
    assert m.chunk_tokens == (1, 5, 4)  # 9 left: 1 each, then 7 split 4:2 by text
    assert m.chunk_tokens_estimated


def test_record_round_trip_keeps_choices_and_accept_length_origin() -> None:
    """chunk_choices and accept_length_from survive requests.jsonl (to_dict / from_dict)."""
    m = _run_events(Route.GENERATE, True, _N2_EVENTS)
    rec = RequestRecord("e", "r1", Role.BASELINE, Route.GENERATE, True, "http://x", 1.0, 0, m)
    back = RequestRecord.from_dict(orjson.loads(orjson.dumps(rec.to_dict())))
    assert back.measurement == m
    assert back.measurement.itl_us == m.itl_us
