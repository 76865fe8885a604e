"""Mergeable latency histograms in integer microseconds, and HdrHistogram log text.

``LatencyHistogram`` wraps ``hdrh.histogram.HdrHistogram`` with one fixed layout for
every metric (1 us .. 1 hour, 3 significant digits), so any two histograms — from two
proxy replicas, two runs, or a decoded log line — merge exactly. Values above one hour
are recorded as one hour and counted in ``clamped``; that count lives on the instance
and is not part of the encoded form (the standard HdrHistogram payload has no field
for it).

The log functions are pure (text in, text out; the recorder writes the file). The text is
the HdrHistogram log format 1.2 that ``hdrh.log.HistogramLogReader`` and the Java/C
tools read: a ``#[StartTime: ...]`` / ``#[BaseTime: ...]`` header, the legend line, and
one ``Tag=<metric>,<start s>,<length s>,<max ms>,<base64 payload>`` line per interval.
Interval starts are seconds relative to the base time; the max column is in
milliseconds (values are microseconds, so the unit ratio is 1000).

**The one percentile rule** (``PERCENTILE_RULE``): nearest rank. The p-th percentile of
``n`` values is the ``ceil(p/100 * n)``-th smallest (at least the first). It is what
``nearest_rank`` computes on exact values and what ``LatencyHistogram.percentiles``
computes on a histogram, where the value found is its bucket's highest equivalent value,
so a histogram percentile is the exact one rounded up to 3 significant digits. Every
latency percentile in experiment.json, the reports and the replay's summary is one of
these two; nothing interpolates between values (p50 of {1, 2, 3, 10} ms is 2 ms).
``HISTOGRAM_METRICS`` names the per-side histograms, which are also the ``.hlog`` tags.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from hdrh.histogram import HdrHistogram

from specproxy.core.speedups import SPEEDUPS
from specproxy.errors import ProtocolError

LOWEST_US = 1
HIGHEST_US = 3_600_000_000  # one hour
_C_HDR_ADD = SPEEDUPS.hdr_add if SPEEDUPS is not None else None  # ``record_many``'s loop
SIGNIFICANT_DIGITS = 3
LOG_FORMAT_VERSION = "1.2"
HISTOGRAM_METRICS = ("ttft_us", "itl_us", "tpot_us", "e2e_us", "send_lag_us")
"""The per-side latency histograms every run directory keeps (``.hlog`` tags, in order)."""
SUMMARY_PERCENTILES = (50.0, 90.0, 99.0)
"""The percentiles every per-side summary reports."""
PERCENTILE_RULE = (
    "percentiles are nearest-rank (the ceil(p/100 * n)-th smallest value, never interpolated);"
    " histogram-log percentiles are the same rank rounded up to 3 significant digits"
)
_RANK_SLACK = 1e-9  # p * n / 100 computed in floating point: 99.9 * 1000 / 100 is 999.0000001
_MAX_UNIT_RATIO = 1000.0  # log max column: microseconds -> milliseconds
_INTERVAL = re.compile(r"^(?:Tag=([^,]*),)?([\d.]+),([\d.]+),([\d.]+),(\S+)$")
_BASE_TIME = re.compile(r"^#\[BaseTime: *([\d.]+) ")
_START_TIME = re.compile(r"^#\[StartTime: *([\d.]+) ")


def nearest_rank_index(q: float, n: int) -> int:
    """The 0-based index of percentile ``q`` (0..100) among ``n`` sorted values (n >= 1)."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if n < 1:
        raise ValueError("percentile of an empty sample")
    return min(n, max(1, math.ceil(q * n / 100.0 - _RANK_SLACK))) - 1


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """Percentile ``q`` (0..100) of ascending ``ordered`` by the module's one rule."""
    return ordered[nearest_rank_index(q, len(ordered))]


class LatencyHistogram:
    """An HdrHistogram of microsecond values with the project's one fixed layout.

    Mutable and owned by one writer (the recorder, a report builder); not thread-safe.
    """

    __slots__ = ("_clamped", "_h")

    def __init__(self) -> None:
        self._h = HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)
        self._clamped = 0

    def record(self, value_us: int, count: int = 1) -> None:
        """Add ``count`` observations of ``value_us``; above one hour is clamped and counted."""
        if value_us < 0:
            raise ValueError(f"latency must be >= 0 us, got {value_us}")
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        if value_us > HIGHEST_US:
            value_us = HIGHEST_US
            self._clamped += count
        value, h = int(value_us), self._h
        # hdrh's record_value with its index arithmetic inlined, as in ``record_many``
        unit, shift = h.unit_magnitude, h.sub_bucket_half_count_magnitude
        bucket = (value | h.sub_bucket_mask).bit_length() - unit - shift - 1
        h.counts[
            ((bucket + 1) << shift) + (value >> (bucket + unit)) - h.sub_bucket_half_count
        ] += count
        h.total_count += count
        h.min_value = min(h.min_value, value)
        h.max_value = max(h.max_value, value)

    def record_many(self, pairs: Iterable[tuple[int, int]]) -> None:
        """``record(value, count)`` for every pair, in one pass: same buckets, a fraction of the cost.

        The index arithmetic is hdrh's ``_counts_index_for`` inlined (``64 - clz(x)`` is
        ``x.bit_length()``), so a batch lands exactly where single records would. Every
        pair is checked before any is added, so a bad pair leaves the histogram unchanged.
        """
        batch = pairs if type(pairs) is list else list(pairs)
        if not batch:
            return
        h = self._h
        mask, unit, shift = h.sub_bucket_mask, h.unit_magnitude, h.sub_bucket_half_count_magnitude
        low, half = unit + shift + 1, h.sub_bucket_half_count
        if _C_HDR_ADD is not None:  # the common case (every pair in range) in C
            added = _C_HDR_ADD(h.counts, batch, mask, low, shift, unit, half, HIGHEST_US)
            if added is not None:
                total, lowest, highest = added
                h.total_count += total
                h.min_value = min(h.min_value, lowest)
                h.max_value = max(h.max_value, highest)
                return
        values = [int(value) for value, _ in batch]
        counts = [count for _, count in batch]
        if min(values) < 0:
            raise ValueError(f"latency must be >= 0 us, got {min(values)}")
        if min(counts) < 1:
            raise ValueError(f"count must be >= 1, got {min(counts)}")
        if max(values) > HIGHEST_US:
            self._clamped += sum(c for v, c in zip(values, counts, strict=True) if v > HIGHEST_US)
            values = [min(v, HIGHEST_US) for v in values]
        slots = h.counts
        for value, count in zip(values, counts, strict=True):
            bucket = (value | mask).bit_length() - low
            slots[((bucket + 1) << shift) + (value >> (bucket + unit)) - half] += count
        h.total_count += sum(counts)
        h.min_value = min(h.min_value, *values)
        h.max_value = max(h.max_value, *values)

    def merge(self, other: LatencyHistogram) -> None:
        """Add every observation of ``other`` into this histogram."""
        if other.count:
            self._h.add(other._h)
        self._clamped += other._clamped

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    @property
    def clamped(self) -> int:
        """Observations recorded as one hour because they were larger."""
        return self._clamped

    def percentile(self, q: float) -> int | None:
        """The value at percentile ``q`` (0..100) by the module's rule; None when empty."""
        return self.percentiles((q,)).get(q)

    def percentiles(self, qs: Iterable[float]) -> dict[float, int]:
        """Several percentiles (module rule) in one pass over the buckets; {} when empty."""
        n = self.count
        wanted = {q: nearest_rank_index(q, max(n, 1)) + 1 for q in qs}
        if not n:
            return {}
        return dict(zip(wanted, self.at_ranks(list(wanted.values())), strict=True))

    def at_ranks(self, ranks: Sequence[int]) -> list[int]:
        """The value of each 1-based rank (1..count): its bucket's highest equivalent value.

        One pass over the buckets for all of them, in the order given.
        """
        n = self.count
        if any(not 1 <= rank <= n for rank in ranks):
            raise ValueError(f"ranks must be within 1..{n}, got {list(ranks)}")
        order = sorted(range(len(ranks)), key=ranks.__getitem__)
        out = [0] * len(ranks)
        h = self._h
        seen = k = 0
        for index in range(h.counts_len):
            if k == len(order):
                break
            seen += h.get_count_at_index(index)
            while k < len(order) and seen >= ranks[order[k]]:
                out[order[k]] = int(h.get_highest_equivalent_value(h.get_value_from_index(index)))
                k += 1
        return out

    @property
    def min(self) -> int | None:
        return int(self._h.get_min_value()) if self.count else None

    @property
    def max(self) -> int | None:
        return int(self._h.get_max_value()) if self.count else None

    @property
    def mean(self) -> float | None:
        return float(self._h.get_mean_value()) if self.count else None

    def encode(self) -> str:
        """The standard compressed, base64 HdrHistogram payload (``HISTF...``)."""
        return str(self._h.encode().decode("ascii"))

    @classmethod
    def decode(cls, encoded: str) -> LatencyHistogram:
        """Inverse of ``encode``; also accepts payloads from other tools and re-buckets them."""
        try:
            other = HdrHistogram.decode(encoded.strip().encode("ascii"))
        except Exception as exc:  # hdrh raises bare Exception subclasses, zlib.error, TypeError
            raise ProtocolError(f"not an encoded HdrHistogram: {exc}") from exc
        out = cls()
        if other.get_total_count():
            try:
                out._h.add(other)
            except IndexError as exc:
                raise ProtocolError("encoded histogram holds values above one hour") from exc
        return out

    def equals(self, other: LatencyHistogram) -> bool:
        """Same counts in every bucket (the clamped tally is not compared)."""
        return bool(self._h.equals(other._h))


def histogram_figures(hist: LatencyHistogram) -> dict[str, int | None]:
    """``SUMMARY_PERCENTILES`` (``p50``...), ``max`` and ``count`` of ``hist``, for JSON."""
    found = hist.percentiles(SUMMARY_PERCENTILES)
    out: dict[str, int | None] = {f"p{q:g}": found.get(q) for q in SUMMARY_PERCENTILES}
    out["max"] = hist.max
    out["count"] = hist.count
    return out


@dataclass(frozen=True, slots=True)
class LogInterval:
    """One interval line of an HdrHistogram log: tag, start (s, relative), length (s)."""

    tag: str | None
    start_s: float
    length_s: float
    histogram: LatencyHistogram

    def __post_init__(self) -> None:
        if self.start_s < 0 or self.length_s < 0:
            raise ValueError("interval start and length must be >= 0")
        if self.tag is not None and ("," in self.tag or not self.tag.strip()):
            raise ValueError(f"bad interval tag {self.tag!r}")


def format_histogram_log(
    entries: Sequence[tuple[str, LatencyHistogram]], *, start_unix_s: float, end_unix_s: float
) -> str:
    """A whole log: one tagged interval per ``(tag, histogram)``, all spanning start..end."""
    length = max(end_unix_s - start_unix_s, 0.0)
    intervals = [LogInterval(tag, 0.0, length, hist) for tag, hist in entries]
    return format_log_intervals(intervals, base_unix_s=start_unix_s)


def format_log_intervals(intervals: Sequence[LogInterval], *, base_unix_s: float) -> str:
    """Header plus one line per interval; starts are seconds after ``base_unix_s``."""
    when = datetime.fromtimestamp(base_unix_s, tz=UTC).strftime("%a %b %d %H:%M:%S UTC %Y")
    lines = [
        f"#[Histogram log format version {LOG_FORMAT_VERSION}]",
        f"#[StartTime: {base_unix_s:.3f} (seconds since epoch), {when}]",
        f"#[BaseTime: {base_unix_s:.3f} (seconds since epoch)]",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
    ]
    for iv in intervals:
        max_ms = (iv.histogram.max or 0) / _MAX_UNIT_RATIO
        tag = f"Tag={iv.tag}," if iv.tag is not None else ""
        lines.append(
            f"{tag}{iv.start_s:.3f},{iv.length_s:.3f},{max_ms:.3f},{iv.histogram.encode()}"
        )
    return "\n".join(lines) + "\n"


def parse_histogram_log(text: str) -> tuple[float | None, list[LogInterval]]:
    """The base time (Unix s, None if the log has none) and every interval, in order.

    Raises ProtocolError naming the 1-based line of a malformed interval.
    """
    base: float | None = None
    start: float | None = None
    intervals: list[LogInterval] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith('"'):
            continue
        if line.startswith("#"):
            if m := _BASE_TIME.match(line):
                base = float(m.group(1))
            elif m := _START_TIME.match(line):
                start = float(m.group(1))
            continue
        m = _INTERVAL.match(line)
        if m is None:
            raise ProtocolError(f"histogram log line {lineno}: not an interval line")
        try:
            hist = LatencyHistogram.decode(m.group(5))
        except ProtocolError as exc:
            raise ProtocolError(f"histogram log line {lineno}: {exc}") from exc
        intervals.append(LogInterval(m.group(1), float(m.group(2)), float(m.group(3)), hist))
    return (base if base is not None else start), intervals
