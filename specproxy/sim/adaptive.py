"""The simulated ``--speculative-adaptive``: steps chosen at runtime from observed acceptance.

Follows SGLang's EMA policy (``AdaptiveSpeculativeParams``): after every verify step the
batch's mean accepted drafts per request feeds an exponential moving average (``alpha`` 0.2,
starting at ``steps - 1``); after ``warmup`` (10) steps, every ``interval`` (5) steps the
steps move down the candidate list while the average is at or below ``previous - 0.5 +
down_hysteresis`` (-0.25), else up while it is above ``current - 0.5 + up_hysteresis`` (0).
A starting step count that is not a candidate snaps to the middle candidate. The draft tokens
follow the steps (``steps + 1``: adaptive mode runs at topk 1).

What the simulator leaves out: SGLang 0.5.16 keeps one such tracker per running-batch-size
range, each with its own candidates and hysteresis from ``--speculative-adaptive-config`` or
its defaults; the simulator runs one tracker over ``CANDIDATE_STEPS`` (SGLang's documented
default candidates) for every batch size, so it adapts to acceptance, not to load. SGLang
runs adaptive mode only for EAGLE/EAGLE3 at topk 1 and otherwise keeps the static settings;
``sim.config`` does the same. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

CANDIDATE_STEPS = (1, 3, 7)


@dataclass(slots=True)
class AdaptiveSteps:
    """The EMA step controller; ``steps`` is the count the next verify step uses."""

    initial: int
    candidates: tuple[int, ...] = CANDIDATE_STEPS
    alpha: float = 0.2
    interval: int = 5
    warmup: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0
    steps: int = field(init=False)
    ema: float = field(init=False)
    batches: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.candidates = tuple(sorted(set(self.candidates)))
        middle = self.candidates[len(self.candidates) // 2]
        self.steps = self.initial if self.initial in self.candidates else middle
        self.ema = float(self.steps - 1)

    def update(self, kept: Sequence[int]) -> None:
        """One verify step's accepted drafts per request (module docstring)."""
        if not kept:
            return
        self.ema = (1 - self.alpha) * self.ema + self.alpha * sum(kept) / len(kept)
        self.batches += 1
        if self.batches > self.warmup and (self.batches - self.warmup) % self.interval == 0:
            self._recompute()

    def _recompute(self) -> None:
        i = self.candidates.index(self.steps)
        start = i
        while i > 0 and self.ema <= self.candidates[i - 1] - 0.5 + self.down_hysteresis:
            i -= 1
        if i == start:
            while (
                i < len(self.candidates) - 1
                and self.ema > self.candidates[i] - 0.5 + self.up_hysteresis
            ):
                i += 1
        self.steps = self.candidates[i]
