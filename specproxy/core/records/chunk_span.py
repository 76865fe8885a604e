"""A record's chunk arrays reduced to their span: the earliest and latest chunk offset, the
chunk count and the sum of chunk tokens, read from the arrays or from their summary.

Pure. Most of a line's bytes are its chunk arrays, and parsing them (a Python int per entry)
was most of the cost of a line. A schema-3 line ends in them, after their summary
(``core.records.model.CHUNK_SUMMARY``), so ``cut_chunk_arrays`` cuts their bytes off before the
line is parsed and the span comes from the summary (``summary_span``), checked against the
arrays by two C-level byte scans: their lengths (commas) and the earliest offset (the first
gap). A record whose per-token latencies are counted (``core.records.columns``), an older line and
one whose summary does not fit its arrays are parsed in full; every number of the arrays is
then read (``array_span``), and a summary that disagrees with them refuses the record.
Without it, a byte scan of the raw line's ``chunk_gaps_us`` for a ``-`` stands in for
``min(gaps) >= 0``.
"""

from __future__ import annotations

import itertools
from operator import itemgetter
from typing import Any

from specproxy.core.records.model import CHUNK_SUMMARY

NO_CHUNKS = -1
Span = tuple[int, int, int, int]
"""A record's chunks: earliest and latest offset (``NO_CHUNKS`` without), count, tokens."""

_GAPS_KEY = b',"chunk_gaps_us":['
_ARRAY_KEYS = frozenset(("chunk_offsets_us", "chunk_gaps_us", "chunk_tokens", "chunk_choices"))
_NO_CHOICES = b'],"chunk_choices":['
_SUMMARY = itemgetter(*CHUNK_SUMMARY)
Cut = tuple[bytes, int, int, bool]
"""What ``cut_chunk_arrays`` gives: the line without its chunk arrays, the commas in
them, the first gap (-1 without any), whether there are chunk choices."""


def cut_chunk_arrays(raw: bytes) -> Cut | None:
    """A line ``raw`` that ends in its chunk arrays as schema 3 writes them
    (``CHUNK_ARRAYS``, last, in that order): ``(the line without them, the commas in them,
    the first gap, whether there are choices)``, which ``ColumnBuilder.add`` checks against the record's chunk
    summary (lengths, by the commas; the earliest offset). None for any other line (it is
    read in full). Two C-level scans of the arrays' bytes, no number parsed but the first."""
    at = raw.rfind(_GAPS_KEY)
    if at < 0:
        return None
    end = len(raw) - (3 if raw.endswith(b"]}\n") else 2)
    if raw[end : end + 2] != b"]}":
        return None
    gaps_at = at + len(_GAPS_KEY)
    first = -1
    if raw[gaps_at] != 93:  # not "]": some gaps
        number = raw[gaps_at : raw.find(b",", gaps_at, end)]  # "]" ends it when it is alone
        try:
            first = int(number[:-1] if number.endswith(b"]") else number)
        except ValueError:
            return None
    choices = raw[end - len(_NO_CHOICES) : end] != _NO_CHOICES
    return raw[:at] + b"}", raw.count(b",", gaps_at, end), first, choices


def summary_span(data: dict[str, Any], cut: Cut) -> Span | None:
    """The record's chunk span from its chunk summary, checked against what
    ``cut_chunk_arrays`` saw of the arrays: the commas of ``count`` gaps and as many
    tokens (and choices, when there are any) and the first gap, the earliest offset unless a gap
    is negative. None when the line has no summary, the arrays were not all cut off, or
    the summary does not fit them: the line is then read in full, every number checked."""
    try:
        count, low, high, total = _SUMMARY(data)
    except KeyError:
        return None
    if not data.keys().isdisjoint(_ARRAY_KEYS):  # four lookups, not a walk of the keys
        return None
    _, commas, first, choices = cut
    if not count:
        fits = count == 0 and first < 0 and not choices and commas == 2
        fits = fits and low is None and high is None and total == 0
        return (NO_CHUNKS, NO_CHUNKS, 0, 0) if fits else None
    if type(count) is not int or commas != (3 * count - 1 if choices else 2 * count):
        return None
    if type(low) is not int or type(high) is not int or type(total) is not int:
        return None
    if low != first or high < low:
        return None
    return low, high, count, total


def _may_have_negative_gap(gaps: Any, raw: bytes) -> bool:
    """False only when ``raw`` shows no minus sign in ``chunk_gaps_us`` (module docstring)."""
    if not (gaps and raw):
        return True
    end = raw.rfind(b'"chunk_gaps_us":')
    return end < 0 or raw.find(b"-", end, raw.find(b"]", end)) >= 0


def array_span(data: dict[str, Any], raw: bytes = b"") -> Span:
    """The span of a record's chunks read from its arrays, every number checked (and checked
    against its chunk summary when it has one); ValueError naming what does not fit. ``raw``,
    the record's line, lets a byte scan stand in for ``min(gaps) >= 0`` (module doc)."""
    gaps = data.get("chunk_gaps_us")
    tokens = data.get("chunk_tokens") or ()
    choices = data.get("chunk_choices") or ()
    if gaps:
        high = sum(gaps) if isinstance(gaps, list) else None
        if type(high) is not int:
            raise ValueError("chunk_gaps_us must be a list of integers")
        if not _may_have_negative_gap(gaps, raw) or min(gaps) >= 0:
            low = gaps[0]
        else:
            offsets = list(itertools.accumulate(gaps))
            low, high = min(offsets), max(offsets)
        count = len(gaps)
    else:
        offsets = data.get("chunk_offsets_us") or []
        count = len(offsets)
        low, high = (min(offsets), max(offsets)) if offsets else (NO_CHUNKS, NO_CHUNKS)
        if not isinstance(low, int) or not isinstance(high, int):
            raise ValueError("chunk offsets must be integers")
    if count != len(tokens) or (choices and len(choices) != len(tokens)):
        raise ValueError("chunk_offsets_us and chunk_tokens must have the same length")
    total = sum(tokens) if count else 0
    if "chunk_count" in data:
        stored = _SUMMARY(data)
        if stored != ((count, low, high, total) if count else (0, None, None, total)):
            raise ValueError(f"the chunk summary {stored} disagrees with the chunk arrays")
    return low, high, count, total
