"""Event-loop lifecycle: loop factory (uvloop when installed), named tasks, signals, deadlines.

Owns every background task specproxy starts: ``spawn()`` names the task and keeps a
strong reference until it finishes (bare ``asyncio.create_task`` is banned by lint).
``start_eagerly()`` makes a Task whose first steps run in the calling callback, up to
its first wait (Python 3.12's ``eager_start``, done by hand on 3.11).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Coroutine, Generator, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_TASKS: set[asyncio.Task[Any]] = set()


def spawn(coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
    """Start ``coro`` as a named task whose reference is kept until it finishes."""
    task = asyncio.get_running_loop().create_task(coro, name=name)
    _TASKS.add(task)
    task.add_done_callback(_TASKS.discard)
    return task


_NOTHING: Any = object()


class _Begun(Coroutine[Any, Any, T]):
    """A coroutine whose first steps have already run, handed on to a Task (``start_eagerly``).

    The Task's first ``send`` gets what the coroutine yielded then (the future it waits
    on), or its result; from then on every call goes to the coroutine itself, a
    cancellation included, even one that comes before the Task's first step."""

    __slots__ = ("_coro", "_exc", "_pending", "_result")

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro
        self._pending: Any = _NOTHING
        self._result: Any = _NOTHING
        self._exc: BaseException | None = None

    def begin(self) -> None:
        try:
            self._pending = self._coro.send(None)
        except StopIteration as stop:
            self._result = stop.value
        except BaseException as exc:  # raised again in the Task
            self._exc = exc

    def send(self, value: Any) -> Any:
        pending, self._pending = self._pending, _NOTHING
        if pending is not _NOTHING:
            return pending
        if self._exc is not None:
            exc, self._exc = self._exc, None
            raise exc
        if self._result is not _NOTHING:
            result, self._result = self._result, _NOTHING
            raise StopIteration(result)
        return self._coro.send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._pending = _NOTHING  # the Task will not wait on it: the coroutine is told instead
        if val is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, T]:
        raise NotImplementedError("only a Task drives it")


def start_eagerly(coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
    """A Task for ``coro`` whose first steps run now, up to its first wait, as its Task.

    So a relayed request's upstream request is written in the same call that read the
    client's request, not after the rest of the event loop's turn. Python 3.12 and later
    have this built in (``eager_start``); on 3.11 the Task is entered by hand with
    asyncio's own ``_enter_task`` / ``_leave_task``, and where those are missing it is a
    plain ``create_task`` (correct, only not eager). Inside a running Task it is a plain
    ``create_task``.
    """
    loop = asyncio.get_running_loop()
    if asyncio.current_task(loop) is not None:
        return loop.create_task(coro)
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
    enter = getattr(asyncio.tasks, "_enter_task", None)
    leave = getattr(asyncio.tasks, "_leave_task", None)
    if enter is None or leave is None:
        return loop.create_task(coro)
    begun = _Begun(coro)
    context = contextvars.copy_context()
    task = loop.create_task(begun, context=context)
    enter(loop, task)
    try:
        context.run(begun.begin)
    finally:
        leave(loop, task)
    return task


YOUNG_GC_THRESHOLD = 50_000  # allocations between young collections while serving (default 700)


@contextlib.contextmanager
def steady_state() -> Iterator[None]:
    """The process's long-lived objects out of the collector's reach, and fewer young
    collections, while a server or a replay runs; both undone at exit.

    Almost everything a request allocates is freed by reference counting when the request
    ends, so the cyclic collector mostly re-scans what lives for the whole run (tallies,
    pools, histograms), and a full collection can stall a stream in its middle (the figures
    are in ``docs/validation/README.md``, "Tuning history").
    ``gc.freeze`` moves what exists now to the permanent generation; the young
    generation's threshold goes from 700 to ``YOUNG_GC_THRESHOLD`` allocations, so
    cycles are still collected, only in fewer, larger passes.
    """
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GC_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop when it is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a fresh loop from ``loop_factory()``."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


class MonotonicClock:
    """The one clock: integer microseconds on ``perf_counter_ns``, plus wall time for humans."""

    def __init__(self, origin_ns: int | None = None) -> None:
        """``origin_ns``: the run's origin on ``perf_counter_ns`` (system-wide on Linux, so
        the workers of one run can share their parent's); now when None."""
        self._origin_ns = time.perf_counter_ns() if origin_ns is None else origin_ns

    @property
    def origin_ns(self) -> int:
        """The run's origin, on ``perf_counter_ns``."""
        return self._origin_ns

    def now_us(self) -> int:
        """Microseconds since this clock was created (the run's origin)."""
        return (time.perf_counter_ns() - self._origin_ns) // 1000

    def us_at(self, t_ns: int) -> int:
        """``t_ns`` (a ``perf_counter_ns`` reading) as microseconds since the run's origin."""
        return (t_ns - self._origin_ns) // 1000

    @staticmethod
    def wall_s() -> float:
        return time.time()


def install_stop_signals(stop: asyncio.Event) -> Callable[[], None]:
    """Set ``stop`` on SIGTERM or SIGINT; returns a function that removes the handlers."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)

    def remove() -> None:
        for sig in installed:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(sig)

    return remove


async def drain(tasks: set[asyncio.Task[Any]] | list[asyncio.Task[Any]], deadline_s: float) -> int:
    """Wait up to ``deadline_s`` for ``tasks``; cancel the rest and return how many were cancelled."""
    pending = [t for t in tasks if not t.done()]
    if not pending:
        return 0
    _, still = await asyncio.wait(pending, timeout=deadline_s)
    for task in still:
        task.cancel()
    if still:
        await asyncio.gather(*still, return_exceptions=True)
    return len(still)


class RequestIds:
    """Request ids: 16 hex digits, a random prefix drawn once per process (a forked child,
    e.g. a worker of ``serve --workers N``, draws anew) and a counter: unique within a run,
    with no system call per request; after 2**32 ids a new prefix is drawn."""

    __slots__ = ("_next", "_prefix")

    def __init__(self) -> None:
        self._prefix = ""
        self._next = 1 << 32
        os.register_at_fork(after_in_child=self.reset)

    def reset(self) -> None:
        """Draw the next id from a new prefix."""
        self._next = 1 << 32

    def __call__(self) -> str:
        n = self._next
        if n >= 1 << 32:
            self._prefix = secrets.token_hex(4)
            n = 0
        self._next = n + 1
        return f"{self._prefix}{n:08x}"
