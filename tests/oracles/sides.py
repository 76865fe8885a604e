"""Per-side figures computed record by record: the oracles the column pass is held equal
to. ``summarise_side`` feeds the records one by one to ``core.records.tally.SideTally``, the
recorder's reduction (``core.compare.column_figures.side_summary`` is the report's); the
throughput timeline is held equal to ``specproxy.report.timeline.streamed_timeline``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from specproxy.core.compare.sides import Timeline, TimelineWindow, choose_window_s
from specproxy.core.records.model import RequestRecord, Role
from specproxy.core.records.tally import DEFAULT_MAX_SEND_LAG_MS, SideSummary, SideTally


def summarise_side(
    records: Iterable[RequestRecord],
    side: Role,
    max_send_lag_ms: float = DEFAULT_MAX_SEND_LAG_MS,
) -> SideSummary:
    """Summary of ``side`` over ``records`` (which may hold both sides), exact at any size."""
    tally = SideTally(side)
    for record in records:
        if record.side is side:
            tally.add(record)
    return tally.summary(max_send_lag_ms)


def request_interval_s(rec: RequestRecord) -> tuple[float, float]:
    """Wall-clock ``(start, end)`` of one request in Unix seconds."""
    start = rec.sent_at_unix_s
    e2e = rec.measurement.e2e_us
    return start, start + (e2e / 1e6 if e2e is not None else 0.0)


def _add_tokens(rec: RequestRecord, tokens: list[int], origin: float, width: float) -> None:
    """Add one request's output tokens to the windows they arrived in (hot loop: a long run
    has millions of chunks, so this stays flat arithmetic)."""
    m = rec.measurement
    start, end = request_interval_s(rec)
    last = len(tokens) - 1
    if not m.chunk_offsets_us or sum(m.chunk_tokens) <= 0:
        tokens[min(last, max(0, int((end - origin) // width)))] += m.completion_tokens or 0
        return
    base = (start - origin) / width
    scale = 1e-6 / width
    for offset, count in zip(m.chunk_offsets_us, m.chunk_tokens, strict=True):
        index = int(base + offset * scale)
        tokens[index if index < last else last] += count


def throughput_timeline(
    records: Sequence[RequestRecord], window_s: float | None = None
) -> Timeline:
    """Per-side windows over the whole run (warm-up excluded)."""
    live = [r for r in records if not r.warmup]
    if not live:
        return Timeline(window_s or 1.0, 0.0, ())
    origin = min(r.sent_at_unix_s for r in live)
    horizon = max(request_interval_s(r)[1] for r in live) - origin
    width = window_s or choose_window_s(horizon)
    count = max(1, math.floor(horizon / width) + 1)
    sides: list[tuple[Role, tuple[TimelineWindow, ...]]] = []
    for side in Role:
        tokens, done, failed = [0] * count, [0] * count, [0] * count
        mine = [r for r in live if r.side is side]
        for rec in mine:
            end_idx = min(count - 1, int((request_interval_s(rec)[1] - origin) // width))
            if not rec.ok:
                failed[end_idx] += 1
                continue
            done[end_idx] += 1
            _add_tokens(rec, tokens, origin, width)
        if mine:
            windows = tuple(
                TimelineWindow(i * width, tokens[i], done[i], failed[i]) for i in range(count)
            )
            sides.append((side, windows))
    return Timeline(width, origin, tuple(sides))
