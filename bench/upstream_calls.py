"""CPU per request of the upstream stretch, called as the relay calls it.

Not a test: prints figures. Each request reads ``in_flight``, tries ``begin_exchange``,
then ``open_exchange`` inside ``counted()``, awaits ``ended`` and reads ``spec.url``, on an
``HttpBackend`` over loopback to a raw server in the same process that answers a small
chunked SSE stream (five events) on one kept-alive connection, under uvloop. The figure is
this process's CPU time per request (``time.process_time``, the server's share included,
the same for every tree), after a warm-up, so that other work on a shared machine
inflates it as little as possible.

``--against TREE`` measures another checkout of specproxy as well (its package, with its C
speedups built, first on the path; the same interpreter), in alternating blocks, one fresh
process each.

Usage: ``python bench/upstream_calls.py [--requests 20000] [--rounds 5] [--against TREE]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
EVENTS = [b'data: {"a":1}\n\n'] * 4 + [b"data: [DONE]\n\n"]
ANSWER = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in EVENTS)
    + b"0\r\n\r\n"
)


class _Server(asyncio.Protocol):
    """Answers each whole request (head and ``Content-Length`` body) with ``ANSWER``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while (end := self.buf.find(b"\r\n\r\n")) >= 0:
            length = int(self.buf[:end].split(b"Content-Length: ")[1].split(b"\r\n")[0])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            self.transport.write(ANSWER)


async def _cpu_us(requests: int) -> float:
    """CPU microseconds per request of ``requests`` sent one after another."""
    from specproxy.backends.base import BackendSpec, UpstreamRequest
    from specproxy.backends.http import HttpBackend
    from specproxy.core.protocol.headers import SharedHeaders
    from specproxy.core.records.model import Role, Route

    server = await asyncio.get_running_loop().create_server(_Server, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    backend = HttpBackend(BackendSpec(f"http://127.0.0.1:{port}", Role.BASELINE))
    await backend.start()
    request = UpstreamRequest(Route.CHAT, b'{"stream":true}', True, SharedHeaders({"X-A": "1"}))

    async def one() -> None:
        _ = backend.in_flight
        t0_ns = time.perf_counter_ns()
        begun = backend.begin_exchange(request, t0_ns)
        with backend.counted():
            ex = await backend.open_exchange(request, t0_ns, None, begun)
            await ex.ended
        _ = backend.spec.url

    for _ in range(2000):
        await one()
    c0 = time.process_time()
    for _ in range(requests):
        await one()
    spent = time.process_time() - c0
    await backend.close()
    server.close()
    return spent / requests * 1e6


def _block(tree: Path, requests: int) -> float:
    """One fresh process measuring ``tree``'s package."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, "-P", str(HERE), "--probe", str(requests)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return float(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--against", type=Path, default=None, help="another checkout")
    args = parser.parse_args()
    trees = {"this checkout": ROOT}
    if args.against is not None:
        trees[f"{args.against} (--against)"] = args.against.resolve()
    got: dict[str, list[float]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            got[name].append(_block(tree, args.requests))
    print(
        f"CPU us per request, {args.requests} requests per block; os.cpu_count() = {os.cpu_count()}"
    )
    for name, values in got.items():
        blocks = " ".join(f"{v:.2f}" for v in values)
        print(
            f"{name:<40} median {statistics.median(values):6.2f}  best {min(values):6.2f}  ({blocks})"
        )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        import uvloop

        print(f"{uvloop.run(_cpu_us(int(sys.argv[2]))):.3f}")
    else:
        main()
