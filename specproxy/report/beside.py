"""A part of the report's figures computed beside the rest, in a forked process.

The figures over a long run's columns run in one process after the parallel pass
(``report.scan``); two parts need nothing the other figures give, so from ``BESIDE_PAIRS``
pairs on (and with a second usable CPU) each is computed in a forked child while this
process computes the rest: the throughput timeline (started first: it needs the columns
alone), and the "where the gain goes" breakdowns with the ratios by accept length and by
load. At 300,000 records the three take about 1.1 s, 1.2 s and 1.9 s of CPU. A child
inherits the columns (no copy is sent), and only its result comes back, pickled.
The same functions run either way, so the report cannot tell the difference
(``tests/report/test_beside.py``).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any, TypeVar

from specproxy.report.scan import workers

T = TypeVar("T")

BESIDE_PAIRS = 20_000
"""Pairs from which those groups are computed in a forked process."""


def _run(task: Callable[[], Any], send: Any) -> None:
    try:
        result: tuple[bool, Any] = (True, task())
    except BaseException as exc:
        result = (False, exc)
    send.send(result)
    send.close()


def beside(task: Callable[[], T], pairs: int) -> Callable[[], T]:
    """Start ``task`` and return what waits for its result (or raises its exception): in a
    forked child when there are ``BESIDE_PAIRS`` pairs or more and a second usable CPU,
    else run here at once."""
    if pairs < BESIDE_PAIRS or workers() < 2:
        value = task()
        return lambda: value
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_run, args=(task, send), daemon=True)
    child.start()
    send.close()

    def wait() -> T:
        try:
            ok, value = receive.recv()
        except EOFError as exc:
            raise RuntimeError(f"the report's figure process ended ({child.exitcode})") from exc
        finally:
            receive.close()
            child.join()
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    return wait
