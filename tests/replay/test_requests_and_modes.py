"""Request bodies per route, mode planning (ABBA blocks, seeded split) and the context limit."""

from __future__ import annotations

import json

import pytest

from specproxy.core.records.model import Role, Route, SendMode
from specproxy.replay.modes import abba_order, plan_windows, split_sides
from specproxy.replay.requests import RequestOptions, build_request, flatten
from specproxy.replay.trace import TraceRecord
from specproxy.replay.workload import apply_context, within_duration


def _lengths(inp: int = 100, out: int = 20, **kw: object) -> TraceRecord:
    return TraceRecord(
        source_path="t",
        source_line=1,
        offset_s=0.0,
        input_tokens=inp,
        output_tokens=out,
        **kw,  # type: ignore[arg-type]
    )


def _text(*turns: tuple[str, str]) -> TraceRecord:
    return TraceRecord(source_path="t", source_line=1, offset_s=None, messages=turns)


def test_length_record_on_generate_asks_for_the_exact_output() -> None:
    """/generate gets the synthesised text, max and min new tokens, ignore_eos and streaming."""
    req = build_request(_lengths(), RequestOptions(), synthetic_prompt="a b c")
    body = json.loads(req.body)
    assert req.route is Route.GENERATE and req.stream
    assert body == {
        "text": "a b c",
        "sampling_params": {
            "max_new_tokens": 20,
            "min_new_tokens": 20,
            "temperature": 0.0,
            "ignore_eos": True,
        },
        "stream": True,
    }


def test_length_record_on_openai_routes_requests_usage() -> None:
    """Completions and chat bodies carry max/min tokens, ignore_eos and stream usage options."""
    for route in (Route.COMPLETIONS, Route.CHAT):
        opts = RequestOptions(route=route, model="m", min_tokens=False)
        body = json.loads(build_request(_lengths(), opts, synthetic_prompt="x y").body)
        assert body["model"] == "m"
        assert body["max_tokens"] == 20 and "min_tokens" not in body
        assert body["ignore_eos"] is True
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        if route is Route.CHAT:
            assert body["messages"] == [{"role": "user", "content": "x y"}]
        else:
            assert body["prompt"] == "x y"


def test_text_prompt_stops_at_eos_unless_asked() -> None:
    """A text prompt without a length gets the default maximum and no ignore_eos."""
    record = _text(("user", "hello"))
    body = json.loads(build_request(record, RequestOptions(default_output_tokens=77)).body)
    assert body["text"] == "hello"
    assert body["sampling_params"] == {"max_new_tokens": 77, "temperature": 0.0}
    forced = json.loads(build_request(record, RequestOptions(ignore_eos=True)).body)
    assert forced["sampling_params"]["ignore_eos"] is True
    reference = json.loads(build_request(record, RequestOptions(), output_tokens=9).body)
    assert reference["sampling_params"]["min_new_tokens"] == 9


def test_multi_turn_prompt_is_flattened_off_chat_and_kept_on_chat() -> None:
    """Earlier turns become a transcript on text routes and messages on chat."""
    turns = (("user", "q1"), ("assistant", "a1"), ("user", "q2"))
    assert flatten(turns) == "User: q1\n\nAssistant: a1\n\nUser: q2\n\nAssistant:"
    chat = json.loads(build_request(_text(*turns), RequestOptions(route=Route.CHAT)).body)
    assert [m["role"] for m in chat["messages"]] == ["user", "assistant", "user"]


def test_recorded_body_is_sent_as_is_except_the_model() -> None:
    """A native body goes out unchanged; --model replaces only the OpenAI model field."""
    body = {"model": "x", "prompt": "hi", "max_tokens": 3}
    record = TraceRecord(
        source_path="t", source_line=1, offset_s=0.0, route=Route.COMPLETIONS, body=body
    )
    req = build_request(record, RequestOptions())
    assert json.loads(req.body) == body and not req.stream
    renamed = build_request(record, RequestOptions(model="served"))
    assert json.loads(renamed.body)["model"] == "served"
    with pytest.raises(ValueError, match="synthesised prompt"):
        build_request(_lengths(), RequestOptions())


def test_alternate_plans_abba_blocks_with_restarting_offsets() -> None:
    """Alternate: blocks go A B then B A ..., each window's offsets restart at 0, pairs shared."""
    windows = plan_windows(SendMode.ALTERNATE, 5, [0, 10, 20, 30, 40], block_size=2, warmup=1)
    sides = [w.jobs[0].sides[0] for w in windows]
    assert sides == [
        Role.BASELINE,
        Role.CANDIDATE,
        Role.CANDIDATE,
        Role.BASELINE,
        Role.BASELINE,
        Role.CANDIDATE,
    ]
    assert [w.offsets_us for w in windows] == [(0, 10), (0, 10), (0, 10), (0, 10), (0,), (0,)]
    assert windows[0].jobs[0].pair_id == windows[1].jobs[0].pair_id == "p0"
    assert windows[0].jobs[0].warmup and not windows[0].jobs[1].warmup
    assert abba_order(3) == (Role.CANDIDATE, Role.BASELINE)


def test_mirror_split_and_passthrough_plans() -> None:
    """Mirror pairs each request on both sides; split is seeded; passthrough uses one side."""
    (mirror,) = plan_windows(SendMode.MIRROR, 3, None)
    assert all(j.sides == (Role.BASELINE, Role.CANDIDATE) for j in mirror.jobs)
    assert mirror.offsets_us is None
    (split,) = plan_windows(SendMode.SPLIT, 1000, None, share_candidate=0.3, seed=5)
    share = sum(j.sides == (Role.CANDIDATE,) for j in split.jobs) / 1000
    assert share == pytest.approx(0.3, abs=0.05)
    assert split_sides(50, 0.5, 1) == split_sides(50, 0.5, 1) != split_sides(50, 0.5, 2)
    (only,) = plan_windows(SendMode.PASSTHROUGH, 2, [0, 5], side=Role.CANDIDATE)
    assert only.sides == (Role.CANDIDATE,) and only.jobs[0].pair_id is None


def test_context_limit_skips_or_clamps_length_records_only() -> None:
    """Length records over the limit are skipped or clamped and counted; text is untouched."""
    records = [
        _lengths(1000, 100, hash_ids=(1, 2)),
        _lengths(5000, 200, hash_ids=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)),
        _text(("user", "x")),
        _lengths(10, 9000),
    ]
    skipped = apply_context(records, 4096, "skip")
    assert (len(skipped.records), skipped.skipped, skipped.clamped) == (2, 2, 0)
    clamped = apply_context(records, 4096, "clamp")
    assert (clamped.skipped, clamped.clamped) == (0, 2)
    big = clamped.records[1]
    assert (big.input_tokens, big.output_tokens, len(big.hash_ids)) == (3896, 200, 8)
    long_out = clamped.records[3]
    assert (long_out.input_tokens, long_out.output_tokens) == (2048, 2048)
    assert apply_context(records, None, "skip").records == records


def test_open_loop_duration_keeps_requests_due_inside_it() -> None:
    """--duration in open loop keeps only requests whose offset is before it."""
    records = [_lengths() for _ in range(4)]
    kept, offsets = within_duration(records, [0, 1_000_000, 2_000_000, 3_000_000], 2.0)
    assert len(kept) == 2 and offsets == [0, 1_000_000]
    assert within_duration(records, None, 2.0) == (records, None)
