"""Which side answers a request, and which (if any) gets a shadow copy: pure decisions.

``passthrough``: the primary (or the forced side) only. ``mirror``: the primary (or the
forced side) answers and the other side gets a shadow copy. ``split``: the forced side,
else the sticky key's BLAKE2b hash in [0, 1) (one side in every replica, across restarts),
else a seedable random draw; a draw below ``split`` goes to the candidate, so ``split`` is
the candidate's share. No I/O, no clock: the only state is the draw's ``random.Random``.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from dataclasses import dataclass

from specproxy.core.records.model import Role, SendMode

_UNIT = float(1 << 64)


@dataclass(frozen=True, slots=True)
class Decision:
    """The side whose answer the client gets, and the (other) side that gets a shadow copy."""

    primary: Role
    shadow: Role | None = None


def sticky_user(body: Mapping[str, object]) -> str | None:
    """The body's ``user`` field as a sticky key (with ``sticky_user`` configured)."""
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
