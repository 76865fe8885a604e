"""``runtime.start_eagerly``: a Task whose first steps run at once, then a Task as any other."""

from __future__ import annotations

import asyncio
import sys

import pytest

from specproxy.runtime import start_eagerly


async def test_the_first_steps_run_at_once_as_the_task_then_the_rest_later() -> None:
    steps: list[str] = []
    release: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    seen: list[asyncio.Task[str] | None] = []

    async def work() -> str:
        steps.append("began")
        seen.append(asyncio.current_task())
        got = await release
        steps.append("resumed")
        return got + "!"

    def start() -> asyncio.Task[str]:  # from a plain callback, as data_received is
        return start_eagerly(work())

    loop = asyncio.get_running_loop()
    started: asyncio.Future[asyncio.Task[str]] = loop.create_future()
    loop.call_soon(lambda: started.set_result(start()))
    task = await started
    assert steps == ["began"] and seen == [task]
    release.set_result("done")
    assert await task == "done!"
    assert steps == ["began", "resumed"]


async def test_a_coroutine_that_ends_in_its_first_steps_gives_its_result_or_error() -> None:
    async def quick() -> int:
        return 7

    async def broken() -> int:
        raise ValueError("first step")

    loop = asyncio.get_running_loop()
    made: asyncio.Future[tuple[asyncio.Task[int], asyncio.Task[int]]] = loop.create_future()
    loop.call_soon(lambda: made.set_result((start_eagerly(quick()), start_eagerly(broken()))))
    ok, failing = await made
    assert await ok == 7
    with pytest.raises(ValueError, match="first step"):
        await failing


async def test_a_cancel_before_the_tasks_first_step_reaches_the_coroutine() -> None:
    cleaned: list[str] = []
    never: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def work() -> None:
        try:
            await never
        finally:
            cleaned.append("finally")

    loop = asyncio.get_running_loop()
    made: asyncio.Future[asyncio.Task[None]] = loop.create_future()

    def start_and_cancel() -> None:
        task = start_eagerly(work())
        task.cancel()  # in the same turn: the Task has not stepped yet
        made.set_result(task)

    loop.call_soon(start_and_cancel)
    task = await made
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == ["finally"] and task.cancelled()


async def test_inside_a_running_task_it_is_a_plain_task() -> None:
    steps: list[str] = []

    async def work() -> None:
        steps.append("ran")

    task = start_eagerly(work())  # this test runs in a Task
    assert steps == []
    await task
    assert steps == ["ran"]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.12 and later start eagerly built in")
async def test_without_asyncios_private_task_hooks_it_is_a_plain_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where ``asyncio.tasks._enter_task`` is gone, the coroutine still runs, only later."""
    monkeypatch.delattr(asyncio.tasks, "_enter_task")
    steps: list[str] = []

    async def work() -> str:
        steps.append("ran")
        return "ok"

    loop = asyncio.get_running_loop()
    made: asyncio.Future[tuple[asyncio.Task[str], list[str]]] = loop.create_future()

    def start() -> None:
        task = start_eagerly(work())
        made.set_result((task, list(steps)))  # what had run when start_eagerly returned

    loop.call_soon(start)
    task, at_start = await made
    assert at_start == []  # not eager
    assert await task == "ok" and steps == ["ran"]
