"""Which side serves a request and which side (if any) gets a shadow copy
(``Decision``), and the request so decided (``ProxiedRequest``).

Pure decisions: no I/O, no clock. The only state is a ``random.Random`` (seedable, so a
split run can be reproduced). Sticky keys are hashed with BLAKE2b into [0, 1), so the
same key lands on the same side in every proxy replica and across restarts.

Rules:

- ``passthrough``: the primary (or the forced side) only.
- ``mirror``: the primary (or the forced side) serves the client; the other side gets
  a shadow copy.
- ``split``: the forced side if forced; else the sticky key's hash; else a random draw.
  A draw below ``split`` goes to the candidate, so ``split`` is the candidate's share.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specproxy.backends.base import EventFilter, UpstreamRequest
from specproxy.core.protocol.headers import SIDE_HEADER
from specproxy.core.records.model import Role, Route, SendMode

_UNIT = float(1 << 64)


@dataclass(frozen=True, slots=True)
class Decision:
    """The side whose answer the client gets, and the side that receives a shadow copy."""

    primary: Role
    shadow: Role | None = None

    def __post_init__(self) -> None:
        if self.shadow is self.primary:
            raise ValueError("the shadow must be the other side")


def parse_forced_side(value: str | None) -> Role | None:
    """The side named by the ``x-specproxy-side`` header; ValueError naming bad values."""
    if value is None:
        return None
    try:
        return Role(value.strip().lower())
    except ValueError:
        raise ValueError(
            f"header {SIDE_HEADER} must be 'baseline' or 'candidate', got {value!r}"
        ) from None


def sticky_key(
    headers: Mapping[str, str],
    body: Mapping[str, object],
    *,
    header: str | None,
    use_user: bool,
) -> str | None:
    """The value that pins a client to one side: a header, or the body's ``user`` field."""
    if header is not None:
        return headers.get(header)
    return sticky_user(body) if use_user else None


def sticky_user(body: Mapping[str, object]) -> str | None:
    """The body's ``user`` field as a sticky key (``sticky_key`` with ``use_user``)."""
    user = body.get("user")
    return user if isinstance(user, str) and user else None


def stable_unit(key: str) -> float:
    """A uniform-looking number in [0, 1) that depends only on ``key``."""
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _UNIT


class SidePolicy:
    """Decides, per request, the primary side and the shadow side (see the module docstring)."""

    __slots__ = ("_decisions", "_mode", "_primary", "_rng", "_split")

    def __init__(
        self, mode: SendMode, primary: Role, split: float, *, seed: int | None = None
    ) -> None:
        if mode not in (SendMode.MIRROR, SendMode.SPLIT, SendMode.PASSTHROUGH):
            raise ValueError(f"the proxy does not support mode {mode}")
        if not 0.0 <= split <= 1.0:
            raise ValueError(f"split must be between 0 and 1, got {split}")
        self._mode = mode
        self._primary = primary
        self._split = split
        self._rng = random.Random(seed)
        # every decision there is, made once (they are values): by primary side
        mirror = mode is SendMode.MIRROR
        self._decisions = {r: Decision(r, r.other if mirror else None) for r in Role}

    def decide(self, *, forced: Role | None = None, sticky: str | None = None) -> Decision:
        """The decision for one request."""
        decisions = self._decisions
        if self._mode is SendMode.SPLIT:
            if forced is not None:
                return decisions[forced]
            draw = stable_unit(sticky) if sticky is not None else self._rng.random()
            return decisions[Role.CANDIDATE if draw < self._split else Role.BASELINE]
        return decisions[forced if forced is not None else self._primary]


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    """One client request the proxy relays: parsed, its sides decided, ready to send.

    (What goes upstream is ``upstream``; ``proxy.relay`` sends it.)"""

    request_id: str
    decision: Decision
    upstream: UpstreamRequest
    drop_event: EventFilter | None = None
    warmup: bool = False  # the client marked it (header x-specproxy-warmup): kept out of stats
    arrived_us: int = 0  # arrival at the proxy, on the proxy's clock (for `--record`)
    client_body: dict[str, Any] | None = None  # as the client sent it (kept for `--record`)
    category: str | None = None  # the prompt's category (header x-specproxy-category)

    @property
    def route(self) -> Route:
        return self.upstream.route

    @property
    def stream(self) -> bool:
        return self.upstream.stream
