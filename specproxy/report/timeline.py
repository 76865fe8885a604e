"""The throughput timeline of a streamed report (pure: columns in, chunk reads asked for).

The report's definition of the timeline (``tests/oracles/sides.py`` keeps a
record-by-record version it is held equal to: same windows, same counts). It holds no
chunk arrays: a request whose whole chunk span (``core.records.columns``) lies in
one window puts all its chunk tokens there, and only a request whose span straddles a
window edge has its chunk arrays read again, through ``chunks_of`` (the caller does the
I/O; its ``runs`` splits them in C where it can, ``_Windows.straddling`` the reference).
Chunk offsets map to windows monotonically, so a span inside one window means every chunk
of it is there.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from itertools import compress
from typing import Protocol

from specproxy.core.compare.column_figures import live_mask
from specproxy.core.compare.sides import Timeline, TimelineWindow, choose_window_s
from specproxy.core.records.chunk_span import NO_CHUNKS
from specproxy.core.records.columns import NULL, SIDES, RecordColumns


class ChunksOf(Protocol):
    """What reads a record's chunks back (``report.load.ChunkReader``)."""

    def __call__(self, cols: RecordColumns, i: int, /) -> tuple[Sequence[int], Sequence[int]]:
        """Record ``i``'s chunk offsets and chunk tokens."""

    def runs(
        self, cols: RecordColumns, i: int, base: float, scale: float, last: int, /
    ) -> list[tuple[int, int]] | None:
        """``(window, tokens)`` per run of record ``i``'s chunks in one window, the window
        of a chunk at offset ``o`` being ``min(last, int(base + o * scale))``, where a
        faster reader than ``_Windows.straddling`` (the reference) takes the record; else
        None."""


class _Windows:
    """Token, completed and failed counts of one side's windows."""

    def __init__(self, count: int, origin: float, width: float) -> None:
        self.tokens, self.done, self.failed = [0] * count, [0] * count, [0] * count
        self.origin, self.width, self.last = origin, width, count - 1

    def index(self, base: float, scale: float, offset: int) -> int:
        index = int(base + offset * scale)
        return index if index < self.last else self.last

    def straddling(self, start: float, offsets: Sequence[int], tokens: Sequence[int]) -> None:
        """Tokens of a request whose chunks fall in more than one window."""
        base, scale = (start - self.origin) / self.width, 1e-6 / self.width
        if list(offsets) != sorted(offsets):
            for offset, count in zip(offsets, tokens, strict=True):
                self.tokens[self.index(base, scale, offset)] += count
            return
        # Ascending offsets land in ascending windows: find where each window's chunks end.
        sums = [0, *itertools.accumulate(tokens)]
        lo = 0
        while lo < len(offsets):
            window = self.index(base, scale, offsets[lo])
            hi = bisect.bisect_right(offsets, window, lo, key=lambda o: self.index(base, scale, o))
            self.tokens[window] += sums[hi] - sums[lo]
            lo = hi


def _add_side(
    cols: RecordColumns, w: _Windows, indices: Sequence[int], chunks_of: ChunksOf
) -> None:
    origin, width, last = w.origin, w.width, w.last
    sent, e2e, error, low, high = cols.sent, cols.e2e, cols.error, cols.low, cols.high
    chunk_tokens, tokens, counts = cols.chunk_tokens, cols.tokens, w.tokens
    scale = 1e-6 / width
    for i in indices:
        start, took = sent[i], e2e[i]
        end = start + (took / 1e6 if took != NULL else 0.0)
        end_idx = int((end - origin) // width)
        end_idx = last if last < end_idx else end_idx  # min(last, ...) without its call
        if error[i] >= 0:
            w.failed[end_idx] += 1
            continue
        w.done[end_idx] += 1
        if low[i] != NO_CHUNKS and chunk_tokens[i] > 0:
            base = (start - origin) / width
            first, final = int(base + low[i] * scale), int(base + high[i] * scale)
            first = last if last < first else first
            if first == (final if final < last else last):  # w.index of both ends
                counts[first] += chunk_tokens[i]
            elif (runs := chunks_of.runs(cols, i, base, scale, last)) is not None:
                for window, count in runs:
                    counts[window] += count
            else:
                w.straddling(start, *chunks_of(cols, i))
        else:
            at = min(last, max(0, int((end - origin) // width)))
            counts[at] += tokens[i] if tokens[i] != NULL else 0


def streamed_timeline(cols: RecordColumns, window_s: float | None, chunks_of: ChunksOf) -> Timeline:
    """Per-side windows over every record in ``cols`` (warm-up excluded): output tokens at
    their chunk offsets (all at the end without them), completions and failures at each
    request's end (``[sent, sent + e2e]``; a failed request without E2E at its send)."""
    live = [not w for w in cols.warmup]
    starts = list(compress(cols.sent, live))
    if not starts:
        return Timeline(window_s or 1.0, 0.0, ())
    origin = min(starts)
    horizon = max(
        start + (e2e / 1e6 if e2e != NULL else 0.0)
        for start, e2e in zip(starts, compress(cols.e2e, live), strict=True)
    )
    horizon -= origin
    width = window_s or choose_window_s(horizon)
    count = max(1, math.floor(horizon / width) + 1)
    sides = []
    for side in SIDES:
        indices = list(compress(range(len(cols)), live_mask(cols, side)))
        if not indices:
            continue
        w = _Windows(count, origin, width)
        _add_side(cols, w, indices, chunks_of)
        windows = tuple(
            TimelineWindow(k * width, w.tokens[k], w.done[k], w.failed[k]) for k in range(count)
        )
        sides.append((side, windows))
    return Timeline(width, origin, tuple(sides))
