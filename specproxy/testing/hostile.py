"""Raw-socket peers for the hostile tests: a client that writes bytes as given, and an
upstream that answers with bytes as given (no HTTP library on either side).

``RawUpstream`` reads each request (head, then a ``Content-Length`` body) and hands it
to ``answer``, a coroutine that writes whatever bytes it likes to the proxy and returns
whether to keep the connection open. Requests that are not generation requests (the
proxy's start-up reads) get ``reads[path]``, else ``other`` (an empty 404).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import orjson

from specproxy.testing.harness import chat

Answer = Callable[[bytes, asyncio.StreamWriter], Awaitable[bool]]
GENERATION = (b"/v1/chat/completions", b"/v1/completions", b"/generate")
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"


PATHS = ("lean", "aiohttp")


def request(path: str, extra: str, body: bytes | None = None) -> bytes:
    """A chat POST carrying ``extra`` header lines: with a Content-Length (``lean``) or
    chunked (any other ``path``)."""
    body = orjson.dumps(chat("hi")) if body is None else body
    head = "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n" + extra
    if path == "lean":
        return f"{head}Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body
    chunk = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    return f"{head}Transfer-Encoding: chunked\r\n\r\n".encode("latin-1") + chunk


def post(body: bytes, *, path: str = "/v1/chat/completions", extra: str = "") -> bytes:
    """A POST with a Content-Length body and a Host header; ``extra``: more header lines."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


def chat_post(content: str = "hi", *, stream: bool = False, extra: str = "") -> bytes:
    return post(orjson.dumps(chat(content, stream=stream)), extra=extra)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response: (status, headers with lower-case names, de-chunked body); a
    response with neither framing is read to the end of the connection."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if status in (204, 304) or 100 <= status < 200:
        return status, headers, b""
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding") != "chunked":
        return status, headers, await reader.read()
    parts: list[bytes] = []
    while True:
        size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return status, headers, b"".join(parts)
        parts.append(data[:-2])


async def closed(reader: asyncio.StreamReader) -> bool:
    """True when the peer closes the connection (EOF or reset) before sending more bytes."""
    try:
        return await reader.read(65536) == b""
    except ConnectionError:
        return True


@contextlib.asynccontextmanager
async def connect(url: str) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port), limit=1 << 24)
    try:
        yield reader, writer
    finally:
        writer.close()


async def exchange(url: str, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Write ``data`` on a new connection; its first response."""
    async with connect(url) as (reader, writer):
        writer.write(data)
        return await read_response(reader)


@dataclass
class RawUpstream:
    """An upstream whose generation answers are ``answer``'s raw bytes; see the module."""

    answer: Answer
    requests: list[bytes] = field(default_factory=list)
    reads: dict[bytes, bytes] = field(default_factory=dict)  # raw answers to other paths
    other: bytes = NOT_FOUND  # the raw answer to any other path
    _handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self._answer_all(reader, writer)
        finally:
            writer.close()
            self._handlers.discard(task)

    async def _answer_all(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                request = head + await reader.readexactly(length)
                path = head.split(b" ", 2)[1]
                if path not in GENERATION:
                    writer.write(self.reads.get(path, self.other))
                    continue
                self.requests.append(request)
                if not await self.answer(request, writer):
                    break

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=1 << 24)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            for task in list(self._handlers):  # answers still writing or stalled
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await server.wait_closed()


def fixed(data: bytes, *, keep: bool = True) -> Answer:
    """An answer that writes ``data`` to every request."""

    async def answer(_request: bytes, writer: asyncio.StreamWriter) -> bool:
        writer.write(data)
        await writer.drain()
        return keep

    return answer


def unary(body: bytes, *, status: str = "200 OK", extra: str = "") -> bytes:
    """A Content-Length JSON answer."""
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body
