"""The replayer's unit of work: one request read from a trace file (``TraceRecord``).

A record carries exactly one kind of payload:

- ``body``: a full request body for ``route`` (specproxy's native format), sent as is;
- ``messages``: prompt text as chat turns (ShareGPT, MT-Bench), turned into a request
  for the chosen route;
- ``input_tokens`` only (Mooncake, Azure, native length lines): the prompt is
  synthesised to that token length (``synthetic_prompt`` is True).

Offsets are float seconds from the start of the trace (None for prompt sets, which have
no arrival times). Prompt text lives only in memory: nothing in this module writes it
anywhere, and ``RequestRecord`` never receives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from specproxy.core.records.model import Route

Message = tuple[str, str]
"""One chat turn: (role, content) with role ``system``, ``user`` or ``assistant``."""

MAX_OFFSET_S = 1e10  # ~317 years: beyond it a timestamp is not a time (inf, 1e308)
MESSAGE_ROLES = frozenset({"system", "user", "assistant"})


class TraceFormat(StrEnum):
    """Trace file formats the readers understand (``--format``)."""

    NATIVE = "native"
    MOONCAKE = "mooncake"
    AZURE = "azure"
    SHAREGPT = "sharegpt"
    PROMPTS = "prompts"


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One request of a trace; see the module docstring for the three payload kinds."""

    source_path: str
    source_line: int
    offset_s: float | None
    route: Route | None = None
    body: Mapping[str, Any] | None = None
    messages: tuple[Message, ...] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    hash_ids: tuple[int, ...] = ()
    category: str | None = None
    turn_index: int = 0
    conversation_id: str | None = None
    reference_answer: str | None = field(default=None, repr=False)
    index: int = 0

    def __post_init__(self) -> None:
        kinds = sum((self.body is not None, bool(self.messages), self.input_tokens is not None))
        if kinds != 1:
            raise ValueError("a trace record needs exactly one of: body, messages, input_tokens")
        if self.body is not None and self.route is None:
            raise ValueError("a record with a body needs its route")
        if self.offset_s is not None and not 0 <= self.offset_s <= MAX_OFFSET_S:
            raise ValueError(
                f"arrival offset must be a finite number of seconds in [0, {MAX_OFFSET_S:g}],"
                f" got {self.offset_s}"
            )
        if self.input_tokens is not None and self.input_tokens < 1:
            raise ValueError(f"input_tokens must be >= 1, got {self.input_tokens}")
        if self.output_tokens is not None and self.output_tokens < 1:
            raise ValueError(f"output_tokens must be >= 1, got {self.output_tokens}")
        if any(h < 0 for h in self.hash_ids):
            raise ValueError("hash_ids must be >= 0")
        for role, content in self.messages:
            if role not in MESSAGE_ROLES or not isinstance(content, str):
                raise ValueError(f"bad message role {role!r}")
        if self.messages and self.messages[-1][0] != "user":
            raise ValueError("the last message of a prompt must be the user's")
        if self.turn_index < 0 or self.index < 0 or self.source_line < 0:
            raise ValueError("turn_index, index and source_line must be >= 0")

    @property
    def source(self) -> str:
        """``file:line`` where the record was read (1-based line; element line for JSON arrays)."""
        return f"{self.source_path}:{self.source_line}"

    @property
    def synthetic_prompt(self) -> bool:
        """True when the trace carries only lengths and the prompt text will be synthesised."""
        return self.input_tokens is not None


@dataclass(frozen=True, slots=True)
class FileSummary:
    """What was read from one file: its detected format, records kept and bad lines skipped."""

    path: str
    format: TraceFormat
    records: int
    skipped_bad: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format.value,
            "records": self.records,
            "skipped_bad": self.skipped_bad,
        }


@dataclass(frozen=True, slots=True)
class TraceSet:
    """The merged records of every trace file of a run, in send order, indexed from 0."""

    records: tuple[TraceRecord, ...]
    files: tuple[FileSummary, ...]

    def __post_init__(self) -> None:
        for i, rec in enumerate(self.records):
            if rec.index != i:
                raise ValueError(f"record {i} carries index {rec.index}")

    @property
    def skipped_bad(self) -> int:
        return sum(f.skipped_bad for f in self.files)

    @property
    def timed(self) -> bool:
        """True when the records carry arrival offsets (prompt sets do not)."""
        return bool(self.records) and self.records[0].offset_s is not None
