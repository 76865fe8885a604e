"""Which side gets each trace request, and in which sending windows (pure planning).

- ``mirror``: one window; every request goes to both sides at the same instant and the
  two records share a ``pair_id``.
- ``split``: one window; each request goes to one side, the candidate with probability
  ``split`` drawn from ``random.Random(seed)`` in trace order (reproducible).
- ``passthrough``: one window, one side.
- ``alternate``: the trace is cut into blocks of ``block_size`` requests; each block is
  sent to one side, then — after every request of it has completed — to the other, in
  ABBA order (block 0: baseline then candidate, block 1: candidate then baseline, ...).
  Each window's schedule restarts at the window's start (offsets relative to the
  block's first request), so the two sides never share the GPU and slow drift cancels.
  The two records of one trace request carry the same ``pair_id``.

A ``Job`` is what one schedule item sends; it counts as one item against a concurrency
limit however many sides it goes to (a mirrored request is in flight until both
sides have answered).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specproxy.core.records.model import Role, SendMode


@dataclass(frozen=True, slots=True)
class Job:
    """One schedule item: trace record ``record_index`` sent to ``sides``."""

    record_index: int
    sides: tuple[Role, ...]
    pair_id: str | None
    warmup: bool
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.sides or len(set(self.sides)) != len(self.sides):
            raise ValueError("a job goes to one or two distinct sides")


@dataclass(frozen=True, slots=True)
class Window:
    """A stretch of sending with one schedule: open loop (``offsets_us``) or closed loop (None)."""

    jobs: tuple[Job, ...]
    offsets_us: tuple[int, ...] | None
    label: str

    def __post_init__(self) -> None:
        if self.offsets_us is not None and len(self.offsets_us) != len(self.jobs):
            raise ValueError("one offset per job")

    @property
    def sides(self) -> tuple[Role, ...]:
        seen: dict[Role, None] = {}
        for job in self.jobs:
            for side in job.sides:
                seen[side] = None
        return tuple(seen)


def abba_order(block: int) -> tuple[Role, Role]:
    """The side order of block ``block``: baseline first on even blocks, candidate first on odd."""
    if block % 2 == 0:
        return (Role.BASELINE, Role.CANDIDATE)
    return (Role.CANDIDATE, Role.BASELINE)


def split_sides(count: int, share_candidate: float, seed: int) -> list[Role]:
    """The side of each of ``count`` requests in split mode (reproducible from ``seed``)."""
    if not 0.0 <= share_candidate <= 1.0:
        raise ValueError(f"split share must be between 0 and 1, got {share_candidate}")
    rng = random.Random(seed)
    return [
        Role.CANDIDATE if rng.random() < share_candidate else Role.BASELINE for _ in range(count)
    ]


def _relative(offsets: Sequence[int] | None, lo: int, hi: int) -> tuple[int, ...] | None:
    if offsets is None:
        return None
    base = offsets[lo]
    return tuple(o - base for o in offsets[lo:hi])


def plan_windows(
    mode: SendMode,
    count: int,
    offsets_us: Sequence[int] | None,
    *,
    warmup: int = 0,
    side: Role = Role.BASELINE,
    share_candidate: float = 0.5,
    seed: int = 0,
    block_size: int = 16,
    cooldown: int = 0,
) -> list[Window]:
    """The windows that send ``count`` trace requests in ``mode`` (see the module docstring).

    ``cooldown`` (alternate mode): the last ``cooldown`` requests of each block are sent but
    flagged like warm-up requests (not counted), so that at concurrency n with
    ``cooldown=n`` every counted request runs while the block still holds n in flight
    (otherwise the last n of a block finish as the block drains).
    """
    if offsets_us is not None and len(offsets_us) != count:
        raise ValueError("one offset per trace request")
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    if not 0 <= cooldown < block_size:
        raise ValueError("cooldown must be >= 0 and smaller than block_size")
    offsets = tuple(offsets_us) if offsets_us is not None else None
    if mode is SendMode.MIRROR:
        jobs = tuple(
            Job(i, (Role.BASELINE, Role.CANDIDATE), f"p{i}", i < warmup) for i in range(count)
        )
        return [Window(jobs, offsets, "mirror")]
    if mode is SendMode.SPLIT:
        sides = split_sides(count, share_candidate, seed)
        jobs = tuple(Job(i, (sides[i],), None, i < warmup) for i in range(count))
        return [Window(jobs, offsets, "split")]
    if mode is SendMode.PASSTHROUGH:
        jobs = tuple(Job(i, (side,), None, i < warmup) for i in range(count))
        return [Window(jobs, offsets, f"passthrough-{side.value}")]
    windows: list[Window] = []
    for block, lo in enumerate(range(0, count, block_size)):
        hi = min(count, lo + block_size)
        for phase, role in enumerate(abba_order(block)):
            labels = {"block": str(block), "phase": str(phase)}
            jobs = tuple(
                Job(i, (role,), f"p{i}", i < warmup or i >= hi - cooldown, labels)
                for i in range(lo, hi)
            )
            windows.append(Window(jobs, _relative(offsets, lo, hi), f"block{block}-{role.value}"))
    return windows
