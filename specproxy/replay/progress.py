"""One updating progress line on a terminal: sent (of planned), completed and failed per
side, rate, elapsed and an ETA, numbers with thousands separators.

Quiet unless the stream is a TTY. The line is redrawn by a named background task a few
times a second (never per request, so progress costs nothing on the send path) and
cleared when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import TextIO

from specproxy.core.model import Role
from specproxy.replay.modes import Window
from specproxy.replay.summary import Tally
from specproxy.runtime import MonotonicClock, spawn

REFRESH_S = 0.25


def duration(seconds: float) -> str:
    """``42 s`` under a minute, else ``m:ss`` (``h:mm:ss`` from an hour)."""
    total = max(0, round(seconds))
    if total < 60:
        return f"{total} s"
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_line(tally: Tally, elapsed_s: float, planned: Mapping[Role, int] | None = None) -> str:
    """The text of the progress line; with ``planned`` (sends per side) also totals and an ETA."""
    parts = []
    total_sent = 0
    for role in Role:
        sent = tally.sides[role].sent
        plan = planned.get(role, 0) if planned else 0
        if not sent and not plan:
            continue
        total_sent += sent
        stats = tally.stats(role)
        of = f"/{plan:,}" if plan else ""
        parts.append(
            f"{role.value} {sent:,}{of} sent {stats.completed:,} ok {stats.failed:,} failed"
        )
    rate = total_sent / elapsed_s if elapsed_s > 0 else 0.0
    body = " | ".join(parts) or "waiting"
    line = f"{body} | {rate:,.1f} req/s | {duration(elapsed_s)}"
    remaining = sum(planned.values()) - total_sent if planned else 0
    if planned and remaining > 0 and rate > 0:
        line += f" | ETA {duration(remaining / rate)}"
    return line


def planned_sends(windows: Sequence[Window]) -> dict[Role, int]:
    """Requests the schedule will send to each side (warm-up included)."""
    counts = dict.fromkeys(Role, 0)
    for window in windows:
        for job in window.jobs:
            for side in job.sides:
                counts[side] += 1
    return counts


class Progress:
    """Draws ``progress_line`` on ``stream`` while running (only when it is a TTY)."""

    def __init__(
        self,
        tally: Tally,
        clock: MonotonicClock,
        stream: TextIO | None,
        planned: Mapping[Role, int] | None = None,
    ) -> None:
        self._tally = tally
        self._planned = planned
        self._clock = clock
        self._stream = stream
        self._task: asyncio.Task[None] | None = None
        self.enabled = bool(stream is not None and stream.isatty())

    async def __aenter__(self) -> Progress:
        if self.enabled:
            self._task = spawn(self._draw(), name="replay-progress")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._write("\r\x1b[2K")

    def _write(self, text: str) -> None:
        if self._stream is not None:
            self._stream.write(text)
            self._stream.flush()

    async def _draw(self) -> None:
        while True:
            line = progress_line(self._tally, self._clock.now_us() / 1e6, self._planned)
            self._write("\r\x1b[2K" + line)
            await asyncio.sleep(REFRESH_S)
