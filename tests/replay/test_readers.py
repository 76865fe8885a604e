"""Trace readers on the bundled samples of the real traces, and their error reporting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specproxy.core.records.model import Route
from specproxy.errors import ConfigError, TraceFormatError
from specproxy.replay.formats import PLACEHOLDER_ANSWER, azure_ticks
from specproxy.replay.readers import detect_format, parse_format, read_trace_file, read_traces
from specproxy.replay.trace import TraceFormat


def test_mooncake_sample_reads_ms_timestamps_lengths_and_hash_ids(traces_dir: Path) -> None:
    """The Mooncake sample gives 300 length records with offsets in seconds and hash ids."""
    records, summary = read_trace_file(traces_dir / "mooncake_conversation_300.jsonl")
    assert summary.format is TraceFormat.MOONCAKE
    assert len(records) == 300
    first = records[0]
    assert (first.offset_s, first.input_tokens, first.output_tokens) == (0.0, 6758, 500)
    assert first.hash_ids == tuple(range(14))
    assert first.synthetic_prompt
    assert records[-1].offset_s == 102.0
    assert records[-1].source.endswith("mooncake_conversation_300.jsonl:300")
    assert len({r.offset_s for r in records}) == 35
    assert all(len(r.hash_ids) == -(-(r.input_tokens or 0) // 512) for r in records)


def test_azure_sample_keeps_100ns_ticks_relative_to_first_row(traces_dir: Path) -> None:
    """Azure offsets are exact to the 7th fractional digit and start at the first row."""
    records, summary = read_trace_file(traces_dir / "azure_code_300.csv")
    assert summary.format is TraceFormat.AZURE
    assert len(records) == 300
    assert (records[0].input_tokens, records[0].output_tokens) == (4808, 10)
    assert records[1].offset_s == pytest.approx(0.052, abs=1e-9)
    assert records[-1].offset_s == pytest.approx(216.838239, abs=1e-9)
    assert records[-1].source.endswith("azure_code_300.csv:301")


def test_azure_ticks_parse_seven_fractional_digits() -> None:
    """The 7th digit counts 100 ns, which Python's %f cannot parse."""
    a = azure_ticks("2023-11-16 18:17:03.9799600")
    b = azure_ticks("2023-11-16 18:17:03.9799601")
    assert b - a == 1
    assert azure_ticks("2023-11-16 18:17:04") - a == 200_400


def test_mtbench_keeps_category_and_first_turn(traces_dir: Path) -> None:
    """MT-Bench gives 80 first-turn prompts with their category and question id."""
    records, summary = read_trace_file(traces_dir / "mtbench_question.jsonl")
    assert summary.format is TraceFormat.PROMPTS
    assert len(records) == 80
    assert records[0].category == "writing"
    assert records[0].conversation_id == "81"
    assert records[0].messages[0][1].startswith("Compose an engaging travel blog post")
    assert {r.category for r in records} >= {"math", "coding", "reasoning", "stem"}
    assert all(r.offset_s is None and r.turn_index == 0 for r in records)


def test_mtbench_all_turns_send_history_with_reference_or_placeholder(traces_dir: Path) -> None:
    """With all turns, turn 2 carries turn 1 and the reference answer (or a placeholder)."""
    records, _ = read_trace_file(traces_dir / "mtbench_question.jsonl", all_turns=True)
    assert len(records) == 160
    second = records[1]
    assert second.turn_index == 1
    assert [role for role, _ in second.messages] == ["user", "assistant", "user"]
    assert second.messages[1][1] == PLACEHOLDER_ANSWER
    with_ref = next(r for r in records if r.turn_index == 1 and r.category == "math")
    assert with_ref.messages[1][1] != PLACEHOLDER_ANSWER


def test_sharegpt_array_gives_first_human_turn(traces_dir: Path) -> None:
    """The ShareGPT sample (a one-line JSON array) gives 200 prompts with their ids."""
    records, summary = read_trace_file(traces_dir / "sharegpt_v3_first200.json")
    assert summary.format is TraceFormat.SHAREGPT
    assert len(records) == 200
    assert records[0].conversation_id == "fzcoUcK_0"
    assert records[0].messages == (
        ("user", "How to stop automatic updates from the WSUS Server to a target machine"),
    )
    assert all(r.reference_answer is None for r in records)


def test_sharegpt_reference_answer_and_element_lines(tmp_path: Path) -> None:
    """A pretty-printed array reports each element's line; the answer becomes the reference."""
    data = [
        {
            "id": "a",
            "conversations": [
                {"from": "human", "value": "hi"},
                {"from": "gpt", "value": "hello there"},
            ],
        },
        {"id": "b", "conversations": [{"from": "gpt", "value": "no human"}]},
    ]
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(data, indent=2))
    with pytest.raises(TraceFormatError) as err:
        read_trace_file(path)
    assert err.value.line == 15
    assert "no non-empty human turn" in str(err.value)
    records, summary = read_trace_file(path, skip_bad=True)
    assert summary.skipped_bad == 1
    assert records[0].reference_answer == "hello there"
    assert records[0].source_line == 2


def test_native_sample_mixes_bodies_and_lengths(traces_dir: Path) -> None:
    """The native sample has chat, completions and /generate bodies and length lines."""
    records, summary = read_trace_file(traces_dir / "sample_native.jsonl")
    assert summary.format is TraceFormat.NATIVE
    assert len(records) == 24
    routes = {r.route for r in records if r.body is not None}
    assert routes == {Route.CHAT, Route.COMPLETIONS, Route.GENERATE}
    lengths = [r for r in records if r.synthetic_prompt]
    assert len(lengths) == 6
    assert all(r.hash_ids[0] == 100 for r in lengths)
    assert records[0].offset_s == 0.0  # shifted so the file starts at 0


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("x.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", TraceFormat.AZURE),
        ("x.jsonl", '{"t": 0, "input_tokens": 1, "output_tokens": 1}\n', TraceFormat.NATIVE),
        ("x.jsonl", '{"timestamp": 0, "input_length": 1}\n', TraceFormat.MOONCAKE),
        ("x.json", ' [{"conversations": []}]', TraceFormat.SHAREGPT),
        ("x.jsonl", '{"conversations": []}\n', TraceFormat.SHAREGPT),
        ("x.jsonl", '\n{"turns": ["a"]}\n', TraceFormat.PROMPTS),
        ("x.txt", "TIMESTAMP,ContextTokens,GeneratedTokens\n", TraceFormat.AZURE),
    ],
)
def test_format_detection(name: str, content: str, expected: TraceFormat) -> None:
    """The format is detected from the extension and the first record's keys."""
    assert detect_format(name, content) is expected


def test_undetectable_format_asks_for_format() -> None:
    """A file whose first line names no known format is a ConfigError suggesting --format."""
    with pytest.raises(ConfigError, match="--format"):
        detect_format("x.jsonl", '{"foo": 1}\n')
    assert parse_format("mtbench") is TraceFormat.PROMPTS
    with pytest.raises(ConfigError, match="unknown trace format"):
        parse_format("parquet")


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"timestamp": 5, "input_length": 10, "output_length": 3', "not valid JSON"),
        ('{"timestamp": "x", "input_length": 10, "output_length": 3}', "'timestamp'"),
        ('{"timestamp": 5, "input_length": 0, "output_length": 3}', "input_tokens must be >= 1"),
        (
            '{"timestamp": 5, "input_length": 10, "output_length": 3, "hash_ids": [true]}',
            "hash_ids",
        ),
        ('{"timestamp": 5, "output_length": 3}', "'input_length'"),
    ],
)
def test_bad_mooncake_line_names_file_and_line(tmp_path: Path, line: str, problem: str) -> None:
    """A bad line stops reading with file:line and the problem."""
    good = '{"timestamp": 0, "input_length": 10, "output_length": 3, "hash_ids": [1]}'
    path = _write(tmp_path, "t.jsonl", [good, good, line])
    with pytest.raises(TraceFormatError) as err:
        read_trace_file(path, TraceFormat.MOONCAKE)
    assert err.value.line == 3
    assert str(err.value).startswith(f"{path}:3: ")
    assert problem in str(err.value)


def test_skip_bad_skips_and_counts(tmp_path: Path) -> None:
    """With skip_bad the bad lines are skipped and counted, the good ones kept."""
    good = '{"timestamp": 1000, "input_length": 10, "output_length": 3}'
    path = _write(tmp_path, "t.jsonl", [good, "not json", good, '{"timestamp": -5}'])
    records, summary = read_trace_file(path, skip_bad=True)
    assert len(records) == 2
    assert summary.skipped_bad == 2
    assert [r.source_line for r in records] == [1, 3]
    assert records[0].offset_s == 0.0


def test_bad_azure_rows(tmp_path: Path) -> None:
    """Azure rows with a bad timestamp, an earlier time or a missing column are bad lines."""
    header = "TIMESTAMP,ContextTokens,GeneratedTokens"
    rows = [
        header,
        "2023-11-16 18:17:03.9799600,10,2",
        "2023-11-16 18:17:03,10",
        "2023-11-16 18:17:02.0000000,10,2",
        "16/11/2023 18:17,10,2",
        "2023-11-16 18:17:05.1,10,2",
    ]
    path = _write(tmp_path, "a.csv", rows)
    with pytest.raises(TraceFormatError) as err:
        read_trace_file(path)
    assert err.value.line == 3
    records, summary = read_trace_file(path, skip_bad=True)
    assert summary.skipped_bad == 3
    assert [r.offset_s for r in records] == [0.0, pytest.approx(1.12004)]
    missing = _write(tmp_path, "b.csv", ["TIMESTAMP,ContextTokens", "2023-11-16 18:17:03,1"])
    with pytest.raises(TraceFormatError, match="GeneratedTokens") as err2:
        read_trace_file(missing)
    assert err2.value.line == 1


def test_native_errors_name_the_key(tmp_path: Path) -> None:
    """Native lines with an unknown key, no offset or a body without route are errors."""
    cases = {
        '{"t": 1, "input_tokens": 5, "output_tokens": 2, "hash_id": [1]}': "unknown key 'hash_id'",
        '{"input_tokens": 5, "output_tokens": 2}': "missing 't'",
        '{"t": 0, "body": {"text": "x"}}': "route must be one of",
        '{"t": 0, "route": "/v1/embeddings", "body": {}}': "route must be one of",
        '{"t": 0, "input_tokens": 5}': "'output_tokens' must be an integer",
        '{"t": -1, "input_tokens": 5, "output_tokens": 2}': "offset must be a finite number of seconds in \\[0, ",
        "[1, 2]": "must be a JSON object",
    }
    for i, (line, problem) in enumerate(cases.items()):
        path = _write(tmp_path, f"n{i}.jsonl", [line])
        with pytest.raises(TraceFormatError, match=problem) as err:
            read_trace_file(path, TraceFormat.NATIVE)
        assert err.value.line == 1


def test_missing_file_and_empty_file(tmp_path: Path) -> None:
    """A missing or empty trace file is a ConfigError naming it."""
    with pytest.raises(ConfigError, match="not found"):
        read_traces([tmp_path / "nope.jsonl"])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ConfigError, match="empty"):
        read_traces([empty])


def test_several_files_merge_by_time_or_concatenate(tmp_path: Path) -> None:
    """Files start at 0 and interleave by offset; with concat the second follows the first."""
    a = _write(
        tmp_path,
        "a.jsonl",
        [
            '{"t": 0, "input_tokens": 1, "output_tokens": 1}',
            '{"t": 2, "input_tokens": 2, "output_tokens": 1}',
        ],
    )
    b = _write(
        tmp_path,
        "b.jsonl",
        [
            '{"t": 10, "input_tokens": 3, "output_tokens": 1}',
            '{"t": 11, "input_tokens": 4, "output_tokens": 1}',
        ],
    )
    merged = read_traces([a, b])
    assert [(r.offset_s, r.input_tokens) for r in merged.records] == [
        (0.0, 1),
        (0.0, 3),
        (1.0, 4),
        (2.0, 2),
    ]
    assert [r.index for r in merged.records] == [0, 1, 2, 3]
    chained = read_traces([a, b], concat=True)
    assert [r.offset_s for r in chained.records] == [0.0, 2.0, 2.0, 3.0]
    assert merged.timed and len(merged.files) == 2


def test_timed_and_untimed_files_cannot_mix(traces_dir: Path) -> None:
    """A prompt set (no arrival times) cannot share a run with a timed trace."""
    with pytest.raises(ConfigError, match="cannot mix"):
        read_traces([traces_dir / "azure_code_300.csv", traces_dir / "mtbench_question.jsonl"])
