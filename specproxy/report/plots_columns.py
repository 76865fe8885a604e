"""The report's plot data over ``core.columns.RecordColumns`` (pure).

Each function equals its record counterpart in ``report.plots`` over the same records
(``tests/report/test_scale_equivalence.py`` holds them equal): the same curves from the
same sorted values, through ``report.plots``' own point pickers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import compress

from specproxy.core.columns import NULL, SIDES, RecordColumns
from specproxy.core.compare.acceptance import load_bin
from specproxy.core.compare.column_figures import CompletedValues, PairColumns, completed_mask
from specproxy.core.compare.pairing import Metric
from specproxy.core.compare.sides import Timeline
from specproxy.core.histogram import LatencyHistogram
from specproxy.core.model import Role
from specproxy.core.stats import quantile_sorted
from specproxy.report.model import Cdf, LoadPoint, Plots
from specproxy.report.plots import SCATTER_POINTS, cdf_points, itl_cdf_of_counts


def cdfs(
    cols: RecordColumns,
    values: Mapping[Role, CompletedValues],
    itl_histograms: Mapping[Role, LatencyHistogram],
) -> tuple[Cdf, ...]:
    """``report.plots.cdfs``: TTFT, E2E, TPOT and per-token ITL CDFs per side."""
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
    """``report.plots.tpot_by_load``: median TPOT per side per in-flight-at-send bin."""
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
    """``report.plots.ratio_vs_acceptance`` from the pairs' E2E ratios and candidate accept
    lengths (NaN for none)."""
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
    """``report.plots.alternate_blocks``: each alternate-mode block's span and side."""
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
    """``report.plots.build_plots`` over the records in ``cols``."""
    return Plots(
        cdfs=cdfs(cols, values, itl_histograms),
        tpot_by_load=tpot_by_load(cols),
        ratio_vs_acceptance=ratio_vs_acceptance(pairs, e2e, lengths),
        timeline=timeline,
        blocks=alternate_blocks(cols, timeline.origin_unix_s),
    )
