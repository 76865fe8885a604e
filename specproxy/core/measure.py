"""Fold one upstream response (headers, body bytes, end or failure) into a Measurement.

Sans-I/O: the caller stamps every input with microseconds since the request was sent
(its own monotonic clock) and this module never reads a clock. Streaming bodies go
through ``core.sse``; each event is interpreted by ``core.protocol`` for its route;
``core.timing`` turns arrival times into TTFT / chunk gaps / TPOT / E2E; and
``core.acceptance`` picks the best acceptance source the response offers.
"""

from __future__ import annotations

from specproxy.core.model import ErrorKind, Measurement, Route
from specproxy.core.sse import SseEvent


class ResponseMeter:
    """Measures one response. Call order: ``on_headers``, ``feed``*, then ``finish`` or ``fail``.

    - ``feed`` returns the SSE events completed by the bytes (empty list for a
      non-streaming body, which is buffered and parsed at ``finish``).
    - ``finish`` classifies: HTTP status >= 400 -> http_4xx/http_5xx with the server's
      error message; a stream without ``[DONE]`` -> stream_truncated; an in-stream
      ``{"error": ...}`` event -> stream_error; finish_reason "abort" -> aborted.
    - ``fail`` records a transport failure or cancellation, keeping what arrived so far.
    - ``keep_text`` keeps the output text on the measurement (off by default: only its
      SHA-256 is kept).
    """

    def __init__(self, route: Route, stream: bool, *, keep_text: bool = False) -> None:
        self.route = route
        self.stream = stream
        self.keep_text = keep_text

    def on_headers(self, t_us: int, status: int) -> None:
        raise NotImplementedError

    def feed(self, t_us: int, data: bytes) -> list[SseEvent]:
        raise NotImplementedError

    def finish(self, t_us: int) -> Measurement:
        raise NotImplementedError

    def fail(self, t_us: int, kind: ErrorKind, message: str) -> Measurement:
        raise NotImplementedError
