"""One updating progress line on a terminal: sent/completed/failed per side, rate, elapsed.

Quiet unless the stream is a TTY. The line is redrawn by a named background task a few
times a second (never per request, so progress costs nothing on the send path) and
cleared when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TextIO

from specproxy.core.model import Role
from specproxy.replay.summary import Tally
from specproxy.runtime import MonotonicClock, spawn

REFRESH_S = 0.25


def progress_line(tally: Tally, elapsed_s: float) -> str:
    """The text of the progress line."""
    parts = []
    total_sent = 0
    for role in Role:
        sent = tally.sides[role].sent
        if not sent:
            continue
        total_sent += sent
        stats = tally.stats(role)
        parts.append(f"{role.value} {sent} sent {stats.completed} ok {stats.failed} failed")
    rate = total_sent / elapsed_s if elapsed_s > 0 else 0.0
    body = " | ".join(parts) or "waiting"
    return f"{body} | {rate:.1f} req/s | {elapsed_s:.0f} s"


class Progress:
    """Draws ``progress_line`` on ``stream`` while running (only when it is a TTY)."""

    def __init__(self, tally: Tally, clock: MonotonicClock, stream: TextIO | None) -> None:
        self._tally = tally
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
            line = progress_line(self._tally, self._clock.now_us() / 1e6)
            self._write("\r\x1b[2K" + line)
            await asyncio.sleep(REFRESH_S)
