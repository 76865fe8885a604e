"""Prompt sets in the shapes other tools write: many prompt keys, and OpenAI chat requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from specproxy.errors import TraceFormatError
from specproxy.replay.readers import read_trace_file
from specproxy.replay.trace import TraceFormat


@pytest.mark.parametrize(
    "key", ["prompt", "question", "instruction", "query", "input", "text", "content"]
)
def test_a_single_prompt_string_under_any_common_key_is_read(tmp_path: Path, key: str) -> None:
    """Each common prompt key is detected as a prompt set and becomes one user message."""
    path = tmp_path / "p.jsonl"
    path.write_text(f'{{"{key}": "say hello", "category": "greet"}}\n', encoding="utf-8")
    (rec,), summary = read_trace_file(path)
    assert summary.format is TraceFormat.PROMPTS
    assert rec.messages == (("user", "say hello"),)
    assert rec.category == "greet"


def test_openai_chat_request_lines_keep_history_and_output_length(tmp_path: Path) -> None:
    """A `messages` line keeps every message and its max_tokens as the output length."""
    path = tmp_path / "chat.jsonl"
    path.write_text(
        '{"messages": [{"role": "system", "content": "be brief"},'
        ' {"role": "user", "content": "hi"}], "max_tokens": 20}\n'
        '{"messages": [{"role": "user", "content": "again"}]}\n',
        encoding="utf-8",
    )
    (first, second), summary = read_trace_file(path)
    assert summary.format is TraceFormat.PROMPTS
    assert first.messages == (("system", "be brief"), ("user", "hi"))
    assert first.output_tokens == 20
    assert second.output_tokens is None


def test_a_bad_chat_line_names_file_and_line(tmp_path: Path) -> None:
    """A message without string content is an error naming the file and line."""
    path = tmp_path / "chat.jsonl"
    path.write_text(
        '{"messages": [{"role": "user", "content": "ok"}]}\n'
        '{"messages": [{"role": "user", "content": ["image"]}]}\n',
        encoding="utf-8",
    )
    with pytest.raises(TraceFormatError) as exc:
        read_trace_file(path)
    assert exc.value.line == 2
    assert "chat.jsonl" in exc.value.path
