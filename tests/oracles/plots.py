"""The report's plot data computed record by record: the oracle the column pass
(``specproxy.report.plots``) is held equal to, through the same point pickers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specproxy.core.compare.acceptance import load_bin
from specproxy.core.compare.pairing import Metric, Pair, metric_value
from specproxy.core.measurement.histogram import LatencyHistogram
from specproxy.core.records.model import RequestRecord, Role
from specproxy.core.statistics.stats import quantile_sorted
from specproxy.report.model import Cdf, LoadPoint
from specproxy.report.plots import SCATTER_POINTS, cdf_points, itl_cdf_of_counts


def _itl_from_records(records: Sequence[RequestRecord]) -> tuple[dict[int, int], int]:
    """(per-token latency (us) -> tokens, how many of those tokens were estimated), from
    ``Measurement.itl_us``: the recorder's ``itl_us`` histogram counts the same samples."""
    counts: dict[int, int] = {}
    estimated = 0
    for rec in records:
        m = rec.measurement
        itl = m.itl_us
        for value, n in itl:
            counts[value] = counts.get(value, 0) + n
        if m.chunk_tokens_estimated:
            estimated += sum(n for _, n in itl)
    return counts, estimated


def itl_cdf(
    side: Role, records: Sequence[RequestRecord], histogram: LatencyHistogram | None
) -> Cdf | None:
    """The per-token latency CDF of one side's completed records (histogram when given);
    ``Cdf.estimated`` counts the samples that rest on estimated tokens per chunk."""
    counts, estimated = _itl_from_records(records)
    return itl_cdf_of_counts(side, counts, estimated, histogram)


def cdfs(
    records: Sequence[RequestRecord], itl_histograms: Mapping[Role, LatencyHistogram]
) -> tuple[Cdf, ...]:
    """TTFT, E2E, TPOT and per-token ITL CDFs per side (completed, non-warm-up requests)."""
    out: list[Cdf] = []
    for side in Role:
        mine = [r for r in records if r.side is side and r.ok and not r.warmup]
        if not mine:
            continue
        for metric in (Metric.TTFT, Metric.E2E, Metric.TPOT):
            values = sorted(float(v) for r in mine if (v := metric_value(r, metric)) is not None)
            if values:
                out.append(Cdf(side, metric.value, cdf_points(values), len(values)))
        itl = itl_cdf(side, mine, itl_histograms.get(side))
        if itl is not None:
            out.append(itl)
    return tuple(out)


def tpot_by_load(records: Sequence[RequestRecord]) -> tuple[LoadPoint, ...]:
    """Median TPOT per side per in-flight-at-send bin (powers of two)."""
    out: list[LoadPoint] = []
    for side in Role:
        bins: dict[int, tuple[str, list[float]]] = {}
        for r in records:
            tpot = r.measurement.tpot_us
            if r.side is side and r.ok and not r.warmup and tpot is not None:
                label, low = load_bin(r.in_flight_at_send)
                bins.setdefault(low, (label, []))[1].append(float(tpot))
        for low in sorted(bins):
            label, values = bins[low]
            values.sort()
            out.append(LoadPoint(side, label, low, len(values), quantile_sorted(values, 0.5)))
    return tuple(out)


def ratio_vs_acceptance(pairs: Sequence[Pair]) -> tuple[tuple[float, float], ...]:
    """``(candidate accept length, E2E ratio)`` per completed pair, thinned evenly."""
    points: list[tuple[float, float]] = []
    for pair in pairs:
        acc = pair.candidate.measurement.acceptance
        ratio = pair.ratio(Metric.E2E)
        if acc is not None and acc.accept_length is not None and ratio is not None:
            points.append((acc.accept_length, ratio))
    stride = max(1, -(-len(points) // SCATTER_POINTS))
    return tuple(points[::stride])


def alternate_blocks(
    records: Sequence[RequestRecord], origin_unix_s: float
) -> tuple[tuple[float, float, Role], ...]:
    """Each alternate-mode block's time span and side, from the records' block labels."""
    spans: dict[tuple[int, Role], tuple[float, float]] = {}
    for r in records:
        block = r.labels.get("block")
        if block is None or not block.isdigit():
            continue
        start = r.sent_at_unix_s - origin_unix_s
        end = start + (r.measurement.e2e_us or 0) / 1e6
        key = (int(block), r.side)
        lo, hi = spans.get(key, (start, end))
        spans[key] = (min(lo, start), max(hi, end))
    return tuple(
        (lo, hi, side) for (_, side), (lo, hi) in sorted(spans.items(), key=lambda kv: kv[1])
    )
