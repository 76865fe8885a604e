"""The server's listening site: ``LeanSite``, whose connections are ``LeanConnection``s.

``LeanSite`` listens on one address (``SO_REUSEPORT`` for a worker of ``serve --workers
N``) with ``proxy.lean.LeanConnection`` as the protocol of every accepted connection. It
holds what its connections share: the set of open ones and the request heads served
before (``heads``, by ``intake.head_key``).

Idle connections: every ``_SWEEP_S`` a sweep closes a keep-alive connection idle for
``IDLE_S``, and one whose request began arriving ``IDLE_S`` ago and is still not whole.
At shutdown ``stop`` stops listening and closes the idle connections; the busy ones close
when their answer ends, the drain cuts it (``lifecycle.mark_shutdown``), or ``close``
cuts what is left.
"""

from __future__ import annotations

import asyncio
from functools import partial

from specproxy.proxy.intake import KnownHead
from specproxy.proxy.lean import LeanConnection
from specproxy.proxy.state import ProxyState
from specproxy.runtime import spawn

IDLE_S = 3630.0  # an idle keep-alive connection is closed after this long (aiohttp's default)
_SWEEP_S = 60.0  # how often idle connections are looked for
GRACE_S = 1.0  # after the drain: how long an own route's answer (an admin call) may take


class LeanSite:
    """The listener and what its connections share."""

    __slots__ = (
        "_host",
        "_port",
        "_reuse_port",
        "_server",
        "_state",
        "_sweeper",
        "connections",
        "heads",
    )

    def __init__(self, state: ProxyState, *, host: str, port: int, reuse_port: bool) -> None:
        self._state = state
        self._host = host
        self._port = port
        self._reuse_port = reuse_port
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[LeanConnection] = set()
        self.heads: dict[bytes, KnownHead] = {}  # by ``head_key``

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) it listens on."""
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def start(self) -> None:
        """Listen (``OSError`` when the address cannot be had)."""
        loop = asyncio.get_running_loop()
        state = self._state
        factory = partial(LeanConnection, self, state, state.config.client_authorization)
        self._server = await loop.create_server(
            factory, self._host, self._port, reuse_address=True, reuse_port=self._reuse_port
        )
        self._sweeper = spawn(self._sweep(), name="idle-sweep")

    async def _sweep(self) -> None:
        """Close keep-alive connections idle for more than ``IDLE_S``."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(_SWEEP_S)
            limit = loop.time() - IDLE_S
            for conn in list(self.connections):
                conn.close_if_idle_since(limit)

    async def stop(self) -> None:
        """Stop listening; close the idle connections, the busy ones once their answer ends."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close_when_idle()

    async def close(self) -> None:
        """After the drain: give what is still answering ``GRACE_S``, then cut it."""
        busy = [c.task for c in self.connections if c.task is not None]
        if busy:  # (no request starts after ``stop``: each connection closes at its end)
            await asyncio.wait(busy, timeout=GRACE_S)
        for conn in list(self.connections):
            conn.cancel()
        if self._server is not None:
            await self._server.wait_closed()
