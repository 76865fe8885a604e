"""The head of a response the lean server (``proxy.lean``) writes by hand, as aiohttp would."""

from __future__ import annotations

import time
from email.utils import formatdate
from http import HTTPStatus

from aiohttp.http import SERVER_SOFTWARE
from multidict import CIMultiDict

_REASONS = {s.value: s.phrase for s in HTTPStatus}
_SERVER_LINE = f"Server: {SERVER_SOFTWARE}\r\n"
BODILESS = frozenset({204, 304})  # answers that never have a body (RFC 9112 section 6.3)


class _DateCache:
    """The ``Date`` header's value, formatted once a second."""

    __slots__ = ("_second", "_value")

    def __init__(self) -> None:
        self._second = -1
        self._value = ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = formatdate(now, usegmt=True)
        return self._value


_DATE = _DateCache()


def response_head(status: int, headers: CIMultiDict[str], framing: str) -> bytes:
    """An HTTP/1.1 response head: status line, ``headers``, then ``Date`` and ``Server`` where
    ``headers`` have none (as aiohttp adds them), then the ``framing`` lines."""
    parts = [f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"]
    parts.extend(f"{name}: {value}\r\n" for name, value in headers.items())
    if "Date" not in headers:
        parts.append(f"Date: {_DATE()}\r\n")
    if "Server" not in headers:
        parts.append(_SERVER_LINE)
    parts.append(framing)
    parts.append("\r\n")
    return "".join(parts).encode("utf-8", "surrogateescape")  # the upstream's bytes as read
