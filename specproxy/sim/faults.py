"""Fault injection: which generation requests fail, stall or are cut off, and where.

Decisions come from one generator seeded with the server's ``seed`` and consumed once
per generation request in arrival order, so a sequential test sees the same faults
on every run while identical request bodies can still fare differently. Positions
are emission indexes (stream events carrying tokens): a failure or truncation
happens before that event is written, a stall pauses before it. A non-streaming
request that fails gets HTTP 500; stalls and truncation affect streams only.
Pure: the app performs the I/O.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """What happens to one request; positions are emission indexes (None = no fault)."""

    fail_at: int | None = None
    stall_at: int | None = None
    truncate_at: int | None = None


@dataclass(frozen=True, slots=True)
class FaultRates:
    """Probabilities per request, each in [0, 1]."""

    fail_rate: float = 0.0
    stall_rate: float = 0.0
    truncate_rate: float = 0.0

    def __post_init__(self) -> None:
        for name in ("fail_rate", "stall_rate", "truncate_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1]")

    @property
    def any(self) -> bool:
        return self.fail_rate > 0 or self.stall_rate > 0 or self.truncate_rate > 0


class FaultInjector:
    """Draws a ``FaultPlan`` per request from one seeded generator."""

    def __init__(self, rates: FaultRates, seed: int) -> None:
        self._rates = rates
        self._rng = random.Random(f"faults:{seed}")

    def plan(self, expected_emissions: int) -> FaultPlan:
        """The plan for the next request, expected to stream ``expected_emissions`` events."""
        if not self._rates.any:
            return FaultPlan()
        rng = self._rng
        last = max(0, expected_emissions - 1)
        draws = [rng.random() for _ in range(3)]
        positions = [rng.randint(0, last) for _ in range(3)]
        truncate_floor = min(1, last)
        return FaultPlan(
            fail_at=positions[0] if draws[0] < self._rates.fail_rate else None,
            stall_at=max(1, positions[1]) if draws[1] < self._rates.stall_rate else None,
            truncate_at=max(truncate_floor, positions[2])
            if draws[2] < self._rates.truncate_rate
            else None,
        )
