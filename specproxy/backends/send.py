"""A measured send with nothing to relay to: the replayer's, through the transport seam.

``send`` opens one exchange on any backend (``Backend.open_exchange``): the request is
written as the proxy's hot path writes it, each read of the response is stamped and kept
by the Exchange, and the response is folded once at its end
(``backends.exchange.measure_exchange``, the proxy's fold too). One task wake-up per
response instead of one per read: at 2,000 requests/s on two cores this is what keeps the
replayer's sends on time. ``on_done`` is called exactly once, also when the send fails or
is cancelled, so every request sent yields exactly one record.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from multidict import CIMultiDict

from specproxy.backends.base import Backend, UpstreamRequest
from specproxy.backends.exchange import Exchange, UpstreamFailure, measure_exchange
from specproxy.core.records.model import ErrorKind, Measurement

OnHead = Callable[[int, CIMultiDict[str]], None]


async def send(
    backend: Backend,
    request: UpstreamRequest,
    *,
    on_done: Callable[[Measurement], None],
    keep_text: bool = False,
    on_head: OnHead | None = None,
) -> Measurement:
    """Send ``request`` to ``backend`` and measure its response; ``on_done`` gets the
    Measurement (once), ``on_head`` the answer's status and headers when they come in."""
    t0_ns = time.perf_counter_ns()
    ex: Exchange | None = None
    failure: tuple[ErrorKind, str] | None = None
    try:
        with backend.counted():
            ex = await backend.open_exchange(request, t0_ns)
            if on_head is not None:
                on_head(ex.status, ex.headers)
            await ex.ended
    except UpstreamFailure as exc:
        failure = (exc.kind, exc.message)
    except asyncio.CancelledError:
        failure = (ErrorKind.CLIENT_CANCELLED, "request cancelled")
        raise
    except BaseException:  # a bug: still one record, then the error
        failure = (ErrorKind.PROTOCOL, "internal error")
        raise
    finally:
        if ex is not None and failure is not None:
            ex.abort()
        measurement = measure_exchange(
            request.route, request.stream, ex, failure, t0_ns, keep_text=keep_text
        )
        on_done(measurement)
    return measurement
