"""A scripted in-memory ``Backend`` for unit tests of the code that consumes backends.

``FakeBackend`` is the transport seam's fake (``backends.exchange``): ``open_exchange``
returns a real ``Exchange`` fed by a scripted Carrier (the head, then each chunk in a turn
of its own, then the end), so the relay's loop and the replayer's ``backends.send`` run as
they run on a socket. What it answers is set per instance: the status, the chunks, a
failure class instead of an answer, and an optional gate that holds every send until the
test opens it. By default it answers ``/generate`` as SGLang does: an SSE stream of two
tokens for a streaming request, one JSON body otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from multidict import CIMultiDict

from specproxy.backends.base import BackendSpec, UpstreamRequest
from specproxy.backends.exchange import Exchange, UpstreamFailure
from specproxy.core.records.model import ErrorKind, Role

GENERATE_CHUNKS = (
    b'data: {"text":"a","meta_info":{"completion_tokens":1,"prompt_tokens":3}}\n\n',
    b'data: {"text":"ab","meta_info":{"completion_tokens":2,"prompt_tokens":3,'
    b'"finish_reason":{"type":"length"}}}\n\n',
    b"data: [DONE]\n\n",
)
GENERATE_JSON = (
    b'{"text":"ab","meta_info":{"completion_tokens":2,"prompt_tokens":3,'
    b'"finish_reason":{"type":"length"}}}',
)


class FakeBackend:
    """An upstream that answers from a script, counted and inspectable; see the module docstring."""

    def __init__(
        self,
        role: Role,
        *,
        url: str = "http://fake.invalid",
        status: int = 200,
        chunks: Sequence[bytes] | None = None,
        fail: ErrorKind | None = None,
        gate: asyncio.Event | None = None,
    ) -> None:
        self._spec = BackendSpec(url, role)
        self.status = status
        self.chunks = None if chunks is None else tuple(chunks)
        self.fail = fail
        self.gate = gate
        self.sent: list[UpstreamRequest] = []
        self._sent_changed = asyncio.Condition()
        self._in_flight = 0
        self.peak_in_flight = 0  # the most requests this backend held at once

    @property
    def spec(self) -> BackendSpec:
        return self._spec

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def start(self) -> None:
        """Nothing to open."""

    async def close(self) -> None:
        """Nothing to close."""

    async def get(
        self, path: str, *, timeout_s: float = 10.0, api_key: str | None = None
    ) -> tuple[int, bytes]:
        return 200, b"{}"

    async def post_json(self, path: str, obj: Any, *, timeout_s: float = 60.0) -> tuple[int, bytes]:
        return 200, b"{}"

    async def call(
        self,
        method: str,
        path: str,
        obj: Any = None,
        *,
        timeout_s: float = 60.0,
        api_key: str | None = None,
    ) -> tuple[int, bytes]:
        return 200, b"{}"

    async def until_sent(self, count: int) -> None:
        """Return once ``count`` requests have reached this backend."""
        async with self._sent_changed:
            await self._sent_changed.wait_for(lambda: len(self.sent) >= count)

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        self._in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            yield
        finally:
            self._in_flight -= 1

    def begin_exchange(self, request: UpstreamRequest, t0_ns: int) -> Exchange | None:
        return None  # nothing is ever written without waiting

    async def open_exchange(
        self,
        request: UpstreamRequest,
        t0_ns: int,
        on_sent: Callable[[], object] | None = None,
        begun: Exchange | None = None,
    ) -> Exchange:
        self.sent.append(request)
        async with self._sent_changed:
            self._sent_changed.notify_all()
        if on_sent is not None:
            on_sent()
        ex = Exchange(asyncio.get_running_loop(), t0_ns)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise UpstreamFailure(self.fail, f"scripted {self.fail.value}")
        default = GENERATE_CHUNKS if request.stream else GENERATE_JSON
        chunks = self.chunks if self.chunks is not None else default
        headers: CIMultiDict[str] = CIMultiDict()
        if request.stream:
            headers["Content-Type"] = "text/event-stream"
        else:
            headers["Content-Type"] = "application/json"
            headers["Content-Length"] = str(sum(map(len, chunks)))
        carrier = _Scripted(ex, chunks)
        ex.carried_by(carrier)
        ex.head(self.status, headers)
        return ex


class _Scripted:
    """The Carrier of a scripted answer: each chunk read in a loop turn of its own."""

    def __init__(self, ex: Exchange, chunks: Sequence[bytes]) -> None:
        self.exchange: Exchange | None = ex
        self._unpaused = asyncio.Event()
        self._unpaused.set()
        self._task = asyncio.get_running_loop().create_task(self._feed(chunks))

    async def _feed(self, chunks: Sequence[bytes]) -> None:
        for chunk in chunks:
            await asyncio.sleep(0)  # the next read comes in a later turn, as from a socket
            await self._unpaused.wait()
            if self.exchange is None:
                return
            self.exchange.read(chunk)
        ex, self.exchange = self.exchange, None
        if ex is not None:
            ex.finish()

    def pause_reading(self) -> None:
        self._unpaused.clear()

    def resume_reading(self) -> None:
        self._unpaused.set()

    def cancel_timer(self) -> None:
        """No deadlines: a test that needs one holds the answer with ``gate``."""

    def close(self) -> None:
        self.exchange = None
        self._task.cancel()
