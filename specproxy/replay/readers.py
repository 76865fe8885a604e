"""Read one or more trace files into one ``TraceSet``: format detection, bad lines, merging.

Format detection (``--format`` overrides it): a ``.csv`` file is an Azure trace; a file
whose first non-blank character is ``[`` is a ShareGPT JSON array; otherwise the keys of
the first non-blank JSON line decide (``t`` native, ``timestamp`` + ``input_length``
Mooncake, ``conversations`` ShareGPT, ``turns``/``prompt``/``question`` a prompt set).

Timed files are shifted so that each file's earliest request is at offset 0. Several
files are merged by offset (a stable sort: equal offsets keep file order); with
``concat`` each file instead starts where the previous one's last request was. Prompt
sets have no arrival times and are kept in file order; timed and untimed files cannot
be mixed in one run.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from specproxy.errors import ConfigError, TraceFormatError
from specproxy.replay import formats
from specproxy.replay.trace import FileSummary, TraceFormat, TraceRecord, TraceSet

FORMAT_ALIASES = {"mtbench": TraceFormat.PROMPTS, "azure-csv": TraceFormat.AZURE}


def parse_format(name: str) -> TraceFormat:
    """A TraceFormat from its name (``native``, ``mooncake``, ``azure``, ``sharegpt``, ``prompts``)."""
    if name in FORMAT_ALIASES:
        return FORMAT_ALIASES[name]
    try:
        return TraceFormat(name)
    except ValueError as exc:
        names = ", ".join([*(f.value for f in TraceFormat), *FORMAT_ALIASES])
        raise ConfigError(f"unknown trace format {name!r} (known: {names})") from exc


def detect_format(path: str, text: str) -> TraceFormat:
    """The format of a trace file from its extension and first record; ConfigError if unclear."""
    if path.lower().endswith(".csv"):
        return TraceFormat.AZURE
    stripped = text.lstrip()
    if stripped.startswith("["):
        return TraceFormat.SHAREGPT
    first = next((line for line in formats.split_lines(text) if line.strip()), None)
    if first is None:
        raise ConfigError(f"{path}: trace file is empty")
    if first.lstrip().upper().startswith("TIMESTAMP,"):
        return TraceFormat.AZURE
    try:
        obj = json.loads(first)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: cannot detect the trace format (first line is not JSON); use --format"
        ) from exc
    if isinstance(obj, dict):
        if "t" in obj:
            return TraceFormat.NATIVE
        if "timestamp" in obj and "input_length" in obj:
            return TraceFormat.MOONCAKE
        if "conversations" in obj or "conversation" in obj:
            return TraceFormat.SHAREGPT
        if "turns" in obj or "messages" in obj or any(k in obj for k in formats.PROMPT_KEYS):
            return TraceFormat.PROMPTS
    raise ConfigError(f"{path}: cannot detect the trace format from its first line; use --format")


def _items(
    fmt: TraceFormat, path: str, text: str, all_turns: bool
) -> Iterator[TraceRecord | TraceFormatError]:
    if fmt is TraceFormat.NATIVE:
        return formats.iter_native(path, text)
    if fmt is TraceFormat.MOONCAKE:
        return formats.iter_mooncake(path, text)
    if fmt is TraceFormat.AZURE:
        return formats.iter_azure(path, text)
    if fmt is TraceFormat.SHAREGPT:
        return formats.iter_sharegpt(path, text)
    return formats.iter_prompts(path, text, all_turns=all_turns)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: trace file not found") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: trace file is not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read trace file ({exc.strerror})") from exc


def read_trace_file(
    path: str | Path,
    fmt: TraceFormat | None = None,
    *,
    skip_bad: bool = False,
    all_turns: bool = False,
) -> tuple[list[TraceRecord], FileSummary]:
    """The records of one file, offsets shifted to start at 0, and what was read.

    A bad line raises TraceFormatError (file:line) unless ``skip_bad``, which skips and
    counts it instead.
    """
    p = Path(path)
    text = _read_text(p)
    name = str(path)
    fmt = fmt or detect_format(name, text)
    records: list[TraceRecord] = []
    skipped = 0
    for item in _items(fmt, name, text, all_turns):
        if isinstance(item, TraceFormatError):
            if not skip_bad:
                raise item
            skipped += 1
            continue
        records.append(item)
    timed = [r.offset_s for r in records if r.offset_s is not None]
    if timed and min(timed) > 0:
        base = min(timed)
        records = [dataclasses.replace(r, offset_s=(r.offset_s or 0.0) - base) for r in records]
    return records, FileSummary(name, fmt, len(records), skipped)


def merge(files: Sequence[list[TraceRecord]], *, concat: bool) -> list[TraceRecord]:
    """One send-ordered list from several files' records (see the module docstring)."""
    timed = {bool(recs) and recs[0].offset_s is not None for recs in files if recs}
    if len(timed) > 1:
        raise ConfigError("cannot mix timed traces with prompt sets (no arrival times) in one run")
    merged: list[TraceRecord] = []
    shift = 0.0
    for recs in files:
        shifted = recs
        if concat and recs and recs[0].offset_s is not None:
            shifted = [dataclasses.replace(r, offset_s=(r.offset_s or 0.0) + shift) for r in recs]
            shift = max(r.offset_s or 0.0 for r in shifted)
        merged.extend(shifted)
    if timed == {True}:
        merged.sort(key=lambda r: r.offset_s or 0.0)
    return [dataclasses.replace(r, index=i) for i, r in enumerate(merged)]


def read_traces(
    paths: Sequence[str | Path],
    fmt: TraceFormat | None = None,
    *,
    skip_bad: bool = False,
    concat: bool = False,
    all_turns: bool = False,
) -> TraceSet:
    """Read and merge every trace file of a run."""
    if not paths:
        raise ConfigError("no trace file given")
    per_file: list[list[TraceRecord]] = []
    summaries: list[FileSummary] = []
    for path in paths:
        records, summary = read_trace_file(path, fmt, skip_bad=skip_bad, all_turns=all_turns)
        per_file.append(records)
        summaries.append(summary)
    return TraceSet(tuple(merge(per_file, concat=concat)), tuple(summaries))
