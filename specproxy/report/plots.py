"""Data behind the report's figures, computed from records (pure; no drawing here).

CDFs are down-sampled to at most ``CDF_POINTS`` quantile points per curve; the
per-token latency (ITL) CDF weights each chunk's per-token latency by the tokens the
chunk carried, as the recorder's ``itl_us`` histogram does. A long run has millions of
chunks, so that CDF comes from the merged ``itl_us`` histogram logs when every run dir
has them (3 significant digits), and from the records otherwise. Scatter data is
thinned deterministically to ``SCATTER_POINTS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specproxy.core.compare.acceptance import load_bin
from specproxy.core.compare.pairing import Metric, Pair, metric_value
from specproxy.core.compare.sides import Timeline
from specproxy.core.histogram import LatencyHistogram
from specproxy.core.model import RequestRecord, Role
from specproxy.core.stats import quantile_sorted
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


def itl_cdf(
    side: Role, records: Sequence[RequestRecord], histogram: LatencyHistogram | None
) -> Cdf | None:
    """The per-token latency CDF of one side's completed records (histogram when given);
    ``Cdf.estimated`` counts the samples that rest on estimated tokens per chunk."""
    counts, estimated = _itl_from_records(records)
    return itl_cdf_of_counts(side, counts, estimated, histogram)


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


def build_plots(
    records: Sequence[RequestRecord],
    pairs: Sequence[Pair],
    timeline: Timeline,
    itl_histograms: Mapping[Role, LatencyHistogram],
) -> Plots:
    """Plot data; ``itl_histograms`` are merged ``itl_us`` logs (empty to use records)."""
    return Plots(
        cdfs=cdfs(records, itl_histograms),
        tpot_by_load=tpot_by_load(records),
        ratio_vs_acceptance=ratio_vs_acceptance(pairs),
        timeline=timeline,
        blocks=alternate_blocks(records, timeline.origin_unix_s),
    )
