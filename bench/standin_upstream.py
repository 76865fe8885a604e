"""A calibrated stand-in for an OpenAI-compatible streaming server, for benchmarks.

Not a test: a server with a fixed timing and almost no CPU cost of its own, so that
what a benchmark sees is the cost of what sits between it and the client. Every
``POST`` gets a chunked ``text/event-stream`` answer: after ``--ttft-ms`` the first
event, then one event every ``--token-ms``, ``--tokens`` events with one token each,
each event in its own chunk, then ``data: [DONE]``. Keep-alive HTTP/1.1; any other
request gets 404. Plain asyncio protocol, no framework, so its cost stays small.

Usage: ``python bench/standin_upstream.py [--port 0] [--ttft-ms 5] [--token-ms 2]
[--tokens 32] [--reuse-port] [--uvloop]``; prints ``stand-in upstream at
http://127.0.0.1:PORT`` on stdout. ``--reuse-port`` lets several stand-in processes share
one port (``SO_REUSEPORT``: the kernel spreads connections over them), so that a
benchmark needing more capacity than one process runs several (``bench/workers_scale.py``);
``--uvloop`` runs it on uvloop, whose timers cost less.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass
from typing import cast

HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Timing:
    """When the stand-in answers: first event after ``ttft_s``, then one per ``token_s``."""

    ttft_s: float
    token_s: float
    tokens: int


def chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk carrying ``payload``."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def event(index: int) -> bytes:
    """The SSE event of token ``index`` (a chat-completion chunk, one token of content)."""
    return (
        b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"t%d "},"finish_reason":null}]}\n\n' % index
    )


LAST = (
    chunk(
        b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m",'
        b'"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
    )
    + chunk(b"data: [DONE]\n\n")
    + b"0\r\n\r\n"
)


class Stream(asyncio.Protocol):
    """One client connection: parses request heads and bodies, answers them in turn."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].lower()
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip() == b"content-length":
                length = int(value)
        if len(self.buf) < end + 4 + length:
            return
        self.buf = self.buf[end + 4 + length :]
        assert self.transport is not None
        if not head.startswith(b"post "):
            self.transport.write(NOT_FOUND)
            self._next()
            return
        self.busy = True
        asyncio.get_running_loop().create_task(self._answer())

    async def _answer(self) -> None:
        transport, timing = self.transport, self.timing
        assert transport is not None
        loop = asyncio.get_running_loop()
        start = loop.time()
        transport.write(HEAD)
        for i in range(timing.tokens):
            # sleep to an absolute schedule so that late wake-ups do not accumulate
            await asyncio.sleep(max(0.0, start + timing.ttft_s + i * timing.token_s - loop.time()))
            if transport.is_closing():
                return
            transport.write(chunk(event(i)))
        transport.write(LAST)
        self.busy = False
        self._next()


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ttft-ms", type=float, default=5.0)
    parser.add_argument("--token-ms", type=float, default=2.0)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--reuse-port", action="store_true")
    parser.add_argument("--uvloop", action="store_true")
    return parser.parse_args()


async def main(args: argparse.Namespace) -> None:
    timing = Timing(args.ttft_ms / 1000, args.token_ms / 1000, args.tokens)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Stream(timing),
        "127.0.0.1",
        args.port,
        backlog=1024,
        reuse_port=args.reuse_port or None,
    )
    port = server.sockets[0].getsockname()[1]
    print(f"stand-in upstream at http://127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    ARGS = parse()
    if ARGS.uvloop:
        import uvloop

        uvloop.run(main(ARGS))
    else:
        asyncio.run(main(ARGS))
