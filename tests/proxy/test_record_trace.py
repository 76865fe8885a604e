"""`serve --record`: live traffic becomes a native trace that `specproxy replay` reads back."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from specproxy.core.records.model import Measurement, Route
from specproxy.proxy.trace_recording import TraceRecorder, merge_trace_shards
from specproxy.replay.readers import read_trace_file
from specproxy.sim.config import SimConfig
from specproxy.testing.harness import chat, records, rig

SIM = SimConfig(decode_step_ms=0.2, verify_step_ms=0.3, prefill_us_per_token=1.0)
SPEC = SimConfig(
    speculative_algorithm="NGRAM", decode_step_ms=0.2, verify_step_ms=0.3, prefill_us_per_token=1.0
)


async def test_recorded_trace_has_lengths_only_and_replays(tmp_path: Path) -> None:
    """Without --record-text the trace holds the served token lengths and no text at all."""
    run_dir = tmp_path / "run"
    async with rig(run_dir, baseline=SIM, candidate=SPEC, mode="mirror", record=True) as r:
        for i in range(4):
            status, _ = await r.post(chat(f"a private question number {i}", stream=i % 2 == 0))
            assert status == 200
    raw = (run_dir / "trace.jsonl").read_bytes()
    assert b"private" not in raw
    lines = [orjson.loads(line) for line in raw.splitlines()]
    primary = {rec["request_id"]: rec for rec in records(run_dir) if not rec["shadow"]}
    assert len(lines) == len(primary) == 4
    served = sorted((p["prompt_tokens"], p["completion_tokens"]) for p in primary.values())
    assert sorted((x["input_tokens"], x["output_tokens"]) for x in lines) == served
    assert all(x["x_route"] == "/v1/chat/completions" for x in lines)
    replayable, summary = read_trace_file(run_dir / "trace.jsonl")
    assert summary.format.value == "native"
    assert len(replayable) == 4
    assert all(rec.input_tokens and rec.output_tokens == 12 for rec in replayable)


async def test_recorded_trace_keeps_bodies_with_record_text(tmp_path: Path) -> None:
    """With --record-text each line is the client's own body, replayable as sent."""
    run_dir = tmp_path / "run"
    async with rig(run_dir, baseline=SIM, mode="passthrough", record=True, record_text=True) as r:
        body = chat("what the client sent", stream=True)
        status, _ = await r.post(body)
        assert status == 200
    (line,) = [orjson.loads(x) for x in (run_dir / "trace.jsonl").read_bytes().splitlines()]
    assert line["route"] == "/v1/chat/completions"
    assert line["body"] == body  # no stream_options or other upstream additions
    (rec,), _ = read_trace_file(run_dir / "trace.jsonl")
    assert rec.body == body


def test_a_request_without_served_lengths_is_skipped_and_counted(tmp_path: Path) -> None:
    """A failed request with no usage cannot be replayed by length: it is counted, not guessed."""
    trace = TraceRecorder(tmp_path / "trace.jsonl", keep_text=False)
    trace.observe(Route.CHAT, True, 1_500_000, {}, Measurement(status=500))
    trace.observe(
        Route.GENERATE, False, 2_000_000, {}, Measurement(prompt_tokens=9, completion_tokens=3)
    )
    trace.close()
    assert (trace.written, trace.skipped) == (1, 1)
    (line,) = [orjson.loads(x) for x in (tmp_path / "trace.jsonl").read_bytes().splitlines()]
    assert line == {
        "t": 2.0,
        "input_tokens": 9,
        "output_tokens": 3,
        "x_route": "/generate",
        "x_stream": False,
    }


def test_trace_shards_merge_in_arrival_order_without_a_cut_off_last_line(tmp_path: Path) -> None:
    """The workers' shards become one ``trace.jsonl`` sorted by ``t``; a shard's last line
    cut off mid-write is left out, and the shards are removed."""
    first = tmp_path / "trace.w0.jsonl"
    second = tmp_path / "trace.w1.jsonl"
    first.write_bytes(b'{"t":0.5,"input_tokens":3,"output_tokens":4}\n{"t":2.0,"inp')
    second.write_bytes(
        b'{"t":0.1,"input_tokens":1,"output_tokens":2}\n\n{"t":1.0,"input_tokens":5,"output_tokens":6}\n'
    )
    assert merge_trace_shards(tmp_path, [first, second]) == 3
    merged = [orjson.loads(x) for x in (tmp_path / "trace.jsonl").read_bytes().splitlines()]
    assert [line["t"] for line in merged] == [0.1, 0.5, 1.0]
    assert not first.exists() and not second.exists()


def test_a_damaged_trace_shard_merges_nothing(tmp_path: Path) -> None:
    """A whole line that is not a trace line raises; no trace.jsonl, the shards are kept."""
    shard = tmp_path / "trace.w0.jsonl"
    shard.write_bytes(b'{"t":0.5}\nnot json\n')
    with pytest.raises(orjson.JSONDecodeError):
        merge_trace_shards(tmp_path, [shard])
    assert shard.exists() and not (tmp_path / "trace.jsonl").exists()
