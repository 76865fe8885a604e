"""The floor under any Python proxy on uvloop: a bare TCP relay, for benchmarks.

Not a test and not a proxy anyone should deploy: a byte relay with no HTTP in it. Each
client connection gets its own upstream connection, opened when the client connects;
every read from either side is written to the other in the one ``data_received`` call
that got it, and nothing else is done with it (no parsing, no timing, no record). Pause
and resume follow the receiving side's write buffer, so a slow side cannot make it buffer
without bound. What it costs per request is what uvloop, the kernel and one Python
callback per read cost: a proxy that reads HTTP, measures and records cannot cost less
on the same loop. With ``--shadow HOST:PORT`` each client connection also gets a
connection to the shadow, which is sent a copy of every client read and whose reads are
dropped: the floor under a mirror. ``bench/beside_nginx.py --floor`` runs both beside
nginx and specproxy.

Usage: ``python bench/tcp_relay.py --upstream HOST:PORT [--shadow HOST:PORT] [--port 0]``;
prints ``tcp relay listening on http://127.0.0.1:PORT`` on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from specproxy.runtime import run


class _Side(asyncio.Protocol):
    """One end of a relayed pair; its reads go to ``peer``'s transport."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.early: list[bytes] = []  # bytes read before the peer's transport existed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.early.append(data)
            return
        peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.close()

    def pause_writing(self) -> None:  # our transport is full: stop reading the peer
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class _Dropped(asyncio.Protocol):
    """The shadow's end: its reads are dropped."""

    def data_received(self, data: bytes) -> None:
        pass


class _Client(_Side):
    def __init__(self, upstream: tuple[str, int], shadow: tuple[str, int] | None) -> None:
        super().__init__()
        self._upstream = upstream
        self._shadow_at = shadow
        self._shadow: asyncio.Transport | None = None

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._shadow is not None:
            self._shadow.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._shadow is not None:
            self._shadow.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        up: _Side | None = None
        try:
            _, up = await loop.create_connection(_Side, *self._upstream)
            if self._shadow_at is not None:
                shadow, _ = await loop.create_connection(_Dropped, *self._shadow_at)
                self._shadow = shadow
        except OSError:
            if up is not None and up.transport is not None:
                up.transport.close()
            if self.transport is not None:
                self.transport.close()
            return
        if self.transport is None:  # the client left while we connected
            cast(asyncio.Transport, up.transport).close()
            if self._shadow is not None:
                self._shadow.close()
            return
        self.peer, up.peer = up, self
        transport = cast(asyncio.Transport, up.transport)
        for data in self.early:
            transport.write(data)
            if self._shadow is not None:
                self._shadow.write(data)
        self.early.clear()


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT")
    parser.add_argument("--shadow", help="HOST:PORT, sent a copy of every request")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    upstream = address(args.upstream)
    shadow = address(args.shadow) if args.shadow else None
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(upstream, shadow), "127.0.0.1", args.port)
    bound = server.sockets[0].getsockname()[1]
    print(f"tcp relay listening on http://127.0.0.1:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    server.close()


if __name__ == "__main__":
    run(main())
