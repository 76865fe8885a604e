"""The ``https://`` scheme of the transport seam: one exchange over an aiohttp session.

``backends.h1`` carries ``http://`` at the transport level; TLS goes through aiohttp's
client instead, behind the same ``Exchange`` (``backends.exchange``): ``open_aio`` posts
the request and returns once the answer's head is in; a reader task then hands every read
of the body to the Exchange (stamped, kept, forwarded) and ends it cleanly or with one
classified failure. Failures are classified as ``backends.h1`` classifies them: ``connect``
before the head (a pooled connection the server had closed is retried once on a fresh
one), ``timeout`` past ``first_byte_s`` for the head, ``idle_s`` between reads or
``total_s`` in all, ``stream_truncated`` when the body breaks off.

Backpressure: ``pause_reading`` holds the reader between two reads (aiohttp's own flow
control then stops the socket once its buffer is full).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import aiohttp
from multidict import CIMultiDict

from specproxy.backends.base import Timeouts
from specproxy.backends.exchange import (
    NO_DATA,
    NO_HEAD,
    TOTAL_DEADLINE,
    Exchange,
    UpstreamFailure,
)
from specproxy.core.records.model import ErrorKind


class _AioCarrier:
    """The Carrier of one aiohttp response: the task that reads its body."""

    __slots__ = ("_resp", "_task", "_unpaused", "exchange")

    def __init__(self, ex: Exchange, resp: aiohttp.ClientResponse) -> None:
        self.exchange: Exchange | None = ex
        self._resp = resp
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self._task: asyncio.Task[None] | None = None

    def start(self, idle_s: float, total_left_s: float) -> None:
        self._task = asyncio.get_running_loop().create_task(self._read(idle_s, total_left_s))

    def pause_reading(self) -> None:
        self._unpaused.clear()

    def resume_reading(self) -> None:
        self._unpaused.set()

    def cancel_timer(self) -> None:
        """The deadlines are the reader's own: nothing to stop apart from it."""

    def close(self) -> None:
        self.exchange = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._resp.close()  # closing it mid-body makes SGLang abort the request

    async def _read(self, idle_s: float, total_left_s: float) -> None:
        resp = self._resp
        failure: UpstreamFailure | None = None
        try:
            async with asyncio.timeout(total_left_s):
                failure = await self._body(resp.content, idle_s)
        except TimeoutError:
            failure = UpstreamFailure(ErrorKind.TIMEOUT, TOTAL_DEADLINE)
        ex, self.exchange = self.exchange, None
        if ex is None:  # aborted meanwhile
            return
        if failure is not None:
            resp.close()
            ex.fail(failure)
        else:
            resp.release()  # read to the end: the connection can be reused
            ex.finish()

    async def _body(self, content: aiohttp.StreamReader, idle_s: float) -> UpstreamFailure | None:
        """Each read to the Exchange until the end; the failure that stopped it, if any."""
        unpaused = self._unpaused
        try:
            while True:
                if not unpaused.is_set():
                    await unpaused.wait()
                async with asyncio.timeout(idle_s):
                    data = await content.readany()
                if not data:
                    return None
                ex = self.exchange
                if ex is None:
                    return None
                ex.read(data)
        except TimeoutError:
            if content.is_eof():
                return None
            return UpstreamFailure(ErrorKind.TIMEOUT, NO_DATA)
        except aiohttp.ClientError as exc:
            return UpstreamFailure(ErrorKind.STREAM_TRUNCATED, describe(exc))


async def open_aio(
    session: aiohttp.ClientSession,
    url: str,
    exchange: Exchange,
    *,
    headers: Mapping[str, str],
    body: bytes,
    timeouts: Timeouts,
) -> Exchange:
    """POST ``body`` to ``url``; ``exchange`` gets the answer.

    Returns once its head is in (``exchange.headers_in`` resolved); raises
    ``UpstreamFailure`` when it does not come."""
    limits = aiohttp.ClientTimeout(total=None, connect=timeouts.connect_s)  # the rest: here
    try:
        async with asyncio.timeout(timeouts.first_byte_s):
            try:
                resp = await session.post(url, data=body, headers=headers, timeout=limits)
            except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
                # a pooled connection the server had closed: one retry on a fresh one
                resp = await session.post(url, data=body, headers=headers, timeout=limits)
    except TimeoutError as exc:
        raise UpstreamFailure(ErrorKind.TIMEOUT, NO_HEAD) from exc
    except aiohttp.ClientError as exc:
        raise UpstreamFailure(ErrorKind.CONNECT, describe(exc)) from exc
    carrier = _AioCarrier(exchange, resp)
    exchange.carried_by(carrier)
    exchange.head(resp.status, CIMultiDict(resp.headers))
    spent_s = exchange.now_us() / 1e6
    carrier.start(timeouts.idle_s, max(timeouts.total_s - spent_s, 0.0))
    return exchange


def describe(exc: BaseException) -> str:
    """A short, secret-free description of a transport error."""
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]
