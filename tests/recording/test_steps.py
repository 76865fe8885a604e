"""``recording.recorder.RecordSteps``: records made a moment later, one step per loop turn."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from specproxy.recording.recorder import RecordSteps


class _Log:
    """What the steps did, in order, with the event loop's own turns in between."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.written: list[str] = []
        self.failed: list[str] = []
        self.batches = 0

    def fold(self, item: str) -> str:
        self.events.append(f"fold {item}")
        return item.upper()

    def write(self, folded: str) -> None:
        self.events.append(f"write {folded}")
        if folded == "BAD":
            raise RuntimeError("a bug in one record")
        self.written.append(folded)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        self.events.append("batch")
        yield
        self.batches += 1
        self.events.append("batch end")


def _steps(log: _Log, delay_s: float = 0.0) -> RecordSteps[str, str]:
    return RecordSteps(
        fold=log.fold,
        write=log.write,
        batch=log.batch,
        failed=log.failed.append,
        delay_s=delay_s,
    )


async def test_each_step_is_its_own_loop_turn_in_the_order_the_requests_ended() -> None:
    loop = asyncio.get_running_loop()
    log = _Log()
    steps = _steps(log)
    done = loop.create_future()
    for item in ("a", "b", "c"):
        steps.later(item)
    assert log.events == []  # nothing in the call that queued them

    def tick() -> None:  # one callback per loop turn, until the last record is written
        log.events.append("turn")
        if log.written == ["A", "B", "C"]:
            done.set_result(None)
        else:
            loop.call_soon(tick)

    loop.call_soon(tick)
    await asyncio.wait_for(done, 5)
    made = [e for e in log.events if e != "turn"]
    assert made == ["fold a", "write A", "fold b", "write B", "fold c", "write C"]
    # between any two steps the loop ran something else
    for i, event in enumerate(log.events[:-1]):
        if event != "turn":
            assert log.events[i + 1] == "turn"
    assert steps.flush() == 0


async def test_flush_makes_what_waits_at_once_in_one_batch_and_a_bug_loses_no_other() -> None:
    log = _Log()
    steps = _steps(log, delay_s=60.0)  # the loop's steps would begin only a minute later
    for item in ("a", "bad", "c"):
        steps.later(item)
    assert steps.flush() == 3
    assert log.written == ["A", "C"] and log.failed == ["BAD"]
    assert log.events[0] == "batch" and log.events[-1] == "batch end" and log.batches == 1
    assert steps.flush() == 0  # the scheduled step was cancelled with nothing left
