"""The lean server's listening site: ``LeanSite``, whose connections are ``LeanConnection``s.

``LeanSite`` is aiohttp's ``web.TCPSite`` with ``proxy.lean.LeanConnection`` as the
protocol of every accepted connection (registered with the runner, so ``runner.cleanup``
stops it first, as it stops any site). It holds what its connections share: the set of
open ones and the request heads served before (``heads``, by ``intake.head_key``).

Idle connections: every ``_SWEEP_S`` a sweep closes a keep-alive connection idle for
``IDLE_S``, as aiohttp closes its own, and one whose request began arriving ``IDLE_S`` ago
and is still not whole. At shutdown ``stop`` stops listening and closes the idle
connections; the busy ones close when their answer ends or the drain cuts it.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from aiohttp import web

from specproxy.proxy.intake import KnownHead
from specproxy.proxy.lean import LeanConnection
from specproxy.proxy.state import ProxyState
from specproxy.runtime import spawn

LEAN_ENV = "SPECPROXY_LEAN"
IDLE_S = 3630.0  # an idle keep-alive connection is closed after this long (aiohttp's default)
_SWEEP_S = 60.0  # how often idle connections are looked for


class LeanSite(web.TCPSite):
    """``web.TCPSite`` with ``LeanConnection`` as the protocol; what its connections share."""

    __slots__ = ("_state", "_sweeper", "connections", "heads")

    def __init__(self, runner: web.AppRunner, state: ProxyState, **kwargs: Any) -> None:
        super().__init__(runner, **kwargs)
        self._state = state
        self._sweeper: asyncio.Task[None] | None = None
        self.connections: set[LeanConnection] = set()
        self.heads: dict[bytes, KnownHead] = {}  # by ``head_key``

    async def start(self) -> None:
        """Listen, like ``TCPSite.start``, with ``LeanConnection`` as the protocol."""
        self._runner._reg_site(self)
        loop = asyncio.get_running_loop()
        aiohttp_server = self._runner.server
        assert aiohttp_server is not None
        state = self._state
        # SPECPROXY_LEAN=0: every request goes to aiohttp's server (a comparison, a fallback)
        lean = state.relay is not None and os.environ.get(LEAN_ENV, "1") != "0"
        expected = state.config.client_authorization

        def factory() -> LeanConnection:
            return LeanConnection(self, state, aiohttp_server, lean=lean, expected_auth=expected)

        self._server = await loop.create_server(
            factory,
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        self._bound_port = self._server.sockets[0].getsockname()[1]
        self._sweeper = spawn(self._sweep(), name="lean-idle-sweep")

    async def _sweep(self) -> None:
        """Close keep-alive connections idle for more than ``IDLE_S``, as aiohttp does."""
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
        await super().stop()
        for conn in list(self.connections):
            conn.close_when_idle()
