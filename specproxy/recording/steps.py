"""Records made a moment after their requests end, one step per event-loop turn.

Requests end in bunches (a closed-loop client sends its next one at once): folding a
response into its Measurement and writing its record then come after the work of the
requests that have just arrived, which is what their time to first token waits on,
instead of before it. ``RecordSteps.later`` queues an ended request; the steps begin at
most ``delay_s`` later, in the order the requests ended. Each record is made in two
steps, the fold and then the write (figures, metrics, the records file), one per turn,
so that the loop reads its sockets between any two: a request or a read that arrives
meanwhile waits for one step at most. Every stamp was taken already, so the figures do
not change. ``flush`` makes what is still waiting at once, written out together (the
shutdown calls it before closing the records).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import Generic, TypeVar

Ended = TypeVar("Ended")  # a request that has ended, not yet folded
Folded = TypeVar("Folded")  # its Measurement with what its record needs


class RecordSteps(Generic[Ended, Folded]):
    """The records still to make; see the module docstring.

    ``fold`` turns an ended request into what ``write`` records; ``batch`` opens a block
    whose writes go out together (``Recorder.batch``); ``failed`` is called, inside the
    ``except`` block, when a step raised (a bug in one record loses no other).
    """

    def __init__(
        self,
        *,
        fold: Callable[[Ended], Folded],
        write: Callable[[Folded], None],
        batch: Callable[[], contextlib.AbstractContextManager[None]],
        failed: Callable[[Folded], None],
        delay_s: float,
    ) -> None:
        self._fold = fold
        self._write = write
        self._batch = batch
        self._failed = failed
        self._delay_s = delay_s
        self._waiting: collections.deque[Ended] = collections.deque()
        self._folded: Folded | None = None  # folded in the last step, to write in the next
        self._step: asyncio.Handle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def later(self, ended: Ended) -> None:
        """Record ``ended`` within ``delay_s``, after those that ended before it."""
        self._waiting.append(ended)
        if self._step is None:
            loop = self._loop
            if loop is None:  # looked up once: each lookup is a system call
                loop = self._loop = asyncio.get_running_loop()
            self._step = loop.call_later(self._delay_s, self._run)

    def flush(self) -> int:
        """Make every record still waiting now, written out together; returns how many.
        Raises what the batch's write raised (a full disk)."""
        step, self._step = self._step, None
        if step is not None:
            step.cancel()
        made = len(self._waiting) + (self._folded is not None)
        with self._batch():
            while self._folded is not None or self._waiting:
                self.step()
        return made

    def _run(self) -> None:
        """One step; the next in the next turn."""
        self._step = None
        try:
            self.step()
        finally:
            if (self._waiting or self._folded is not None) and self._loop is not None:
                self._step = self._loop.call_soon(self._run)

    def step(self) -> None:
        """Write the request folded in the last step, else fold the next one waiting."""
        folded, self._folded = self._folded, None
        if folded is not None:
            try:
                self._write(folded)
            except Exception:
                self._failed(folded)
        elif self._waiting:
            self._folded = self._fold(self._waiting.popleft())
