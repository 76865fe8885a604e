"""Traces that cannot be played as they are (issue 14: 6, 7, 8): clear errors, bounded work, exit statuses."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from specproxy.errors import ConfigError, TraceFormatError
from specproxy.replay.config import ReplayConfig
from specproxy.replay.prepare import DEFAULT_MAX_CONTEXT
from specproxy.replay.readers import read_trace_file
from specproxy.replay.run import run_replay
from specproxy.replay.trace import TraceFormat
from tests.faults.upstream import FaultServer

_ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "second"),
    [
        ("native.jsonl", '{"t": Infinity, "input_tokens": 5, "output_tokens": 3}'),
        ("native.jsonl", '{"t": 1e308, "input_tokens": 5, "output_tokens": 3}'),
        ("native.jsonl", '{"t": NaN, "input_tokens": 5, "output_tokens": 3}'),
        ("mooncake.jsonl", '{"timestamp": 1e308, "input_length": 5, "output_length": 3}'),
        ("mooncake.jsonl", '{"timestamp": -Infinity, "input_length": 5, "output_length": 3}'),
    ],
)
def test_non_finite_timestamps_are_bad_lines(tmp_path: Path, name: str, second: str) -> None:
    """inf, NaN and 1e308 timestamps are a file:line error, not an OverflowError later."""
    first = (
        '{"t": 0, "input_tokens": 5, "output_tokens": 3}'
        if name.startswith("native")
        else '{"timestamp": 0, "input_length": 5, "output_length": 3}'
    )
    path = _write(tmp_path, name, f"{first}\n{second}\n")
    with pytest.raises(TraceFormatError) as err:
        read_trace_file(path)
    assert str(err.value).startswith(f"{path}:2: ")
    assert "arrival offset" in str(err.value) or "timestamp" in str(err.value)


def test_short_csv_row_names_the_missing_column(tmp_path: Path) -> None:
    """An Azure row with too few fields says which column has no value."""
    path = _write(
        tmp_path,
        "t.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374\n",
    )
    with pytest.raises(TraceFormatError) as err:
        read_trace_file(path)
    assert str(err.value) == f"{path}:2: row has 2 columns: no value for 'GeneratedTokens'"


def test_mooncake_line_without_hash_ids_shares_no_prefix(tmp_path: Path) -> None:
    """The documented rule: a Mooncake line without hash_ids is read, with no shared prefix."""
    path = _write(tmp_path, "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 3}\n')
    records, summary = read_trace_file(path)
    assert summary.format is TraceFormat.MOONCAKE
    assert [r.hash_ids for r in records] == [()]


@pytest.mark.parametrize(
    ("name", "text", "skip_bad"),
    [
        ("empty.csv", "", False),
        ("header.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", False),
        ("bad.jsonl", '{"t": 0, "input_tokens": -1, "output_tokens": 3}\n{"t": "x"}\n', True),
    ],
)
async def test_nothing_to_send_is_a_usage_error_naming_the_file(
    tmp_path: Path, name: str, text: str, skip_bad: bool
) -> None:
    """An empty, header-only or all-bad trace stops with exit status 2 naming the file; no run dir."""
    path = _write(tmp_path, name, text)
    upstream = FaultServer("baseline")
    async with upstream.running() as url:
        cfg = ReplayConfig(
            traces=(str(path),), baseline=url, skip_bad=skip_bad, run_dir=str(tmp_path / "run")
        )
        with pytest.raises(ConfigError) as err:
            await run_replay(cfg)
    assert err.value.exit_code == 2
    assert str(err.value).startswith("nothing to send: ")
    assert f"{path}: 0 requests" in str(err.value)
    assert not (tmp_path / "run").exists()
    assert upstream.faults_seen == []


async def test_prompt_synthesis_is_capped_without_a_server_context(tmp_path: Path) -> None:
    """A line asking for more tokens than the default context is skipped and named, not built."""
    huge = 2 * DEFAULT_MAX_CONTEXT
    path = _write(
        tmp_path,
        "t.jsonl",
        '{"t": 0, "input_tokens": 20, "output_tokens": 4}\n'
        f'{{"t": 0.01, "input_tokens": {huge}, "output_tokens": 4}}\n',
    )
    upstream = FaultServer("baseline")  # its /v1/models reports no context length
    async with upstream.running() as url:
        cfg = ReplayConfig(
            traces=(str(path),), baseline=url, route="chat", speed=10.0, run_dir=str(tmp_path / "r")
        )
        outcome = await run_replay(cfg)
    assert outcome.summary["over_context_skipped"] == 1
    assert outcome.summary["over_context_first"] == f"{path}:2"
    assert len(upstream.faults_seen) == 1


async def test_requests_that_found_no_server_exit_3(tmp_path: Path) -> None:
    """A replay whose requests could not reach the server writes its results, then exits 3."""
    path = _write(
        tmp_path,
        "t.jsonl",
        "".join(f'{{"t": {i / 100}, "input_tokens": 5, "output_tokens": 2}}\n' for i in range(3)),
    )
    upstream = FaultServer("baseline", default="drop")
    async with upstream.running() as url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "specproxy", "replay", str(path), "--baseline", url,
            "--route", "chat", "--run-dir", str(tmp_path / "run"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_ENV,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 3, err.decode()
    assert "3 requests failed because a server could not be reached" in err.decode()
    assert (tmp_path / "run" / "requests.jsonl").exists()


@pytest.mark.parametrize(
    "text",
    [
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 1\r8:17:38.4258680,1562,18\n",
        "2023-11-16 18:17:41\r.8781620,75\n",
    ],
    ids=["row", "header"],
)
def test_bare_carriage_return_in_a_csv_line_is_a_bad_line(tmp_path: Path, text: str) -> None:
    """A lone CR inside a CSV line (found by bench/fuzz.py) is a file:line error, not csv.Error."""
    path = tmp_path / "t.csv"
    path.write_bytes(text.encode())
    with pytest.raises(TraceFormatError) as err:
        read_trace_file(path)
    assert str(err.value).startswith(f"{path}:")
