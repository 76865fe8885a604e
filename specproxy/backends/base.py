"""The backend contract the proxy and the replayer rely on.

A backend reaches one model server: it opens exchanges (``open_exchange``, the
transport seam of ``backends.exchange``) and reads the server's info. What an exchange
yields is measured once, at its end, by whoever opened it (``backends.send`` for the
replayer, ``proxy.relay`` for the proxy): failures (refused connection, timeout, HTTP
error, truncated stream, client gone, cancellation) become Measurements with an
ErrorKind, exactly one per request sent, also when the sending task is cancelled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

from specproxy.core.records.model import Role, Route

if TYPE_CHECKING:
    from specproxy.backends.exchange import Exchange


class BackendKind(StrEnum):
    """`sglang` servers expose server info and meta_info; `openai` is any other compatible server."""

    SGLANG = "sglang"
    OPENAI = "openai"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Deadlines in seconds: connect, first response byte, gap between body reads, whole request."""

    connect_s: float = 5.0
    first_byte_s: float = 300.0
    idle_s: float = 120.0
    total_s: float = 1800.0

    def __post_init__(self) -> None:
        for name in ("connect_s", "first_byte_s", "idle_s", "total_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """One upstream server: base URL (no trailing slash), role, kind, optional API key.

    ``role`` is None for a server read that is neither side of a pair (a proxy's status,
    a launched server's health).
    """

    url: str
    role: Role | None
    kind: BackendKind = BackendKind.SGLANG
    api_key: str | None = field(default=None, repr=False)
    timeouts: Timeouts = Timeouts()
    max_connections: int = 1024

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"backend URL must start with http:// or https://, got {self.url!r}")
        if self.url.endswith("/"):
            object.__setattr__(self, "url", self.url.rstrip("/"))
        if self.max_connections < 1:
            raise ValueError("max_connections must be >= 1")


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """Exactly what to send: the route, the JSON body bytes, extra headers, and whether it streams.

    ``headers`` are sent as given: end-to-end headers only (none of ``FRAMING_HEADERS``,
    ``core.protocol.headers``, no ``Host``); the proxy strips those from its clients'
    headers before building one.
    """

    route: Route
    body: bytes
    stream: bool
    headers: Mapping[str, str] = field(default_factory=dict)


class InfoReader(Protocol):
    """One-shot reads of a server (health, server info, metrics): nothing is recorded.

    Transport failures raise ``BackendUnreachable`` / ``BackendTimeout``; any HTTP status
    is returned. ``api_key`` is sent only when the spec has none (the proxy relays its
    client's key that way); ``post_json`` with ``obj`` None sends no body.
    """

    @property
    def spec(self) -> BackendSpec: ...

    async def get(
        self, path: str, *, timeout_s: float = 10.0, api_key: str | None = None
    ) -> tuple[int, bytes]: ...

    async def post_json(
        self, path: str, obj: Any, *, timeout_s: float = 60.0
    ) -> tuple[int, bytes]: ...

    async def call(
        self,
        method: str,
        path: str,
        obj: Any = None,
        *,
        timeout_s: float = 60.0,
        api_key: str | None = None,
    ) -> tuple[int, bytes]: ...


class Backend(InfoReader, Protocol):
    """What the proxy and replayer need from a backend: one per upstream server, one
    session each, opened by ``start`` and closed by ``close``."""

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet measured."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def counted(self) -> contextlib.AbstractContextManager[None]:
        """Counts one request in ``in_flight`` for the block's duration."""
        ...

    def begin_exchange(self, request: UpstreamRequest, t0_ns: int) -> Exchange | None:
        """Write ``request`` in this call when that can be done without waiting (an idle
        pooled connection); None otherwise. Hand the Exchange to ``open_exchange``."""
        ...

    async def open_exchange(
        self,
        request: UpstreamRequest,
        t0_ns: int,
        on_sent: Callable[[], object] | None = None,
        begun: Exchange | None = None,
    ) -> Exchange:
        """The transport seam (``backends.exchange``): write ``request`` (unless ``begun``
        has), call ``on_sent``, and return its Exchange once the answer's head is in.
        Raises ``UpstreamFailure``; cancelled, it drops the connection."""
        ...
