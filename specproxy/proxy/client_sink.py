"""The client's side of a relayed response: the primary's bytes written as they arrive.

``ClientSink`` is the ``backends.base.ResponseSink`` the relay hands the primary's
backend: headers as soon as they arrive (with ``x-specproxy-request-id`` and
``x-specproxy-side`` added), then every upstream read with one ``await resp.write``,
nothing buffered. Per-chunk cost is one method call into ``resp.write``.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web
from multidict import CIMultiDict

from specproxy.backends.base import FRAMING_HEADERS
from specproxy.core.headers import REQUEST_ID_HEADER, SIDE_HEADER
from specproxy.core.model import Role

_DONE_TAIL = b"data: [DONE]\n\n"
_NOT_COPIED = FRAMING_HEADERS | {"date", "trailer", "proxy-authenticate"}


class _HeadersWithBody(web.StreamResponse):
    """A response whose headers leave with the first body bytes: one write instead of two.

    Used when the upstream declared a Content-Length (a unary answer, whose body follows
    its headers at once); streams keep aiohttp's default of sending headers immediately.
    """

    _send_headers_immediately = False


class ClientSink:
    """Writes the primary's response to the client's ``web.StreamResponse`` as it arrives.

    ``Content-Length`` is passed on when the backend passes it on (it removes it when
    events may be withheld); otherwise aiohttp streams with chunked encoding.

    An SSE read that ends with ``data: [DONE]`` (the last event of every SGLang and
    OpenAI stream) is written together with the end of the response, saving one
    write per stream. Bytes an upstream might send after ``[DONE]`` are not relayed
    (counted in ``bytes_after_done``).
    """

    __slots__ = (
        "_request",
        "_request_id",
        "_side",
        "_sse",
        "bytes_after_done",
        "ended",
        "response",
    )

    def __init__(self, request: web.Request, request_id: str, side: Role) -> None:
        self._request = request
        self._request_id = request_id
        self._side = side
        self._sse = False
        self.response: web.StreamResponse | None = None
        self.ended = False
        self.bytes_after_done = 0

    async def on_headers(self, status: int, headers: Mapping[str, str]) -> None:
        out: CIMultiDict[str] = CIMultiDict()
        for name, value in headers.items():
            if name.lower() not in _NOT_COPIED:
                out.add(name, value)
        out[REQUEST_ID_HEADER] = self._request_id
        out[SIDE_HEADER] = self._side.value
        length = headers.get("Content-Length")
        if length is not None and length.isdigit():
            resp: web.StreamResponse = _HeadersWithBody(status=status, headers=out)
            resp.content_length = int(length)
        else:
            resp = web.StreamResponse(status=status, headers=out)
        self._sse = headers.get("Content-Type", "").startswith("text/event-stream")
        self.response = resp
        await resp.prepare(self._request)

    async def on_bytes(self, data: bytes) -> None:
        if self.ended:
            self.bytes_after_done += len(data)
            return
        resp: web.StreamResponse = self.response  # type: ignore[assignment]  # headers came first
        if self._sse and data.endswith(_DONE_TAIL):
            self.ended = True
            await resp.write_eof(data)
        else:
            await resp.write(data)

    async def on_end(self) -> None:
        if self.response is not None and not self.ended:
            await self.response.write_eof()
        self.ended = True
