"""The throughput timeline of a streamed report (pure: records and spans in).

Gives exactly ``core.compare_sides.throughput_timeline`` (same windows, same counts),
without holding chunk arrays: a record loaded without them (``report.spans``) puts all
its tokens in one window when its whole chunk span lies there, and asks ``chunks_of``
for its chunk arrays only when the span straddles a window edge.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterator, Sequence

from specproxy.core.compare_sides import (
    Timeline,
    TimelineWindow,
    choose_window_s,
    request_interval_s,
)
from specproxy.core.model import RequestRecord, Role
from specproxy.report.spans import NO_CHUNKS, ChunkSpans

ChunksOf = Callable[[ChunkSpans, int], tuple[tuple[int, ...], tuple[int, ...]]]
RunRecords = tuple[Sequence[RequestRecord], ChunkSpans | None]


def _live(runs: Sequence[RunRecords]) -> Iterator[tuple[RequestRecord, ChunkSpans | None, int]]:
    for records, spans in runs:
        for i, rec in enumerate(records):
            if not rec.warmup:
                yield rec, spans, i


class _Windows:
    """Token, completed and failed counts of one side's windows."""

    def __init__(self, count: int, origin: float, width: float, chunks_of: ChunksOf) -> None:
        self.tokens, self.done, self.failed = [0] * count, [0] * count, [0] * count
        self.origin, self.width, self.last = origin, width, count - 1
        self.chunks_of = chunks_of

    def add(self, rec: RequestRecord, spans: ChunkSpans | None, i: int) -> None:
        start, end = request_interval_s(rec)
        end_idx = min(self.last, int((end - self.origin) // self.width))
        if not rec.ok:
            self.failed[end_idx] += 1
            return
        self.done[end_idx] += 1
        m = rec.measurement
        if m.chunk_offsets_us and sum(m.chunk_tokens) > 0:
            self._chunks(start, m.chunk_offsets_us, m.chunk_tokens)
        elif spans is not None and spans.low_us[i] != NO_CHUNKS and spans.tokens[i] > 0:
            self._span(start, spans, i)
        else:
            at = min(self.last, max(0, int((end - self.origin) // self.width)))
            self.tokens[at] += m.completion_tokens or 0

    def _index(self, base: float, scale: float, offset: int) -> int:
        index = int(base + offset * scale)
        return index if index < self.last else self.last

    def _span(self, start: float, spans: ChunkSpans, i: int) -> None:
        base, scale = (start - self.origin) / self.width, 1e-6 / self.width
        low = self._index(base, scale, spans.low_us[i])
        if low == self._index(base, scale, spans.high_us[i]):
            self.tokens[low] += spans.tokens[i]
            return
        offsets, tokens = self.chunks_of(spans, i)
        if not _ascending(offsets):
            self._chunks(start, offsets, tokens)
            return
        # Ascending offsets land in ascending windows: find where each window's chunks end.
        sums = [0, *itertools.accumulate(tokens)]
        lo = 0
        while lo < len(offsets):
            window = self._index(base, scale, offsets[lo])
            hi = bisect.bisect_right(offsets, window, lo, key=lambda o: self._index(base, scale, o))
            self.tokens[window] += sums[hi] - sums[lo]
            lo = hi

    def _chunks(self, start: float, offsets: Sequence[int], tokens: Sequence[int]) -> None:
        base, scale = (start - self.origin) / self.width, 1e-6 / self.width
        last, out = self.last, self.tokens
        for offset, count in zip(offsets, tokens, strict=True):
            index = int(base + offset * scale)
            out[index if index < last else last] += count


def _ascending(values: Sequence[int]) -> bool:
    """True when ``values`` never decrease (C-speed: sorting a sorted list is one pass)."""
    return list(values) == sorted(values)


def streamed_timeline(
    runs: Sequence[RunRecords], window_s: float | None, chunks_of: ChunksOf
) -> Timeline:
    """Per-side windows over all ``runs`` (warm-up excluded), as ``throughput_timeline``."""
    origin = min((rec.sent_at_unix_s for rec, _, _ in _live(runs)), default=None)
    if origin is None:
        return Timeline(window_s or 1.0, 0.0, ())
    horizon = max(request_interval_s(rec)[1] for rec, _, _ in _live(runs)) - origin
    width = window_s or choose_window_s(horizon)
    count = max(1, math.floor(horizon / width) + 1)
    per_side = {side: _Windows(count, origin, width, chunks_of) for side in Role}
    for rec, spans, i in _live(runs):
        per_side[rec.side].add(rec, spans, i)
    sides = []
    for side in Role:
        w = per_side[side]
        if any(w.done) or any(w.failed):
            windows = tuple(
                TimelineWindow(k * width, w.tokens[k], w.done[k], w.failed[k]) for k in range(count)
            )
            sides.append((side, windows))
    return Timeline(width, origin, tuple(sides))
