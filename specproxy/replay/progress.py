"""One updating progress line on a terminal: sent (of planned), completed and failed per
side, rate, elapsed and an ETA (open loop: by the schedule), numbers with thousands
separators; and, before the first send, how long an open-loop schedule will take.

Quiet unless the stream is a TTY. The line is redrawn by a named background task a few
times a second (never per request, so progress costs nothing on the send path) and
cleared when the run ends.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import TextIO

from specproxy.core.records.model import Role
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


def progress_line(
    tally: Tally,
    elapsed_s: float,
    planned: Mapping[Role, int] | None = None,
    schedule_us: Sequence[int] | None = None,
) -> str:
    """The text of the progress line; with ``planned`` (sends per side) also totals and an ETA.

    Open loop (``schedule_us``, ``schedule_times``): the ETA is what the schedule has left
    after the last send; closed loop: the sends left at the rate so far."""
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
    if planned and remaining > 0 and schedule_us:
        done = schedule_us[min(total_sent, len(schedule_us)) - 1] if total_sent else 0
        line += f" | ETA {duration((schedule_us[-1] - done) / 1e6)} by the schedule"
    elif planned and remaining > 0 and rate > 0:
        line += f" | ETA {duration(remaining / rate)}"
    return line


def schedule_times(windows: Sequence[Window]) -> list[int] | None:
    """Open loop: the intended time of every send (one per side of each job, in order),
    windows one after another, in microseconds from the first; None in closed loop. A
    window waits for the one before to complete, which the schedule cannot know: the
    times are a lower bound."""
    times: list[int] = []
    start = 0
    for window in windows:
        if window.offsets_us is None:
            return None
        for job, offset in zip(window.jobs, window.offsets_us, strict=True):
            times.extend([start + offset] * len(job.sides))
        start += window.offsets_us[-1] if window.offsets_us else 0
    return times


LONG_RUN_S = 600.0
"""A schedule longer than this gets a warning before the first send."""


def schedule_notice(windows: Sequence[Window]) -> tuple[str, bool] | None:
    """The line printed before sending: how long the open-loop schedule takes, and whether
    it is a warning (past ``LONG_RUN_S``, naming what shortens it); None in closed loop."""
    times = schedule_times(windows)
    if not times:
        return None
    span = duration(times[-1] / 1e6)
    line = f"the schedule sends {len(times):,} requests over {span} (open loop)"
    if times[-1] / 1e6 <= LONG_RUN_S:
        return f"specproxy replay: {line}", False
    warning = (
        f"specproxy replay: warning: {line}, longer than {duration(LONG_RUN_S)};"
        " --max-requests, --duration, --speed or --max-idle-s shorten it"
    )
    return warning, True


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
        schedule_us: Sequence[int] | None = None,
    ) -> None:
        self._tally = tally
        self._planned = planned
        self._schedule = schedule_us
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
            elapsed_s = self._clock.now_us() / 1e6
            line = progress_line(self._tally, elapsed_s, self._planned, self._schedule)
            self._write("\r\x1b[2K" + line)
            await asyncio.sleep(REFRESH_S)
