"""Socket-level fuzzing of the proxy: mutated raw requests from clients, compared with an
independent reference, and mutated raw answers from a hostile upstream.

Used by ``test_hostile_fuzz.py`` (a short run) and ``bench/fuzz.py --targets
socket-client,socket-upstream`` (the long one). Every case runs over real loopback sockets against ``serve`` in-process:

- ``client`` cases: a valid request (Content-Length, chunked, pipelined, a GET) mutated
  (bytes inserted from ``TOKENS``, deleted, flipped, repeated), written to the proxy (in
  passthrough, in front of a raw upstream) and to ``testing.aiohttp_reference`` (what
  aiohttp's server answers to the same bytes, by the proxy's rules). The first final
  answer's status on each is compared (a ``100 Continue`` is interim: the proxy writes it
  once the head is read, aiohttp when a handler asks for the body; known differences:
  ``fuzz_known``); an answer that came from the upstream (the proxy names the
  side on a relayed generation answer; a relayed admin call brings ``OTHER_BODY``) counts
  as ``RELAYED_STATUS``, the reference's 200.
- ``upstream`` cases: a valid answer (unary, chunked stream, interim answers first)
  mutated the same way, written by the upstream to a valid request (Content-Length or
  chunked, by turns). Nothing to compare: what is counted is what the proxy did with it.

Counted (``FuzzTally``): the proxy's first answers by status, client cases where the
proxy's first status and the reference's differ, the proxy's 500s (its own failure),
hangs (a control request on a fresh connection not answered within ``HANG_S``), error
log lines (tracebacks, ``request_handler_failed``, asyncio's fatal errors), and the
accounting: requests that reached the upstream against records written (exactly one
each, in passthrough).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import random
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from specproxy.core.records.model import Role
from specproxy.testing.aiohttp_reference import reference_app, serving
from specproxy.testing.fuzz_known import (
    HANG_S,
    OTHER_BODY,
    final_statuses,
    known_difference,
    statuses,
)
from specproxy.testing.fuzz_targets import mutate
from specproxy.testing.harness import CHAT_BODY, CHAT_EVENTS, chat, records, rig
from specproxy.testing.hostile import RawUpstream, chat_post, post, request, unary

# the reference's answer to what the proxy relays, whatever the upstream answers
TOKENS = [b"\r\n", b"\n", b"\r", b":", b" ", b"\x00", b"\xff", b"\xc3\xa9", b"0\r\n\r\n",
          b"Content-Length: 5\r\n", b"Content-Length: 99999\r\n", b"Transfer-Encoding: chunked\r\n",
          b"Host: x\r\n", b"Connection: close\r\n", b"Expect: 100-continue\r\n", b"a" * 9000,
          b"X-A: b\r\n" * 200, b"HTTP/1.1 200 OK\r\n", b"HTTP/1.1 103 Early\r\n\r\n",
          b"Content-Encoding: gzip\r\n", b"ffffffff\r\n", b"-1", b"{", b"}"]  # fmt: skip


def client_seeds() -> list[bytes]:
    body = orjson.dumps(chat("hi"))
    host = "Host: 127.0.0.1\r\n"
    return [
        chat_post(),
        chat_post(stream=True),
        request("aiohttp", host, body),
        chat_post() + chat_post(),
        b"GET /_specproxy/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        post(body, extra="X-Specproxy-Side: baseline\r\n"),
    ]


def upstream_seeds() -> list[bytes]:
    stream = b"".join(CHAT_EVENTS)
    chunked = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % len(stream)
        + stream
        + b"\r\n0\r\n\r\n"
    )
    return [
        unary(CHAT_BODY),
        chunked,
        b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" + unary(CHAT_BODY),
        unary(b'{"object":"error","message":"x","code":400}', status="400 Bad Request"),
    ]


@dataclass
class FuzzTally:
    """What a run of cases found; see the module docstring."""

    cases: int = 0
    statuses: Counter[int | None] = field(default_factory=Counter)  # the proxy's first status
    differ: list[tuple[bytes, tuple[int, ...], tuple[int, ...]]] = field(default_factory=list)
    known: Counter[str] = field(default_factory=Counter)  # ``known_difference``, by name
    proxy_500: int = 0
    hangs: int = 0
    error_lines: int = 0
    upstream_requests: int = 0
    records: int = 0

    def merge(self, other: FuzzTally) -> None:
        self.cases += other.cases
        self.statuses.update(other.statuses)
        self.differ += other.differ
        self.known.update(other.known)
        for name in (
            "proxy_500",
            "hangs",
            "error_lines",
            "upstream_requests",
            "records",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def line(self) -> str:
        top = ", ".join(f"{k}: {v}" for k, v in self.statuses.most_common(8))
        return (
            f"{self.cases} cases; first status {{{top}}}; differ {len(self.differ)}"
            f" (known: {dict(self.known)}); "
            f"proxy 500 {self.proxy_500}; hangs {self.hangs}; error lines {self.error_lines}; "
            f"upstream requests {self.upstream_requests}, records {self.records}"
        )


async def answered(url: str) -> bool:
    """A control request on a fresh connection is answered within ``HANG_S``."""
    get = b"GET /_specproxy/status HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    return await statuses(url, get, HANG_S, most=1) == (200,)


class _Errors(io.StringIO, logging.Handler):
    """Counts the error lines written to stderr (structlog) and logged (asyncio)."""

    def __init__(self) -> None:
        io.StringIO.__init__(self)
        logging.Handler.__init__(self, logging.ERROR)
        self.count = 0
        self.first: list[str] = []  # the first few, for the report

    def write(self, text: str) -> int:
        if '"level":"error"' in text or "Traceback" in text or "Fatal error" in text:
            self._seen(text)
        return len(text)

    def emit(self, record: logging.LogRecord) -> None:
        exc = logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        self._seen(f"{record.getMessage()} {exc[-300:]}")

    def _seen(self, text: str) -> None:
        self.count += 1
        if len(self.first) < 3:
            self.first.append(text[:400])


@contextlib.contextmanager
def counting_errors() -> Iterator[_Errors]:
    errors = _Errors()
    stderr, sys.stderr = sys.stderr, errors
    logging.getLogger().addHandler(errors)
    try:
        yield errors
    finally:
        sys.stderr = stderr
        logging.getLogger().removeHandler(errors)


async def _gather(cases: list[Any], limit: int) -> list[Any]:
    slots = asyncio.Semaphore(limit)

    async def one(case: Any) -> Any:
        async with slots:
            return await case

    return await asyncio.gather(*(one(c) for c in cases))


async def client_cases(run_dir: Path, count: int, seed: int, window_s: float = 0.3) -> FuzzTally:
    """``count`` mutated requests, each to the proxy and to the reference."""
    rng = random.Random(seed)
    seeds = client_seeds()
    inputs = [mutate(rng, rng.choice(seeds), TOKENS) for _ in range(count)]
    up = RawUpstream(_fixed_ok, other=unary(OTHER_BODY, status="404 Not Found"))
    up.reads[b"/health"] = unary(b"{}")  # healthy: the proxy's /health is then 200
    tally = FuzzTally(cases=count)
    reference = reference_app(sides=[Role.BASELINE])  # the proxy's settings below
    async with up.running() as url, serving(reference) as ref:
        async with rig(run_dir, baseline=url, mode="passthrough") as proxy:
            got = await _gather([_both(proxy.url, ref, d, window_s) for d in inputs], 16)
            tally.hangs += not await answered(proxy.url)
        tally.upstream_requests = len(up.requests)
    _count(tally, inputs, got)
    tally.records = _records(run_dir)
    return tally


async def _fixed_ok(_request: bytes, writer: asyncio.StreamWriter) -> bool:
    writer.write(unary(CHAT_BODY))
    return True


Both = tuple[tuple[int, ...], tuple[int, ...], str | None]  # proxy, reference, known


async def _both(proxy: str, reference: str, data: bytes, window_s: float) -> Both:
    x = await statuses(proxy, data, window_s, relayed=True)
    y = await statuses(reference, data, window_s)
    if x[:1] != y[:1] and not (x and y):  # nothing in the window on one: once more, longer
        x = await statuses(proxy, data, HANG_S, relayed=True)
        y = await statuses(reference, data, HANG_S)
    x, y = final_statuses(x), final_statuses(y)
    known = await known_difference(reference, data, x, y) if x[:1] != y[:1] else None
    return x, y, known


def _count(tally: FuzzTally, inputs: list[bytes], got: list[Both]) -> None:
    for data, (x, y, known) in zip(inputs, got, strict=True):
        tally.statuses[x[0] if x else None] += 1
        tally.proxy_500 += -500 in x
        if known is not None:
            tally.known[known] += 1
        elif x[:1] != y[:1]:
            tally.differ.append((data, x, y))


def _records(run_dir: Path) -> int:
    return len(records(run_dir)) if (run_dir / "requests.jsonl").exists() else 0


async def upstream_cases(run_dir: Path, count: int, seed: int, window_s: float = 2.0) -> FuzzTally:
    """``count`` mutated upstream answers, each to one request through the proxy (with a
    Content-Length body for even cases, a chunked one for odd cases)."""
    rng = random.Random(seed)
    seeds = upstream_seeds()
    answers = [mutate(rng, rng.choice(seeds), TOKENS) for _ in range(count)]

    async def answer(req: bytes, writer: asyncio.StreamWriter) -> bool:
        case = int(req.split(b"\r\nX-Case: ", 1)[1].split(b"\r\n", 1)[0])
        writer.write(answers[case])
        return False  # the connection ends with the answer: one case per connection

    up = RawUpstream(answer)
    tally = FuzzTally(cases=count)
    body = orjson.dumps(chat("hi"))
    async with up.running() as url:
        async with rig(run_dir, baseline=url, mode="passthrough", idle_timeout_s=1.0) as r:

            async def one(case: int) -> tuple[int, ...]:
                extra = f"Host: 127.0.0.1\r\nX-Case: {case}\r\n"
                framing = ("lean", "aiohttp")[case % 2]  # hostile.request's names for them
                return await statuses(r.url, request(framing, extra, body), window_s, 1)

            got = await _gather([one(i) for i in range(count)], 16)
            tally.hangs += not await answered(r.url)
        tally.upstream_requests = len(up.requests)
    for x in got:
        tally.statuses[x[0] if x else None] += 1
        tally.proxy_500 += -500 in x
    tally.records = _records(run_dir)
    return tally
