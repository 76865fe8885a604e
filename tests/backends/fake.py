"""A scripted in-memory ``Backend`` for unit tests of the code that consumes backends.

``FakeBackend`` keeps the contract of ``backends.base.Backend`` that the relay and the
driver rely on: every ``send`` ends in exactly one ``on_done`` call with a real
``Measurement`` (folded by ``core.measure.ResponseMeter`` from the scripted bytes), also
when the sending task is cancelled (``client_cancelled``), and the sink sees headers,
each chunk and the end. What it answers is set per instance: the status, the chunks, a
failure class instead of an answer, and an optional gate that holds every send until
the test opens it. By default it answers ``/generate`` as SGLang does: an SSE stream
of two tokens for a streaming request, one JSON body otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from specproxy.backends.base import BackendSpec, EventFilter, ResponseSink, UpstreamRequest
from specproxy.core.measure import ResponseMeter
from specproxy.core.model import ErrorKind, Measurement, Role

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
        self._clock = 0

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

    def _now_us(self) -> int:
        """A clock that moves 100 us per reading: durations are positive and exact."""
        self._clock += 100
        return self._clock

    async def send(
        self,
        request: UpstreamRequest,
        *,
        on_done: Callable[[Measurement], None],
        sink: ResponseSink | None = None,
        drop_event: EventFilter | None = None,
        keep_text: bool = False,
    ) -> Measurement:
        self.sent.append(request)
        async with self._sent_changed:
            self._sent_changed.notify_all()
        meter = ResponseMeter(request.route, request.stream, keep_text=keep_text)
        self._in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        measurement: Measurement | None = None
        try:
            measurement = await self._answer(request, meter, sink)
        except asyncio.CancelledError:
            measurement = meter.fail(self._now_us(), ErrorKind.CLIENT_CANCELLED, "cancelled")
            raise
        finally:
            self._in_flight -= 1
            if measurement is None:
                measurement = meter.fail(self._now_us(), ErrorKind.PROTOCOL, "internal error")
            on_done(measurement)
        return measurement

    async def _answer(
        self, request: UpstreamRequest, meter: ResponseMeter, sink: ResponseSink | None
    ) -> Measurement:
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            return meter.fail(self._now_us(), self.fail, f"scripted {self.fail.value}")
        meter.on_headers(self._now_us(), self.status)
        if sink is not None:
            await sink.on_headers(self.status, {"Content-Type": "text/event-stream"})
        default = GENERATE_CHUNKS if request.stream else GENERATE_JSON
        for chunk in self.chunks if self.chunks is not None else default:
            if sink is not None:
                await sink.on_bytes(chunk)
            meter.feed(self._now_us(), chunk)
        if sink is not None:
            await sink.on_end()
        return meter.finish(self._now_us())
