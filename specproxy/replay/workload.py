"""From read records to what is sent: context limit, limit/duration, arrival offsets.

- Context: a length-only record whose ``input_tokens + output_tokens`` exceeds
  ``max_context`` is skipped, or with ``clamp`` its input is cut to
  ``max_context - output_tokens`` (an output that alone does not fit is halved to
  ``max_context // 2``) and its
  ``hash_ids`` to the blocks that remain. Both are counted and reported. Records with
  a body or prompt text are sent as they are (their length is unknown before the server
  tokenizes them).
- Offsets: ``--rate`` gives constant or seeded Poisson arrivals; otherwise recorded
  offsets (optionally bucket-spread and idle-compressed, then divided by ``--speed``);
  closed loop (``--concurrency`` alone) has none. Open-loop ``--duration`` keeps only the
  requests whose offset falls inside it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from specproxy.core.load import schedule
from specproxy.errors import ConfigError
from specproxy.replay.synth import BLOCK_TOKENS
from specproxy.replay.trace import TraceRecord


@dataclass(frozen=True, slots=True)
class ContextResult:
    """Records after the context limit, and how many were skipped or clamped."""

    records: list[TraceRecord]
    skipped: int
    clamped: int


def _clamp(record: TraceRecord, max_context: int) -> TraceRecord:
    out = record.output_tokens or 1
    if out >= max_context:
        out = max(1, max_context // 2)
    inp = max(1, max_context - out)
    blocks = math.ceil(inp / BLOCK_TOKENS)
    return dataclasses.replace(
        record, input_tokens=inp, output_tokens=out, hash_ids=record.hash_ids[:blocks]
    )


def apply_context(
    records: Sequence[TraceRecord], max_context: int | None, policy: str
) -> ContextResult:
    """Skip or clamp length-only records over ``max_context`` tokens (see the module docstring)."""
    if max_context is None:
        return ContextResult(list(records), 0, 0)
    kept: list[TraceRecord] = []
    skipped = clamped = 0
    for record in records:
        need = (record.input_tokens or 0) + (record.output_tokens or 0)
        if not record.synthetic_prompt or need <= max_context:
            kept.append(record)
        elif policy == "clamp":
            kept.append(_clamp(record, max_context))
            clamped += 1
        else:
            skipped += 1
    return ContextResult(kept, skipped, clamped)


def recorded_offsets(
    records: Sequence[TraceRecord],
    *,
    speed: float,
    spread: bool = False,
    max_idle_s: float | None = None,
) -> list[int]:
    """The records' own offsets as microseconds from the first, after the optional transforms."""
    offsets = [r.offset_s for r in records]
    if any(o is None for o in offsets):
        raise ConfigError(
            "this trace has no arrival times (a prompt set): give --rate R or --concurrency N"
        )
    seconds = [float(o or 0.0) for o in offsets]
    if seconds:
        base = seconds[0]
        seconds = [s - base for s in seconds]
    if spread:
        seconds = schedule.spread_buckets(seconds)
    if max_idle_s is not None:
        seconds = schedule.compress_idle(seconds, max_idle_s)
    return schedule.recorded_offsets_us(seconds, speed=speed)


def arrival_offsets(
    records: Sequence[TraceRecord],
    *,
    rate: float | None,
    arrival: str,
    seed: int,
    closed_loop: bool,
    speed: float,
    spread: bool = False,
    max_idle_s: float | None = None,
) -> list[int] | None:
    """Open-loop offsets (microseconds) for ``records``, or None for closed loop."""
    if closed_loop:
        return None
    if rate is not None:
        if arrival == "constant":
            return schedule.constant_offsets_us(len(records), rate)
        return schedule.poisson_offsets_us(len(records), rate, seed=seed)
    return recorded_offsets(records, speed=speed, spread=spread, max_idle_s=max_idle_s)


def within_duration(
    records: list[TraceRecord], offsets: list[int] | None, duration_s: float | None
) -> tuple[list[TraceRecord], list[int] | None]:
    """Open loop: only the requests whose offset is before ``duration_s``."""
    if offsets is None or duration_s is None:
        return records, offsets
    limit_us = round(duration_s * 1_000_000)
    keep = sum(1 for o in offsets if o < limit_us)
    return records[:keep], offsets[:keep]
