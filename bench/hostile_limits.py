"""The proxy under a hostile peer: memory for a 100 MB head, and a pipelined flood.

Not a test: prints figures. ``specproxy serve`` (passthrough, ``--kind openai``) runs as
its own process, in front of a raw-socket upstream in this process; its RSS is read from
``/proc``. Parts:

- ``request-head``: a client sends a request head that never ends, 100 MB of it (one
  endless header line, then endless short header lines); the proxy's RSS before, its
  peak while the bytes are sent, and after the connection has closed; the status it
  answered and how many bytes it took before closing;
- ``response-head``: the upstream answers with a 100 MB head; the same figures, and the
  client's status;
- ``pipelined``: a request the upstream holds for ``--slow-s``, then 16 MB of pipelined
  requests behind it on the same connection; whether all are answered and how long it
  took, the proxy's peak RSS, and meanwhile the latency of requests on another
  connection (one every 50 ms; the aim: none delayed by more than 100 ms over its
  median before the flood).

Usage: ``python bench/hostile_limits.py [--mb 100] [--pipelined-mb 16] [--slow-s 3]
[--repeat 1] [--skip-pipelined]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import PROXY_URL, launch

from specproxy.runtime import spawn
from specproxy.testing.harness import CHAT_BODY
from specproxy.testing.hostile import RawUpstream, chat_post, read_response, unary

MB = 1 << 20


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class Upstream:
    """The raw upstream: a request carrying ``X-Mode: huge`` gets an endless head,
    ``X-Mode: slow`` is held ``slow_s``; every other one is answered at once."""

    def __init__(self, mb: int, slow_s: float) -> None:
        self.mb, self.slow_s = mb, slow_s
        self.raw = RawUpstream(self.answer)

    async def answer(self, request: bytes, writer: asyncio.StreamWriter) -> bool:
        if b"\r\nX-Mode: huge\r\n" in request:
            writer.write(b"HTTP/1.1 200 OK\r\nX-Big: ")
            with contextlib.suppress(ConnectionError):
                for _ in range(self.mb):
                    writer.write(b"a" * MB)
                    await writer.drain()
            return False
        if b"\r\nX-Mode: slow\r\n" in request:
            await asyncio.sleep(self.slow_s)
        writer.write(unary(CHAT_BODY))
        return True


@contextlib.asynccontextmanager
async def proxy(upstream: str, run_dir: str) -> AsyncIterator[tuple[str, int]]:
    argv = [sys.executable, "-m", "specproxy", "serve", "--baseline", upstream, "--mode",
            "passthrough", "--kind", "openai", "--port", "0", "--run-dir", run_dir]  # fmt: skip
    async with launch(PROXY_URL, *argv) as (url, pid):
        yield url, pid


async def settle(pid: int) -> float:
    """The proxy's RSS once it has stopped changing (it frees what it held at close)."""
    last = rss_mb(pid)
    for _ in range(20):
        await asyncio.sleep(0.25)
        now = rss_mb(pid)
        if abs(now - last) < 0.5:
            return now
        last = now
    return last


async def request_head(url: str, pid: int, mb: int, shape: str) -> None:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    before = await settle(pid)
    peak, sent = before, 0
    answer = spawn(_status(reader), name="answer")  # read while writing: the 400 comes early
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    piece = b"a" * MB if shape == "one line" else b"X-A: b\r\n" * (MB // 8)
    if shape == "one line":
        writer.write(b"X-Endless: ")
    try:
        for _ in range(mb):
            if answer.done():
                break
            writer.write(piece)
            await writer.drain()
            sent += len(piece)
            peak = max(peak, rss_mb(pid))
    except ConnectionError:
        pass
    status = await answer
    writer.close()
    after = await settle(pid)
    print(f"request head ({shape}, {mb} MB offered): status {status}, {sent / MB:.1f} MB "
          f"written before the close; RSS {before:.0f} MB before, peak {peak:.0f} "
          f"(+{peak - before:.0f}), {after:.0f} after close")  # fmt: skip


async def _status(reader: asyncio.StreamReader) -> str:
    try:
        async with asyncio.timeout(5):
            return str((await read_response(reader))[0])
    except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        return "none (closed)"


async def response_head(url: str, pid: int, mb: int) -> None:
    host, port = url.removeprefix("http://").split(":")
    before = await settle(pid)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(chat_post(extra="X-Mode: huge\r\n"))
    answer = spawn(_status(reader), name="answer")
    peak = before
    while not answer.done():
        peak = max(peak, rss_mb(pid))
        await asyncio.sleep(0.01)
    writer.close()
    after = await settle(pid)
    print(f"response head ({mb} MB offered): client status {answer.result()}; RSS "
          f"{before:.0f} MB before, peak {peak:.0f} (+{peak - before:.0f}), {after:.0f} after")  # fmt: skip


async def probe(url: str, stop: asyncio.Event, out: list[float]) -> None:
    """One request every 50 ms on its own connection; each one's latency (ms) into ``out``."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    data = chat_post()
    while not stop.is_set():
        t0 = time.perf_counter()
        writer.write(data)
        await read_response(reader)
        out.append((time.perf_counter() - t0) * 1000)
        await asyncio.sleep(0.05)
    writer.close()


async def pipelined(url: str, pid: int, mb: int) -> None:
    quiet: list[float] = []
    stop = asyncio.Event()
    probing = spawn(probe(url, stop, quiet), name="probe")
    await asyncio.sleep(2)
    stop.set()
    await probing
    base = statistics.median(quiet)
    one = chat_post()
    count = mb * MB // len(one)
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 24)
    during: list[float] = []
    stop = asyncio.Event()
    probing = spawn(probe(url, stop, during), name="probe")
    before, peak = rss_mb(pid), 0.0
    t0 = time.perf_counter()
    writer.write(chat_post(extra="X-Mode: slow\r\n") + one * count)
    answered = 0
    with contextlib.suppress(TimeoutError, ConnectionError, asyncio.IncompleteReadError):
        async with asyncio.timeout(120):
            for _ in range(count + 1):
                await read_response(reader)
                answered += 1
                if answered % 2000 == 0:
                    peak = max(peak, rss_mb(pid))
    took = time.perf_counter() - t0
    stop.set()
    await probing
    writer.close()
    worst = max(during) if during else float("nan")
    print(f"pipelined ({mb} MB, {count} requests behind a slow one): {answered - 1} of {count} "
          f"answered in {took:.1f} s; RSS {before:.0f} MB before, peak {max(peak, before):.0f}; "
          f"other connection: median {base:.1f} ms before, during median "
          f"{statistics.median(during):.1f} ms, max {worst:.1f} ms "
          f"(+{worst - base:.1f} ms over the quiet median, {len(during)} requests)")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--pipelined-mb", type=int, default=16)
    parser.add_argument("--slow-s", type=float, default=3.0)
    parser.add_argument("--skip-pipelined", action="store_true")
    parser.add_argument("--repeat", type=int, default=1, help="the head parts, this many times")
    args = parser.parse_args()
    up = Upstream(args.mb, args.slow_s)
    with tempfile.TemporaryDirectory() as run_dir:
        async with up.raw.running() as upstream, proxy(upstream, run_dir) as (url, pid):
            for _ in range(
                args.repeat
            ):  # a leak grows with each round; the allocator's keep does not
                await request_head(url, pid, args.mb, "one line")
                await request_head(url, pid, args.mb, "many lines")
                await response_head(url, pid, args.mb)
            if not args.skip_pipelined:
                await pipelined(url, pid, args.pipelined_mb)


if __name__ == "__main__":
    asyncio.run(main())
