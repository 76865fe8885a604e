"""Data behind the report's figures, over ``core.records.columns.RecordColumns`` (pure; no drawing).

CDFs are down-sampled to at most ``CDF_POINTS`` quantile points per curve; the
per-token latency (ITL) CDF weights each chunk's per-token latency by the tokens the
chunk carried, as the recorder's ``itl_us`` histogram does. A long run has millions of
chunks, so that CDF comes from the merged ``itl_us`` histogram logs when every run dir
has them (3 significant digits), and from the records otherwise. Scatter data is
thinned deterministically to ``SCATTER_POINTS``. ``tests/oracles/plots.py`` keeps a
record-by-record version that ``tests/report/test_scale_equivalence.py`` holds equal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import compress

from specproxy.core.compare.acceptance import load_bin
from specproxy.core.compare.column_figures import CompletedValues, PairColumns, completed_mask
from specproxy.core.compare.pairing import Metric
from specproxy.core.compare.sides import Timeline
from specproxy.core.measurement.histogram import LatencyHistogram
from specproxy.core.records.columns import NULL, SIDES, RecordColumns
from specproxy.core.records.model import Role
from specproxy.core.statistics.stats import quantile_sorted
from specproxy.report.model import Cdf, LoadPoint, Plots

CDF_POINTS = 200
SCATTER_POINTS = 1500
ITL = "itl_us"


def cdf_points(ordered: list[float]) -> tuple[tuple[float, float], ...]:
    if not ordered:
        return ()
    if len(ordered) <= CDF_POINTS:
        n = len(ordered)
        return tuple((v, (i + 1) / n) for i, v in enumerate(ordered))
    steps = CDF_POINTS - 1
    return tuple((quantile_sorted(ordered, i / steps), i / steps) for i in range(CDF_POINTS))


def _weighted_cdf(counts: dict[int, int]) -> tuple[tuple[float, float], ...]:
    total = sum(counts.values())
    if total <= 0:
        return ()
    ordered = sorted(counts.items())
    stride = max(1, len(ordered) // CDF_POINTS)
    points: list[tuple[float, float]] = []
    seen = 0
    for i, (value, weight) in enumerate(ordered):
        seen += weight
        if i % stride == 0 or i == len(ordered) - 1:
            points.append((float(value), seen / total))
    return tuple(points)


def _histogram_cdf(hist: LatencyHistogram) -> tuple[tuple[float, float], ...]:
    levels = [100.0 * i / (CDF_POINTS - 1) for i in range(CDF_POINTS)]
    values = hist.percentiles(levels)
    return tuple((float(values[q]), q / 100.0) for q in levels)


def itl_cdf_of_counts(
    side: Role, counts: dict[int, int], estimated: int, histogram: LatencyHistogram | None
) -> Cdf | None:
    """The per-token latency CDF from ``histogram`` when it has samples, else from
    ``counts`` (per-token latency -> tokens); ``estimated`` samples rest on estimates."""
    if histogram is not None and histogram.count:
        return Cdf(side, ITL, _histogram_cdf(histogram), histogram.count, estimated)
    if not counts:
        return None
    return Cdf(side, ITL, _weighted_cdf(counts), sum(counts.values()), estimated)


def cdfs(
    cols: RecordColumns,
    values: Mapping[Role, CompletedValues],
    itl_histograms: Mapping[Role, LatencyHistogram],
) -> tuple[Cdf, ...]:
    """TTFT, E2E, TPOT and per-token ITL CDFs per side (completed, non-warm-up requests)."""
    out: list[Cdf] = []
    for code, side in enumerate(SIDES):
        mine = values[side]
        if not mine.count:
            continue
        for metric in (Metric.TTFT, Metric.E2E, Metric.TPOT):
            ordered = mine.floats[metric]
            if ordered:
                out.append(Cdf(side, metric.value, cdf_points(ordered), len(ordered)))
        itl = itl_cdf_of_counts(
            side, cols.itl_counts[code], cols.itl_estimated[code], itl_histograms.get(side)
        )
        if itl is not None:
            out.append(itl)
    return tuple(out)


def tpot_by_load(cols: RecordColumns) -> tuple[LoadPoint, ...]:
    """Median TPOT per side per in-flight-at-send bin (powers of two)."""
    out: list[LoadPoint] = []
    for side in SIDES:
        by_load: dict[int, list[int]] = {}
        mask = completed_mask(cols, side)
        for tpot, load in zip(compress(cols.tpot, mask), compress(cols.load, mask), strict=True):
            if tpot != NULL:
                by_load.setdefault(load, []).append(tpot)
        bins: dict[int, tuple[str, list[float]]] = {}
        for load, tpots in by_load.items():
            label, low = load_bin(load)
            bins.setdefault(low, (label, []))[1].extend(map(float, tpots))
        for low in sorted(bins):
            label, values = bins[low]
            values.sort()
            out.append(LoadPoint(side, label, low, len(values), quantile_sorted(values, 0.5)))
    return tuple(out)


def ratio_vs_acceptance(
    pairs: PairColumns, e2e: Sequence[float | None], lengths: Sequence[float]
) -> tuple[tuple[float, float], ...]:
    """``(candidate accept length, E2E ratio)`` per completed pair, thinned evenly, from the
    pairs' E2E ratios and candidate accept lengths (NaN for none)."""
    points = [
        (length, ratio)
        for length, ratio, ok in zip(lengths, e2e, pairs.both_ok(), strict=True)
        if ok and ratio is not None and not math.isnan(length)
    ]
    stride = max(1, -(-len(points) // SCATTER_POINTS))
    return tuple(points[::stride])


def alternate_blocks(
    cols: RecordColumns, origin_unix_s: float
) -> tuple[tuple[float, float, Role], ...]:
    """Each alternate-mode block's time span and side, from the records' block labels."""
    spans: dict[tuple[int, Role], tuple[float, float]] = {}
    labelled = compress(range(len(cols)), map(NULL.__ne__, cols.block))  # C: mirror has none
    for i in labelled:
        block = cols.block[i]
        start = cols.sent[i] - origin_unix_s
        e2e = cols.e2e[i]
        end = start + (e2e if e2e != NULL else 0) / 1e6
        key = (block, SIDES[cols.side[i]])
        lo, hi = spans.get(key, (start, end))
        spans[key] = (min(lo, start), max(hi, end))
    return tuple(
        (lo, hi, side) for (_, side), (lo, hi) in sorted(spans.items(), key=lambda kv: kv[1])
    )


def build_plots(
    cols: RecordColumns,
    *,
    values: Mapping[Role, CompletedValues],
    pairs: PairColumns,
    e2e: Sequence[float | None],
    lengths: Sequence[float],
    timeline: Timeline,
    itl_histograms: Mapping[Role, LatencyHistogram],
) -> Plots:
    """The report's plot data over the records in ``cols``; ``itl_histograms`` are merged
    ``itl_us`` logs (empty to use the records' per-token latencies)."""
    return Plots(
        cdfs=cdfs(cols, values, itl_histograms),
        tpot_by_load=tpot_by_load(cols),
        ratio_vs_acceptance=ratio_vs_acceptance(pairs, e2e, lengths),
        timeline=timeline,
        blocks=alternate_blocks(cols, timeline.origin_unix_s),
    )
