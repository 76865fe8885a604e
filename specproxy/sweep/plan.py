"""The load ladder's order and stopping rule (pure planning; no I/O).

**Order (drift cancelling).** The ladder is walked in *rounds*: round 0 goes up the
levels, round 1 down, round 2 up again, and so on. Each round adds one *batch* to every
level still open, so a level's pairs are spread over passes in both directions and a
slow drift of the servers (warming caches, thermal state) lands on low and high loads
alike instead of on one end of the ladder.

**Batch.** One alternate-mode replay run of two whole blocks (one ABBA unit: a block sent
to the baseline then the candidate, the next to the candidate then the baseline), so each
batch is balanced on its own and adds two *block pairs*, the unit of replication the
intervals rest on (``core.compare.blocks``). A concurrency level ``n`` uses blocks of
``max(block_size, LEVEL_BLOCKS * n)`` requests whose last ``n`` are a *cool-down*: sent,
so that the block keeps ``n`` in flight until its counted requests have finished, but
flagged like warm-up requests and not counted (without it the last ``n`` of each block
run while the block drains, below the level's load, and pull the ratio towards the
lower load). So a low level gets small blocks and many of them, a high level blocks of
several waves of ``n``. A rate level uses ``block_size`` and no cool-down.

**Stopping rule.** After every batch the level's report is rebuilt from all its batches.
A level needs ``MIN_UNITS`` block pairs outside any drift episode before it may stop
(however many pairs that takes: at high load, more than ``max_pairs``; at most
``MAX_UNITS`` block pairs in all); from then on it stops once its verdict is decided
(``faster``, ``slower`` or ``no_difference``) or once it has ``max_pairs`` pairs. A batch
that added no pair (the trace ran dry, every request refused) also closes it. Checking
after each batch is a repeated look at the data: a level that stops early is one whose
interval already cleared the margin, and its interval is the report's ordinary 95%
interval (not corrected for the repeated looks; see the README).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specproxy.core.compare.blocks import MIN_UNITS
from specproxy.sweep.config import LEVEL_BLOCKS

MAX_UNITS = 3 * MIN_UNITS
"""A level stops at this many block pairs whatever else holds (drift that never ends)."""

ORDER = "rounds alternate up and down the ladder; each round adds one batch to each open level"


def block_for(kind: str, level: float, block_size: int) -> int:
    """Requests per alternate block at ``level`` (see the module docstring)."""
    if kind == "concurrency":
        return max(block_size, LEVEL_BLOCKS * math.ceil(level))
    return block_size


def round_order(levels: Sequence[float], round_index: int) -> list[float]:
    """The levels of round ``round_index``: ascending on even rounds, descending on odd."""
    ordered = sorted(levels)
    return ordered if round_index % 2 == 0 else ordered[::-1]


@dataclass(frozen=True, slots=True)
class LevelState:
    """Where one level stands: pairs so far, batches run, and why it closed (None: open)."""

    level: float
    pairs: int = 0
    batches: int = 0
    closed: str | None = None
    units: int = 0

    def after_batch(
        self,
        pairs: int,
        verdict: str,
        max_pairs: int,
        units: int | None = None,
        clean_units: int | None = None,
    ) -> LevelState:
        """The state once a batch has run and the level's report says ``pairs``/``verdict``
        over ``units`` block pairs, ``clean_units`` of them outside any drift episode
        (module docstring)."""
        units = self.units + 2 if units is None else units
        clean = units if clean_units is None else clean_units
        closed = None
        if pairs <= self.pairs:
            closed = "the last batch added no pair"
        elif clean >= MIN_UNITS and verdict in ("faster", "slower", "no_difference"):
            closed = f"verdict decided: {verdict}"
        elif clean >= MIN_UNITS and pairs >= max_pairs:
            closed = f"reached {max_pairs} pairs"
        elif units >= MAX_UNITS:
            closed = f"reached {MAX_UNITS} block pairs, {clean} outside drift"
        return LevelState(self.level, pairs, self.batches + 1, closed, units)

    def stopped(self, reason: str) -> LevelState:
        return LevelState(self.level, self.pairs, self.batches, self.closed or reason, self.units)


def cooldown_for(kind: str, level: float) -> int:
    """Requests at the end of each block sent but not counted: ``n`` at concurrency ``n``."""
    return math.ceil(level) if kind == "concurrency" else 0


def batch_size(block: int) -> int:
    """Trace requests one batch sends: two whole blocks (module docstring)."""
    return 2 * block
