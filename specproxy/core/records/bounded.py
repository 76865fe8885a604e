"""Running samples and time coverage whose memory can be bounded: the storage of ``core.records.tally``.

Pure. Two pieces, each exact until told to bound itself:

- ``Sample`` keeps integer values (microseconds) in a compact array, so percentiles are
  exact nearest-rank values. A ``bounded`` sample also feeds a ``LatencyHistogram``
  (1 us .. 1 hour, 3 significant digits) from the start, a batch of ``PENDING_LIMIT``
  values at a time (``record_many``: about a microsecond per value, no pause), so that
  ``to_histogram()`` only frees the array. From then on memory is constant, and a rank's
  value is its bucket's highest equivalent value, never above the exact maximum (which
  is always kept). A negative value is counted as 0 in a histogram (it has no negative
  buckets). An unbounded sample moves its values over in one go when asked.
- ``Coverage`` is the union of closed intervals ``[start, end]``, merged as they come into
  a sorted list of disjoint intervals (two arrays), so its length is exactly what sorting
  every interval and sweeping would give, summed in the same order. ``bound(limit)``
  caps the list: past ``limit`` intervals the older half is folded into a settled total,
  and an interval that later arrives starting before the folded part (the horizon) counts
  only from the horizon on. Records arrive in completion order, so that needs a request
  still open across ``limit / 2`` idle gaps; the length it loses is at most its own.

``core.records.tally.build_side_summary`` reads values through ``Ranked``: a ``Sample``, or a
``SortedSample`` (values already in order, as the report's column pass holds them).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from specproxy.core.measurement.histogram import LatencyHistogram

PENDING_LIMIT = 1024
"""Values a histogram ``Sample`` buffers before adding them in one batch."""


class Sample:
    """Integer values; exact (an array) until ``to_histogram()``, then a histogram."""

    __slots__ = ("_exact", "_hist", "_max", "_pending", "count")

    def __init__(self, *, bounded: bool = False) -> None:
        self._exact: array[int] | None = array("q")
        self._hist = LatencyHistogram() if bounded else None
        self._pending = array("q")
        self._max: int | None = None  # kept once a histogram
        self.count = 0

    @property
    def exact(self) -> bool:
        return self._exact is not None

    @property
    def stored(self) -> int:
        """Values held one by one (the array, and at most ``PENDING_LIMIT`` waiting)."""
        return len(self._exact or ()) + len(self._pending)

    @property
    def max(self) -> int | None:
        """The largest value (exact in both forms); None when empty."""
        if self._exact is not None:
            return max(self._exact) if self._exact else None
        return self._max

    def add(self, value: int) -> None:
        self.count += 1
        exact = self._exact
        if exact is not None:
            exact.append(value)
            if self._hist is None:
                return
        elif self._max is None or value > self._max:
            self._max = value
        pending = self._pending
        pending.append(value)
        if len(pending) >= PENDING_LIMIT:
            self._flush()

    def _flush(self) -> None:
        assert self._hist is not None
        if self._pending:
            self._hist.record_many(Counter(max(v, 0) for v in self._pending).items())
            self._pending = array("q")

    def to_histogram(self) -> None:
        """Move every value into a histogram and free the array (idempotent)."""
        if self._exact is None:
            return
        self._max = max(self._exact) if self._exact else None
        if self._hist is None:  # unbounded: every value in one batch
            self._hist, self._pending = LatencyHistogram(), self._exact
        self._exact = None
        self._flush()

    def at_ranks(self, ranks: Sequence[int]) -> list[int]:
        """The value of each 1-based rank (1..count), by ``core.measurement.histogram``'s rule."""
        if self._exact is not None:
            ordered = sorted(self._exact)
            return [ordered[rank - 1] for rank in ranks]
        self._flush()
        assert self._hist is not None
        top = self._max
        assert top is not None
        return [min(value, top) for value in self._hist.at_ranks(ranks)]


class Ranked(Protocol):
    """Integer values read by rank: how many, the largest, whether exact, rank look-up."""

    @property
    def count(self) -> int: ...

    @property
    def max(self) -> int | None: ...

    @property
    def exact(self) -> bool: ...

    def at_ranks(self, ranks: Sequence[int]) -> list[int]: ...


class SortedSample:
    """Integer values given in ascending order (exact; read, never added to)."""

    __slots__ = ("_ordered",)

    def __init__(self, ordered: Sequence[int]) -> None:
        self._ordered = ordered

    @property
    def count(self) -> int:
        return len(self._ordered)

    @property
    def max(self) -> int | None:
        return self._ordered[-1] if self._ordered else None

    @property
    def exact(self) -> bool:
        return True

    def at_ranks(self, ranks: Sequence[int]) -> list[int]:
        """The value of each 1-based rank (1..count)."""
        ordered = self._ordered
        return [ordered[rank - 1] for rank in ranks]


class Coverage:
    """The union of closed time intervals; see the module docstring."""

    __slots__ = ("_ends", "_horizon", "_limit", "_settled", "_starts", "first", "last")

    def __init__(self) -> None:
        self._starts = array("d")
        self._ends = array("d")
        self._settled = 0.0
        self._horizon = -math.inf
        self._limit: int | None = None
        self.first = math.inf  # the earliest start seen
        self.last = -math.inf  # the latest end seen

    @property
    def stored(self) -> int:
        """Disjoint intervals held."""
        return len(self._starts)

    def bound(self, limit: int) -> None:
        """Hold at most ``limit`` intervals (>= 2) from now on."""
        if limit < 2:
            raise ValueError(f"interval limit must be >= 2, got {limit}")
        self._limit = limit
        self._fold()

    def add(self, start: float, end: float) -> None:
        """Add ``[start, end]`` (``end >= start``)."""
        self.first = min(self.first, start)
        self.last = max(self.last, end)
        if start < self._horizon:
            if end <= self._horizon:
                return
            start = self._horizon
        starts, ends = self._starts, self._ends
        lo = bisect_left(ends, start)  # the first interval ending at or after start
        hi = bisect_right(starts, end)  # intervals starting at or before end: [0, hi)
        if lo == hi:
            starts.insert(lo, start)
            ends.insert(lo, end)
        else:
            starts[lo] = min(start, starts[lo])
            ends[lo] = max(end, ends[hi - 1])
            del starts[lo + 1 : hi]
            del ends[lo + 1 : hi]
        self._fold()

    def _fold(self) -> None:
        if self._limit is None or len(self._starts) <= self._limit:
            return
        keep = self._limit // 2
        fold = len(self._starts) - keep
        total = self._settled
        for start, end in zip(self._starts[:fold], self._ends[:fold], strict=True):
            total += end - start
        self._settled, self._horizon = total, self._ends[fold - 1]
        del self._starts[:fold]
        del self._ends[:fold]

    def length(self) -> float:
        """Total length covered (left to right, as a sort-and-sweep would sum it)."""
        total = self._settled
        for start, end in zip(self._starts, self._ends, strict=True):
            total += end - start
        return total
