"""Chunk data reduced to a few numbers per record, for reports over long runs (pure).

A streamed report keeps no chunk arrays in memory: a 1,000-token answer has hundreds of
chunk offsets, and a day's run has millions of records. Only the throughput timeline
needs them, and only to split a request's tokens between the windows its chunks arrived
in. So each record keeps its earliest and latest chunk offset and its chunk tokens (its
**span**, 8 bytes a number); a request whose whole span falls in one window puts all its
tokens there, and only a request that straddles a window edge has its chunks read again
from its line (``line_offset`` into ``files[file_index]``), by the caller that does I/O.
"""

from __future__ import annotations

import itertools
from array import array
from typing import Any

NO_CHUNKS = -1


class ChunkSpans:
    """Per-record spans of one run directory, in record order (``add`` / ``add_none``)."""

    __slots__ = ("file_index", "files", "high_us", "line_offset", "low_us", "tokens")

    def __init__(self, files: tuple[str, ...]) -> None:
        self.files = files
        self.file_index = array("H")
        self.line_offset = array("q")
        self.low_us = array("q")
        self.high_us = array("q")
        self.tokens = array("q")

    def __len__(self) -> int:
        return len(self.low_us)

    def add_none(self, file_index: int, offset: int) -> None:
        """A record whose chunk arrays stay in the record itself (no span kept)."""
        self._append(file_index, offset, NO_CHUNKS, NO_CHUNKS, 0)

    def add(self, file_index: int, offset: int, data: dict[str, Any]) -> None:
        """Take the chunk arrays out of record dict ``data`` (schema 1 or 2), keep its span."""
        gaps = data.pop("chunk_gaps_us", None)
        offsets = data.pop("chunk_offsets_us", None)
        tokens = data.pop("chunk_tokens", None) or ()
        data.pop("chunk_choices", None)
        if gaps:
            low = gaps[0] if min(gaps) >= 0 else min(itertools.accumulate(gaps))
            high = sum(gaps) if min(gaps) >= 0 else max(itertools.accumulate(gaps))
        elif offsets:
            low, high = min(offsets), max(offsets)
        else:
            self._append(file_index, offset, NO_CHUNKS, NO_CHUNKS, 0)
            return
        if not isinstance(low, int) or not isinstance(high, int):
            raise ValueError("chunk offsets must be integers")
        self._append(file_index, offset, low, high, sum(tokens))

    def _append(self, file_index: int, offset: int, low: int, high: int, tokens: int) -> None:
        self.file_index.append(file_index)
        self.line_offset.append(offset)
        self.low_us.append(low)
        self.high_us.append(high)
        self.tokens.append(tokens)
