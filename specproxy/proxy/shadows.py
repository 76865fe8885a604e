"""The shadow copies of mirror mode, run in the background and bounded.

A shadow copy never touches its client's response and runs on after its client has gone
(``proxy.relay``); ``ShadowSupervisor`` bounds how many run at once (a copy over the
bound is never sent, and is recorded as ``shadow_dropped``) and cuts them at shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from specproxy import runtime


class ShadowSupervisor:
    """Runs shadow copies as named background tasks, at most ``limit`` at once."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self._limit = limit
        self._tasks: set[asyncio.Task[None]] = set()
        self.stopping = False

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def try_start(self, make: Callable[[], Coroutine[Any, Any, None]], *, name: str) -> bool:
        """Start ``make()`` unless ``limit`` copies are running; False means dropped."""
        if self.stopping or len(self._tasks) >= self._limit:
            return False
        task = runtime.spawn(make(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def drain(self, deadline_s: float) -> int:
        """Stop taking copies, wait up to ``deadline_s``, cancel the rest; returns how many."""
        self.stopping = True
        return await runtime.drain(set(self._tasks), max(deadline_s, 0.0))
