"""A keep-alive pool of ``backends.h1`` connections to one ``http://`` or ``https://`` upstream.

``H1Pool.send`` writes one request on a pooled connection, a new one when none is idle
(at most ``limit`` open at once; opening one fails as ``UpstreamFailure`` ``connect``),
and returns its ``Exchange`` at once; ``send_now`` does it in the same call, on an idle
connection, or not at all; ``retry`` sends on a fresh connection, for a pooled one the
server had closed (``h1.is_stale``). The request is written before its Exchange is made
and attached. The connection gives itself back (``put_back``) when its answer ended
cleanly and both sides allow keep-alive, and leaves the pool (``forget``) when it closes.
The pool holds the deadlines its connections keep (``first_byte_s``, ``idle_s``,
``total_s``) and the request line and ``Host`` header its requests begin with
(``head_start``). On ``https://`` each connection is TLS (asyncio's, verified against the
system's certificates, or those ``SSL_CERT_FILE`` names, with the URL's host name); the
rest is the same code.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import Mapping
from urllib.parse import urlsplit

from specproxy.backends.exchange import Exchange, UpstreamFailure
from specproxy.backends.h1 import _Connection
from specproxy.core.records.model import ErrorKind


class H1Pool:
    """Keep-alive connections to one HTTP/1.1 server, at most ``limit`` at once."""

    def __init__(
        self,
        url: str,
        *,
        limit: int,
        connect_s: float,
        idle_s: float,
        first_byte_s: float = float("inf"),
        total_s: float = float("inf"),
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or parts.hostname is None:
            raise ValueError(f"H1Pool serves http:// and https:// URLs, got {url!r}")
        self.host = parts.hostname
        tls = parts.scheme == "https"
        self.port = parts.port or (443 if tls else 80)
        self._ssl = ssl.create_default_context() if tls else None
        self._server_hostname = self.host if tls else None  # what the certificate must name
        self._prefix = parts.path.rstrip("/")
        host_header = parts.netloc.rsplit("@", 1)[-1]
        self._host_line = f"Host: {host_header}\r\n".encode("latin-1")
        self.loop = loop or asyncio.get_running_loop()
        self.idle_s = idle_s
        self.first_byte_s = first_byte_s
        self.total_s = total_s
        self._connect_s = connect_s
        self._idle: collections.deque[_Connection] = collections.deque()
        self._all: set[_Connection] = set()
        self._slots = asyncio.Semaphore(limit)

    def head_start(self, path: str, headers: Mapping[str, str]) -> bytes:
        """The request line and headers of a POST to ``path``, up to its ``Content-Length``
        line (what requests of any length share)."""
        lines = [f"POST {self._prefix}{path} HTTP/1.1\r\n".encode("latin-1"), self._host_line]
        # the client's bytes as they came (read as UTF-8 with surrogate escapes, as aiohttp reads them)
        lines.extend(
            f"{name}: {value}\r\n".encode("utf-8", "surrogateescape")
            for name, value in headers.items()
        )
        return b"".join(lines)

    async def send(self, head: bytes, body: bytes, t0_ns: int) -> Exchange:
        """Write the request; the Exchange's futures say how its answer goes.

        Raises ``UpstreamFailure`` (``connect``) when no connection can be opened.
        """
        return self._send_on(await self._connection(fresh=False), head, body, t0_ns)

    async def retry(self, head: bytes, body: bytes, t0_ns: int) -> Exchange:
        """``send`` again on a fresh connection (after a stale pooled one failed)."""
        return self._send_on(await self._connection(fresh=True), head, body, t0_ns)

    def send_now(self, head: bytes, body: bytes, t0_ns: int) -> Exchange | None:
        """``send`` in this call, on an idle pooled connection; None when none is idle."""
        conn = self._idle_connection()
        return None if conn is None else self._send_on(conn, head, body, t0_ns)

    def _send_on(self, conn: _Connection, head: bytes, body: bytes, t0_ns: int) -> Exchange:
        """The request written on ``conn`` first, then its Exchange made and attached
        (nothing is read before the event loop runs again)."""
        conn.write(head, body)
        ex = Exchange(self.loop, t0_ns)
        conn.attach(ex)
        return ex

    def _idle_connection(self) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if conn.transport is not None and not conn.transport.is_closing():
                conn.reused = True
                return conn
        return None

    async def _connection(self, *, fresh: bool) -> _Connection:
        if not fresh and (conn := self._idle_connection()) is not None:
            return conn
        await self._slots.acquire()
        conn = _Connection(self)
        try:
            async with asyncio.timeout(self._connect_s):
                await self.loop.create_connection(
                    lambda: conn,
                    self.host,
                    self.port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname,
                )
        except TimeoutError as exc:
            self._slots.release()
            raise UpstreamFailure(ErrorKind.CONNECT, "connect timed out") from exc
        except OSError as exc:
            self._slots.release()
            raise UpstreamFailure(ErrorKind.CONNECT, f"{type(exc).__name__}: {exc}") from exc
        self._all.add(conn)
        return conn

    def put_back(self, conn: _Connection) -> None:
        if conn in self._all:
            self._idle.append(conn)

    def forget(self, conn: _Connection) -> None:
        if conn in self._all:
            self._all.discard(conn)
            self._slots.release()
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)

    def close(self) -> None:
        """Close every connection."""
        for conn in list(self._all):
            conn.close()
