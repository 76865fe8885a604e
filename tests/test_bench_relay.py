"""bench/tcp_relay.py, the floor the proxy benchmark reports, relays what it says it does:
every byte both ways unchanged, over a kept-alive connection, and with ``--shadow`` a
copy of each request to the shadow, whose answer the client never sees."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

RELAY = Path(__file__).resolve().parent.parent / "bench" / "tcp_relay.py"
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
SHADOW_ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nshadow"


class _Upstream(asyncio.Protocol):
    """Answers each read that ends a request head with ``answer``; keeps what it read."""

    def __init__(self, answer: bytes, seen: list[bytes], read: asyncio.Event) -> None:
        self.answer = answer
        self.seen = seen
        self.read = read  # set on every read
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.seen.append(data)
        self.read.set()
        if b"".join(self.seen).endswith(b"\r\n\r\n") and self.transport is not None:
            self.transport.write(self.answer)


async def _server(
    answer: bytes, seen: list[bytes], read: asyncio.Event
) -> tuple[asyncio.Server, int]:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Upstream(answer, seen, read), "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> bytes:
    writer.write(f"GET /{n} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    return await reader.readexactly(len(ANSWER))


@pytest.mark.parametrize("with_shadow", [False, True])
async def test_the_relay_passes_bytes_unchanged_and_copies_requests_to_the_shadow(
    with_shadow: bool,
) -> None:
    seen: list[bytes] = []
    shadow_seen: list[bytes] = []
    shadow_read = asyncio.Event()
    up, up_port = await _server(ANSWER, seen, asyncio.Event())
    shadow, shadow_port = await _server(SHADOW_ANSWER, shadow_seen, shadow_read)
    argv = [sys.executable, str(RELAY), "--upstream", f"127.0.0.1:{up_port}"]
    if with_shadow:
        argv += ["--shadow", f"127.0.0.1:{shadow_port}"]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        assert match, line
        reader, writer = await asyncio.open_connection("127.0.0.1", int(match.group(1)))
        answers = [await _exchange(reader, writer, n) for n in range(3)]
        writer.close()
        assert answers == [ANSWER] * 3  # the shadow's answer never reaches the client
        requests = b"".join(f"GET /{n} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for n in range(3))
        assert b"".join(seen) == requests
        if with_shadow:
            async with asyncio.timeout(10):
                while b"".join(shadow_seen) != requests:  # the copy is sent, not awaited
                    shadow_read.clear()
                    await shadow_read.wait()
        else:
            assert shadow_seen == []
    finally:
        proc.terminate()
        await proc.wait()
        up.close()
        shadow.close()
