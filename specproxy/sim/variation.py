"""Server drift the simulator can add on purpose: block-level random effects and episodes.

Off by default. Two settings families, both multiplying every step's cost (prefill,
decode and verify) by a factor that depends only on the time since the server started:

* **Regimes** (``regime_sigma``, ``regime_s``): time is cut into stretches of
  ``regime_s`` seconds; each stretch draws its own factor ``exp(N(0, regime_sigma))``
  (median 1). Requests sent in one stretch share it, as requests in one block share a
  real server's state, so blocks differ by more than their requests' own noise.
* **Drift episodes** (``drift_every_s``, ``drift_slowdown``, ``drift_s``): starting after
  exponential gaps of mean ``drift_every_s`` seconds, the server runs ``1 +
  drift_slowdown`` times slower for ``drift_s`` seconds (a real candidate's verify step
  once went from 6 to 11 ms for tens of seconds while its baseline held steady).

Everything is drawn from ``seed``: the same seed gives the same factors and episodes
(``episodes`` lists them as Unix times, for whoever judges a report against them). A
median-1 regime factor leaves the population median of a per-pair ratio where it was, so
a simulated run's true ratio is the one without variation.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class VariationSettings:
    """See the module docstring; durations in seconds, ``drift_slowdown`` a fraction."""

    regime_sigma: float = 0.0
    regime_s: float = 2.0
    drift_every_s: float = 0.0
    drift_slowdown: float = 0.8
    drift_s: float = 10.0

    def __post_init__(self) -> None:
        for name in ("regime_sigma", "drift_every_s", "drift_slowdown"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must not be negative, got {getattr(self, name)}")
        for name in ("regime_s", "drift_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)}")

    @property
    def active(self) -> bool:
        return self.regime_sigma > 0 or self.drift_every_s > 0


class Variation:
    """The cost factor at each moment of one server's life (module docstring)."""

    def __init__(self, settings: VariationSettings, seed: int, origin_unix_s: float) -> None:
        self.settings = settings
        self.origin_unix_s = origin_unix_s
        self._seed = seed
        self._regimes: dict[int, float] = {}
        self._episodes: list[tuple[float, float]] = []  # seconds since the origin
        self._drift_rng = random.Random(f"drift:{seed}")
        self._scheduled_to = 0.0

    def factor(self, since_origin_s: float) -> float:
        """The multiplier of a step that starts ``since_origin_s`` after the origin."""
        s = self.settings
        value = 1.0
        if s.regime_sigma > 0:
            k = math.floor(max(0.0, since_origin_s) / s.regime_s)
            if k not in self._regimes:
                self._regimes[k] = math.exp(
                    random.Random(f"regime:{self._seed}:{k}").gauss(0.0, s.regime_sigma)
                )
            value *= self._regimes[k]
        if s.drift_every_s > 0 and self._in_episode(since_origin_s):
            value *= 1.0 + s.drift_slowdown
        return value

    def _schedule(self, until_s: float) -> None:
        s = self.settings
        while self._scheduled_to <= until_s:
            start = self._scheduled_to + self._drift_rng.expovariate(1.0 / s.drift_every_s)
            self._episodes.append((start, start + s.drift_s))
            self._scheduled_to = start + s.drift_s

    def _in_episode(self, t: float) -> bool:
        self._schedule(t)
        return any(start <= t < end for start, end in self._episodes)

    def episodes(self, horizon_s: float) -> list[tuple[float, float]]:
        """The drift episodes that start within ``horizon_s`` of the origin, as Unix times."""
        if self.settings.drift_every_s <= 0:
            return []
        self._schedule(horizon_s)
        return [
            (self.origin_unix_s + a, self.origin_unix_s + b)
            for a, b in self._episodes
            if a < horizon_s
        ]
