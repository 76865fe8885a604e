"""Which unit of replication each pair belongs to (pure; ``core.compare.blocks`` says
why, and what rests on the units): a block pair in alternate mode, else a segment of at
least ``SEGMENT_PAIRS`` consecutive pairs of one experiment (at most ``MAX_SEGMENTS``)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

SEGMENT_PAIRS = 10
MAX_SEGMENTS = 20
UNIT_BLOCK = "block pair"
UNIT_SEGMENT = "segment"
UNIT_MIXED = "unit"


@dataclass(frozen=True, slots=True)
class Units:
    """The unit of each pair (``of``, in pair order: units numbered in time order) and the
    unit's name and kind; see the module docstring."""

    kind: str
    of: tuple[int, ...]
    labels: tuple[str, ...]

    @property
    def count(self) -> int:
        return len(self.labels)


def assign_units(experiments: Sequence[str], blocks: Sequence[int], sent: Sequence[float]) -> Units:
    """The unit of each pair from its experiment, its block label (``< 0``: none) and its
    earliest send time (Unix s), all in pair order."""
    members_of: dict[tuple[str, str, int], list[int]] = {}
    unblocked: dict[str, list[int]] = {}
    if len(set(experiments)) == 1 and len(blocks) == len(experiments) and max(blocks) < 0:
        unblocked[experiments[0]] = list(range(len(blocks)))  # the loop's result, at C speed
    else:
        for i, (experiment, block) in enumerate(zip(experiments, blocks, strict=True)):
            if block < 0:
                unblocked.setdefault(experiment, []).append(i)
            else:
                members_of.setdefault((experiment, "b", block), []).append(i)
    for experiment, members in unblocked.items():
        members.sort(key=sent.__getitem__)
        count, size = max(1, min(MAX_SEGMENTS, len(members) // SEGMENT_PAIRS)), len(members)
        for seg in range(count):  # the ranks r with r * count // size == seg
            lo, hi = -(-seg * size // count), -(-(seg + 1) * size // count)
            members_of[(experiment, "s", seg)] = members[lo:hi]
    first = {key: min(map(sent.__getitem__, m)) for key, m in members_of.items()}
    order = sorted(first, key=lambda k: (first[k], k))
    ids = [0] * len(blocks)
    for position, key in enumerate(order):
        for i in members_of[key]:
            ids[i] = position
    kind = {"b": UNIT_BLOCK, "s": UNIT_SEGMENT}.get("".join({k[1] for k in order}), UNIT_MIXED)
    labels = tuple(f"{'block' if k[1] == 'b' else 'segment'} {k[2]} of {k[0][:12]}" for k in order)
    return Units(kind, tuple(ids), labels)


def unit_groups(
    values: Sequence[float | None], units: Units, skip: frozenset[int]
) -> list[list[float]]:
    """Each unit's values, ascending (empty for a unit in ``skip``)."""
    if len(values) != len(units.of):
        raise ValueError("one value per pair")
    groups = [
        [] if unit in skip else [v for v in map(values.__getitem__, members) if v is not None]
        for unit, members in enumerate(_members(units))
    ]
    for g in groups:
        g.sort()
    return groups


@functools.lru_cache(maxsize=4)  # the few figures asked of one ``units`` share it
def _members(units: Units) -> list[list[int]]:
    members: list[list[int]] = [[] for _ in range(units.count)]  # the pairs of each unit
    for i, unit in enumerate(units.of):
        members[unit].append(i)
    return members
