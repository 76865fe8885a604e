"""Interpretation of stream events of every route, against real captures."""

from __future__ import annotations

import json

import orjson
import pytest

from specproxy.core.protocol.events import Chunk, Dialect, StreamInterpreter
from specproxy.core.protocol.injected_events import is_sglext_event, is_usage_only_event
from specproxy.core.protocol.sse import SseDecoder, SseEvent, encode_json_event
from specproxy.errors import ProtocolError
from specproxy.testing.captures import LLAMACPP, data_events, sglang_exchange

_SGLEXT = {
    "id": "abc",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "m",
    "choices": [],
    "sglext": {
        "spec_tokens_details": {
            "spec_accept_rate": 0.5,
            "spec_accept_length": 2.5,
            "spec_verify_ct": 10,
        }
    },
}


def _event(obj: object) -> SseEvent:
    (event,) = SseDecoder().feed(encode_json_event(obj))
    return event


def _chunks(dialect: Dialect, body: bytes) -> tuple[list[Chunk], StreamInterpreter]:
    interp = StreamInterpreter(dialect)
    events = SseDecoder().feed(body)
    return [c for c in (interp.interpret(e) for e in events) if c is not None], interp


def test_sglext_event_is_recognised_only_with_empty_choices_and_no_usage() -> None:
    """The trailing sglext event is told apart from content, usage and sglext-with-usage events."""
    assert is_sglext_event(_event(_SGLEXT))
    assert not is_usage_only_event(_event(_SGLEXT))
    with_usage = {**_SGLEXT, "usage": {"prompt_tokens": 1, "completion_tokens": 2}}
    assert not is_sglext_event(_event(with_usage))
    spaced = SseEvent(raw=b"", data=json.dumps(_SGLEXT))  # '"choices": []' with a space
    assert is_sglext_event(spaced)
    assert not is_sglext_event(SseEvent(raw=b"\n", data=None))
    assert not is_sglext_event(SseEvent(raw=b"", data="[DONE]"))


def test_usage_only_event_is_recognised_in_real_streams() -> None:
    """Only the choices-[] usage chunk of a real stream counts as usage-only (SGLang and llama.cpp)."""
    _, cap = sglang_exchange("run_a_init0.1/sa_copy", "chat_stream_usage")
    events = SseDecoder().feed(cap.body)
    flags = [is_usage_only_event(e) for e in events]
    assert flags.count(True) == 1
    assert events[flags.index(True) + 1].is_done
    assert not any(is_sglext_event(e) for e in events)
    llama = SseDecoder().feed((LLAMACPP / "tiny/spec-noisy/chat_stream.sse").read_bytes())
    assert [is_usage_only_event(e) for e in llama].count(True) == 1
    # completions streams: every chunk has "usage": null, the usage chunk has choices []
    _, comp = sglang_exchange("run_a_init0.1/sa_copy", "completions_stream_usage")
    assert [is_usage_only_event(e) for e in SseDecoder().feed(comp.body)].count(True) == 1


def test_sglang_chat_stream_roles_content_finish_usage_done() -> None:
    """Role chunk is not output, content chunks are, the finish chunk and usage chunk are not."""
    _, cap = sglang_exchange("run_a_init0.1/sa_copy", "chat_stream_usage")
    chunks, interp = _chunks(Dialect.CHAT, cap.body)
    payloads = [json.loads(d) for d in data_events(cap.body) if d != "[DONE]"]
    assert payloads[0]["choices"][0]["delta"]["role"] == "assistant"
    assert not chunks[0].output
    content = [p["choices"][0]["delta"].get("content") for p in payloads[1:-2]]
    assert all(content)
    assert all(c.output for c in chunks[1:-3])
    finish, usage, done = chunks[-3], chunks[-2], chunks[-1]
    assert (finish.output, finish.finish_reason) == (False, "length")
    assert usage.usage is not None
    assert (usage.usage.prompt_tokens, usage.usage.completion_tokens) == (39, 64)
    assert done.done
    assert interp.text() == "".join(content)


def test_reasoning_and_tool_call_deltas_count_as_output() -> None:
    """reasoning_content and tool-call deltas are output; a role chunk with null content is not."""
    interp = StreamInterpreter(Dialect.CHAT)

    def chunk(delta: dict[str, object]) -> Chunk:
        result = interp.interpret(_event({"choices": [{"index": 0, "delta": delta}]}))
        assert result is not None
        return result

    assert not chunk({"role": "assistant", "content": None}).output
    assert chunk({"reasoning_content": "think", "content": None}).output
    call = {"index": 0, "function": {"name": "f", "arguments": '{"a"'}}
    assert chunk({"tool_calls": [call]}).output
    assert chunk({"content": "x"}).output
    assert interp.text() == 'thinkf{"a"x'


def test_continuous_usage_gives_exact_tokens_per_chunk() -> None:
    """With usage on every chunk, each content chunk's tokens are the running-count difference."""
    interp = StreamInterpreter(Dialect.CHAT)
    seq = [
        ({"role": "assistant", "content": ""}, 1, None),
        ({"content": "a"}, 1, None),
        ({"content": "bcd"}, 4, None),
        ({}, 5, "stop"),  # the EOS token: no text, but one more token
    ]
    got = []
    for delta, running, finish in seq:
        obj = {
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": {"prompt_tokens": 3, "completion_tokens": running},
        }
        c = interp.interpret(_event(obj))
        assert c is not None
        got.append((c.output, c.tokens))
    assert got == [(False, None), (True, 1), (True, 3), (True, 1)]


def test_sglang_completions_stream_empty_text_chunks_carry_tokens() -> None:
    """An empty-text completions chunk (detokenizer holding bytes) is still an output batch."""
    _, cap = sglang_exchange("run_a_init0.1/sa_copy", "completions_stream_usage")
    chunks, interp = _chunks(Dialect.COMPLETIONS, cap.body)
    payloads = [json.loads(d) for d in data_events(cap.body) if d != "[DONE]"]
    texts = [p["choices"][0]["text"] for p in payloads if p["choices"]]
    assert "" in texts  # the capture really has held-back chunks
    outputs = [c for c in chunks if c.output]
    assert len(outputs) == len(texts) == 45
    assert outputs[-1].finish_reason == "length"  # finish rides on the last text chunk
    assert interp.text() == "".join(texts)
    assert payloads[-1]["choices"] == []
    assert chunks[-2].usage is not None
    assert chunks[-2].usage.completion_tokens == 64


def test_generate_stream_cumulative_text_and_running_counts() -> None:
    """/generate events give token deltas from meta_info and text deltas from cumulative text."""
    _, cap = sglang_exchange("run_a_init0.1/sa_copy", "generate_stream")
    chunks, interp = _chunks(Dialect.GENERATE, cap.body)
    payloads = [json.loads(d) for d in data_events(cap.body) if d != "[DONE]"]
    running = [p["meta_info"]["completion_tokens"] for p in payloads]
    expected = [b - a for a, b in zip([0, *running], running, strict=False)]
    assert [c.tokens for c in chunks if c.output] == expected
    assert sum(expected) == 64
    assert interp.text() == payloads[-1]["text"]
    final = chunks[-2]
    assert final.finish_reason == "length"
    assert final.meta_info is not None
    assert final.meta_info["spec_verify_ct"] == 44
    assert all("spec_verify_ct" not in (c.meta_info or {}) for c in chunks[:-2])


def test_generate_incremental_mode_is_detected_from_output_ids() -> None:
    """With --incremental-streaming-output the text is a delta, recognised by len(output_ids)."""
    interp = StreamInterpreter(Dialect.GENERATE)
    events = [
        {"text": "ab", "output_ids": [1], "meta_info": {"completion_tokens": 1}},
        {"text": "cd", "output_ids": [2, 3], "meta_info": {"completion_tokens": 3}},
        {"text": "e", "output_ids": [4], "meta_info": {"completion_tokens": 4}},
    ]
    tokens = [c.tokens for c in (interp.interpret(_event(e)) for e in events) if c is not None]
    assert tokens == [1, 2, 1]
    assert interp.text() == "abcde"


def test_generate_abort_finish_reason_carries_its_message() -> None:
    """A finish_reason object of type abort gives the word 'abort' and the server's message."""
    interp = StreamInterpreter(Dialect.GENERATE)
    meta = {
        "completion_tokens": 2,
        "finish_reason": {"type": "abort", "message": "Abort by user", "status_code": 499},
    }
    chunk = interp.interpret(_event({"text": "xy", "output_ids": [1, 2], "meta_info": meta}))
    assert chunk is not None
    assert (chunk.finish_reason, chunk.abort_message) == ("abort", "Abort by user")


def test_in_stream_error_event_is_an_error_chunk() -> None:
    """A data event holding {"error": {...}} becomes a chunk with the server's message."""
    err = {"error": {"message": "bad things", "type": "invalid_request_error", "code": 400}}
    for dialect in Dialect:
        chunk = StreamInterpreter(dialect).interpret(_event(err))
        assert chunk is not None
        assert chunk.error == "bad things"
        assert not chunk.output


def test_non_json_event_raises_protocol_error() -> None:
    """A data field that is not JSON raises ProtocolError."""
    with pytest.raises(ProtocolError, match="not JSON"):
        StreamInterpreter(Dialect.CHAT).interpret(SseEvent(raw=b"", data="{oops"))


def test_llamacpp_chat_stream_puts_timings_on_the_usage_chunk() -> None:
    """llama.cpp chat streams: null-content role chunk, 64 content chunks, timings with usage."""
    chunks, _ = _chunks(Dialect.CHAT, (LLAMACPP / "tiny/spec-noisy/chat_stream.sse").read_bytes())
    assert not chunks[0].output
    assert sum(c.output for c in chunks) == 64
    usage_chunk = chunks[-2]
    assert usage_chunk.timings is not None
    assert usage_chunk.timings["draft_n"] == 80
    assert usage_chunk.timings["draft_n_accepted"] == 53
    assert usage_chunk.usage is not None
    assert usage_chunk.usage.cached_tokens == 52


def test_llamacpp_completions_stream_puts_timings_on_the_finish_chunk() -> None:
    """llama.cpp completions streams carry usage and timings on the empty-text finish chunk."""
    body = (LLAMACPP / "tiny/spec-noisy/completions_stream.sse").read_bytes()
    chunks, _ = _chunks(Dialect.COMPLETIONS, body)
    finish = chunks[-2]
    assert (finish.output, finish.finish_reason) == (False, "length")
    assert finish.timings is not None
    assert finish.timings["draft_n"] == 83
    assert finish.usage is not None
    assert finish.usage.completion_tokens == 64
    assert sum(c.output for c in chunks) == 64
    assert chunks[-1].done


def test_llamacpp_native_stream_counts_tokens_and_ends_on_stop() -> None:
    """Native /completion events carry token lists; the stop event ends the stream with totals."""
    body = (LLAMACPP / "tiny/spec-noisy/native_completion_stream.sse").read_bytes()
    chunks, interp = _chunks(Dialect.LLAMACPP_COMPLETION, body)
    assert [c.tokens for c in chunks[:-1]] == [1] * 64
    last = chunks[-1]
    assert last.done
    assert not last.output
    assert last.finish_reason == "length"  # stop_type "limit"
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (17, 64)
    nonstream = orjson.loads((LLAMACPP / "tiny/spec-noisy/native_completion.json").read_bytes())
    assert interp.text() == nonstream["content"]
