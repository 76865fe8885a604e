"""Data behind the report's figures, computed from records (pure; no drawing here).

CDFs are down-sampled to at most ``CDF_POINTS`` quantile points per curve; the
per-token latency (ITL) CDF weights each chunk's per-token latency by the tokens the
chunk carried (``core.timing.token_latencies_us``), as the recorder's ``itl_us``
histogram does. Scatter data is thinned deterministically to ``SCATTER_POINTS``.
"""

from __future__ import annotations

from collections.abc import Sequence

from specproxy.core.compare import Metric, Pair, metric_value
from specproxy.core.compare_acceptance import load_bin
from specproxy.core.compare_sides import Timeline
from specproxy.core.model import RequestRecord, Role
from specproxy.core.stats import quantile_sorted
from specproxy.core.timing import token_latencies_us
from specproxy.report.model import Cdf, LoadPoint, Plots

CDF_POINTS = 200
SCATTER_POINTS = 1500
ITL = "itl_us"


def _cdf_points(ordered: list[float]) -> tuple[tuple[float, float], ...]:
    if not ordered:
        return ()
    if len(ordered) <= CDF_POINTS:
        n = len(ordered)
        return tuple((v, (i + 1) / n) for i, v in enumerate(ordered))
    steps = CDF_POINTS - 1
    return tuple((quantile_sorted(ordered, i / steps), i / steps) for i in range(CDF_POINTS))


def _weighted_cdf(weighted: list[tuple[int, int]]) -> tuple[tuple[float, float], ...]:
    weighted.sort()
    total = sum(w for _, w in weighted)
    if total <= 0:
        return ()
    stride = max(1, len(weighted) // CDF_POINTS)
    points: list[tuple[float, float]] = []
    seen = 0
    for i, (value, weight) in enumerate(weighted):
        seen += weight
        if i % stride == 0 or i == len(weighted) - 1:
            points.append((float(value), seen / total))
    return tuple(points)


def cdfs(records: Sequence[RequestRecord]) -> tuple[Cdf, ...]:
    """TTFT, E2E, TPOT and per-token ITL CDFs per side (completed, non-warm-up requests)."""
    out: list[Cdf] = []
    for side in Role:
        mine = [r for r in records if r.side is side and r.ok and not r.warmup]
        if not mine:
            continue
        for metric in (Metric.TTFT, Metric.E2E, Metric.TPOT):
            values = sorted(float(v) for r in mine if (v := metric_value(r, metric)) is not None)
            if values:
                out.append(Cdf(side, metric.value, _cdf_points(values), len(values)))
        itl: list[tuple[int, int]] = []
        for r in mine:
            itl += token_latencies_us(r.measurement.chunk_offsets_us, r.measurement.chunk_tokens)
        if itl:
            out.append(Cdf(side, ITL, _weighted_cdf(itl), sum(w for _, w in itl)))
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


def build_plots(
    records: Sequence[RequestRecord], pairs: Sequence[Pair], timeline: Timeline
) -> Plots:
    return Plots(
        cdfs=cdfs(records),
        tpot_by_load=tpot_by_load(records),
        ratio_vs_acceptance=ratio_vs_acceptance(pairs),
        timeline=timeline,
    )
