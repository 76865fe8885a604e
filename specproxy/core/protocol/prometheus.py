"""A small, strict parser for the Prometheus text exposition format (version 0.0.4).

Pure: text in, samples out. Enough of the format for reading a model server's
``/metrics`` before and after a window: ``# HELP`` / ``# TYPE`` metadata, samples with
or without labels, escaped label values (``\\\\``, ``\\"``, ``\\n``), the special values
``+Inf`` / ``-Inf`` / ``NaN``, optional timestamps, and blank lines. Anything else that
is not a comment raises ``ProtocolError`` naming the 1-based line, because a silently
misread counter would turn into a wrong acceptance figure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from specproxy.errors import ProtocolError

_METRIC_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped", "unknown"})
_UNESCAPE = {"\\": "\\", '"': '"', "n": "\n"}


@dataclass(frozen=True, slots=True)
class ExpositionSample:
    """One sample line: metric name, labels as sorted ``(name, value)`` pairs, value.

    ``timestamp_ms`` is the optional exposition timestamp (milliseconds since the epoch).
    """

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float
    timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("sample name must not be empty")

    def label(self, key: str) -> str | None:
        for name, value in self.labels:
            if name == key:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Exposition:
    """A parsed scrape: every sample in order, plus HELP and TYPE metadata by family name."""

    samples: tuple[ExpositionSample, ...]
    types: Mapping[str, str] = field(default_factory=dict)
    helps: Mapping[str, str] = field(default_factory=dict)

    def named(self, name: str) -> list[ExpositionSample]:
        """Every sample whose name is exactly ``name``."""
        return [s for s in self.samples if s.name == name]

    def total(self, name: str, **match: str) -> float | None:
        """Sum of ``name`` over all label sets that carry every ``match`` label; None if absent.

        Summing over label sets is how a counter split by labels (e.g. SGLang's
        ``is_streaming``) is read as one number. NaN samples are skipped.
        """
        found = False
        total = 0.0
        for s in self.samples:
            if s.name != name or math.isnan(s.value):
                continue
            if match and any(s.label(k) != v for k, v in match.items()):
                continue
            found = True
            total += s.value
        return total if found else None


def parse_exposition(text: str) -> Exposition:
    """Parse a whole scrape; raises ProtocolError (with the line number) on a malformed line."""
    samples: list[ExpositionSample] = []
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        try:
            if line.startswith("#"):
                _parse_comment(line, types, helps)
            else:
                samples.append(_parse_sample(line))
        except ValueError as exc:
            raise ProtocolError(f"metrics line {lineno}: {exc}: {raw[:120]!r}") from exc
    return Exposition(samples=tuple(samples), types=types, helps=helps)


def _parse_comment(line: str, types: dict[str, str], helps: dict[str, str]) -> None:
    parts = line[1:].lstrip().split(None, 2)
    if len(parts) < 2 or parts[0] not in ("HELP", "TYPE"):
        return  # an ordinary comment
    name = parts[1]
    rest = parts[2] if len(parts) > 2 else ""
    if parts[0] == "TYPE":
        kind = rest.strip()
        if kind not in _METRIC_TYPES:
            raise ValueError(f"unknown metric type {kind!r}")
        types[name] = kind
    else:
        helps[name] = _unescape_help(rest)


def _parse_sample(line: str) -> ExpositionSample:
    brace = line.find("{")
    if brace >= 0:
        name = line[:brace].strip()
        labels, end = _parse_labels(line, brace + 1)
        rest = line[end:].split()
    else:
        name, *rest = line.split()
    if not name or not _is_metric_name(name):
        raise ValueError(f"bad metric name {name!r}")
    if not rest or len(rest) > 2:
        raise ValueError("expected a value and an optional timestamp")
    value = _parse_value(rest[0])
    timestamp = int(rest[1]) if len(rest) == 2 else None
    return ExpositionSample(
        name=name,
        labels=tuple(sorted(labels.items())) if brace >= 0 else (),
        value=value,
        timestamp_ms=timestamp,
    )


def _parse_labels(line: str, pos: int) -> tuple[dict[str, str], int]:
    """Labels from just after ``{``; returns them and the index just after ``}``."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while pos < n and line[pos] in " \t,":
            pos += 1
        if pos < n and line[pos] == "}":
            return labels, pos + 1
        eq = line.find("=", pos)
        if eq < 0:
            raise ValueError("label without '='")
        key = line[pos:eq].strip()
        if not _is_label_name(key):
            raise ValueError(f"bad label name {key!r}")
        pos = eq + 1
        while pos < n and line[pos] == " ":
            pos += 1
        if pos >= n or line[pos] != '"':
            raise ValueError(f"label {key!r} value is not quoted")
        value, pos = _read_quoted(line, pos + 1)
        if key in labels:
            raise ValueError(f"label {key!r} given twice")
        labels[key] = value


def _read_quoted(line: str, pos: int) -> tuple[str, int]:
    """The escaped string starting at ``pos`` (just after the opening quote)."""
    out: list[str] = []
    n = len(line)
    while pos < n:
        ch = line[pos]
        if ch == '"':
            return "".join(out), pos + 1
        if ch == "\\" and pos + 1 < n:
            nxt = line[pos + 1]
            out.append(_UNESCAPE.get(nxt, "\\" + nxt))
            pos += 2
            continue
        out.append(ch)
        pos += 1
    raise ValueError("unterminated label value")


def _unescape_help(text: str) -> str:
    """HELP text escapes only backslash and newline; ``\\"`` stays as written."""
    if "\\" not in text:
        return text
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt in "\\n":
                out.append(_UNESCAPE[nxt])
                i += 2
                continue
        out.append(ch)
        i += 1
    return "".join(out)


def _parse_value(text: str) -> float:
    lowered = text.lower()
    if lowered in ("+inf", "inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    if lowered == "nan":
        return math.nan
    return float(text)


def _is_metric_name(name: str) -> bool:
    first = name[0]
    if not (first.isascii() and (first.isalpha() or first in "_:")):
        return False
    return all(c.isascii() and (c.isalnum() or c in "_:") for c in name)


def _is_label_name(name: str) -> bool:
    if not name or not (name[0].isascii() and (name[0].isalpha() or name[0] == "_")):
        return False
    return all(c.isascii() and (c.isalnum() or c == "_") for c in name)


def counter_delta(before: Exposition, after: Exposition, name: str, **match: str) -> float | None:
    """``after - before`` of a counter summed over label sets; None if ``after`` lacks it.

    A counter absent before the window counts as 0 (SGLang and llama.cpp create some
    series only on first use). A negative delta means the server restarted or its
    counters were reset inside the window; that is reported as None, not as a number.
    """
    end = after.total(name, **match)
    if end is None:
        return None
    start = before.total(name, **match) or 0.0
    delta = end - start
    return delta if delta >= 0 else None
