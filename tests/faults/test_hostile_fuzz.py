"""A short socket-level fuzz run (``specproxy/testing/socket_fuzz.py``): mutated client
requests compared with ``testing.aiohttp_reference``, mutated upstream answers contained.
The long one is ``bench/fuzz.py --targets socket-client,socket-upstream``."""

from __future__ import annotations

from pathlib import Path

from specproxy.testing.socket_fuzz import client_cases, counting_errors, upstream_cases


async def test_mutated_requests_answer_as_the_reference_does(tmp_path: Path) -> None:
    with counting_errors() as errors:
        tally = await client_cases(tmp_path, count=200, seed=33)
    assert tally.differ == [], tally.line()
    assert (tally.proxy_500, tally.hangs, errors.count) == (0, 0, 0), tally.line()
    assert tally.records == tally.upstream_requests, tally.line()
    assert sum(v for k, v in tally.statuses.items() if k is not None) > 60  # most are answered
    assert tally.upstream_requests > 10, tally.line()  # some reached the upstream


async def test_mutated_upstream_answers_are_contained(tmp_path: Path) -> None:
    with counting_errors() as errors:
        tally = await upstream_cases(tmp_path, count=150, seed=33)
    assert (tally.proxy_500, tally.hangs, errors.count) == (0, 0, 0), tally.line()
    assert tally.records == tally.upstream_requests == tally.cases, tally.line()
    assert sum(v for k, v in tally.statuses.items() if k is not None) > 100, tally.line()
