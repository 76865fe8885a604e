"""Acceptance, the per-group ratios and output agreement over ``RecordColumns`` (pure).

These are the product's definitions of the figures. Each equals a record-by-record
counterpart that ``tests/report/test_scale_equivalence.py`` holds it to:
``acceptance_summary`` equals ``core.compare.acceptance.summarise_acceptance`` (the running
tally the recorder and replay also use); ``ratio_by_acceptance``, ``ratio_by_load``,
``ratio_by_category`` and ``output_agreement`` equal the oracles in ``tests/oracles/``.
Sums of floats run in record (or pair) order, as there, so they round the same way.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import compress, zip_longest
from math import isnan
from typing import Any

from specproxy.core.compare.acceptance import (
    ACCEPT_BIN_EDGES,
    DISTRIBUTION_WIDTH,
    AcceptanceSummary,
    GroupRatio,
    exactness,
    load_bin,
)
from specproxy.core.compare.agreement import OutputAgreement, agreement_of, first_divergence
from specproxy.core.compare.column_figures import PairColumns, PairSeries, completed_mask
from specproxy.core.compare.pairing import Metric
from specproxy.core.compare.units import Units
from specproxy.core.measurement.acceptance import accept_length_of
from specproxy.core.measurement.histogram import nearest_rank
from specproxy.core.records.columns import NULL, SHA_BYTES, SIDES, SOURCES, RecordColumns
from specproxy.core.records.model import AcceptanceSource, Role

_ESTIMATE = SOURCES.index(AcceptanceSource.CHUNK_ESTIMATE)
_NO_SHA = bytes(SHA_BYTES)


def acceptance_summary(cols: RecordColumns, side: Role) -> AcceptanceSummary:
    """``summarise_acceptance`` of ``side``'s completed, non-warm-up records."""
    mask = completed_mask(cols, side)
    rows = [
        row
        for row in zip(
            compress(cols.acc_length, mask),
            compress(cols.acc_source, mask),
            compress(cols.tokens, mask),
            compress(cols.acc_steps, mask),
            strict=True,
        )
        if not math.isnan(row[0])
    ]
    lengths = [row[0] for row in rows]
    codes = Counter(row[1] for row in rows)
    sources = {SOURCES[code].value: n for code, n in codes.items()}
    flags = {code == _ESTIMATE for code in codes}
    steps_total = tokens_total = 0.0
    for length, _, tokens, verify in rows:  # float sums in record order, as the tally's
        if verify != NULL and verify > 0:
            steps: float | None = float(verify)
        elif tokens == NULL or length <= 0:
            steps = None
        else:
            steps = tokens / length
        if steps is not None and tokens != NULL:
            steps_total += steps
            tokens_total += tokens
    length_of, histograms = cols.acc_length, cols.acc_histograms
    mine = [h for i, h in histograms.items() if mask[i] and not math.isnan(length_of[i])]
    # ``add_histograms`` over them, position by position (integer sums: any order)
    hist = [sum(column) for column in zip_longest(*mine, fillvalue=0)] if mine else None
    lengths.sort()
    return AcceptanceSummary(
        side=side,
        n_requests=len(lengths),
        request_weighted_mean=math.fsum(lengths) / len(lengths) if lengths else None,
        token_weighted_mean=accept_length_of(tokens_total, steps_total),
        quantiles=(
            (nearest_rank(lengths, 10.0), nearest_rank(lengths, 50.0), nearest_rank(lengths, 90.0))
            if lengths
            else None
        ),
        sources=tuple(sorted(sources.items())),
        exactness=exactness(flags),
        distribution=sorted_distribution(lengths),
        step_histogram=tuple(hist) if hist is not None else None,
    )


def sorted_distribution(lengths: list[float]) -> tuple[tuple[float, int], ...]:
    """``core.compare.acceptance.distribution`` of ascending ``lengths``: a bin's lengths
    are one run of them (the bin, floor of length over width, never falls as the length
    grows), found by bisection with the same bin rule, so the cost is per bin."""
    out: list[tuple[float, int]] = []
    lo = 0
    while lo < len(lengths):
        index = math.floor(lengths[lo] / DISTRIBUTION_WIDTH)
        hi = bisect.bisect_right(
            lengths, index, lo, key=lambda length: math.floor(length / DISTRIBUTION_WIDTH)
        )
        out.append((index * DISTRIBUTION_WIDTH, hi - lo))
        lo = hi
    return tuple(out)


def group_ratio(
    label: str,
    low: float | None,
    members: Sequence[int],
    series: PairSeries,
    lengths: Sequence[float],
    *,
    units: Units | None = None,
) -> GroupRatio:
    """The paired E2E and TPOT ratios of ``members`` and their mean accept length
    (``units``: ``series.units(members)``, when the caller has them already)."""
    units = units if units is not None else series.units(members)
    e2e, tpot = (  # a group shows the ratio's interval alone, not the ratio of medians
        series.ratio(m, members, units=units, medians=False) for m in (Metric.E2E, Metric.TPOT)
    )
    mine = [x for x in map(lengths.__getitem__, members) if not isnan(x)]
    mean_len = math.fsum(mine) / len(mine) if mine else None
    return GroupRatio(label, low, len(members), e2e.interval, tpot.interval, mean_len, e2e.units)


def candidate_lengths(cols: RecordColumns, pairs: PairColumns) -> list[float]:
    """The candidate's accept length per pair (NaN where it has none)."""
    length = cols.acc_length
    return [length[c] for c in pairs.cand]


def ratio_by_acceptance(
    pairs: PairColumns, series: PairSeries, lengths: Sequence[float]
) -> tuple[GroupRatio, ...]:
    """Completed pairs binned by the candidate's accept length (``ACCEPT_BIN_EDGES``)."""
    bins: dict[int, list[int]] = {}
    edges, right = ACCEPT_BIN_EDGES, bisect.bisect_right
    for k, (ok, length) in enumerate(zip(pairs.both_ok(), lengths, strict=True)):
        if ok and not isnan(length):
            idx = right(edges, length) - 1
            bins.setdefault(idx if idx > 0 else 0, []).append(k)
    out = []
    for idx in sorted(bins):
        low = ACCEPT_BIN_EDGES[idx]
        high = ACCEPT_BIN_EDGES[idx + 1] if idx + 1 < len(ACCEPT_BIN_EDGES) else None
        label = f"{low:g}–{high:g}" if high is not None else f"≥{low:g}"
        out.append(group_ratio(label, low, bins[idx], series, lengths))
    return tuple(out)


def ratio_by_load(
    cols: RecordColumns,
    pairs: PairColumns,
    series: PairSeries,
    lengths: Sequence[float],
) -> tuple[GroupRatio, ...]:
    """Completed pairs binned by the candidate's ``in_flight_at_send``."""
    bins: dict[int, tuple[str, list[int]]] = {}
    load = cols.load
    bin_of = {value: load_bin(value) for value in set(load)}
    loads = map(load.__getitem__, pairs.cand)
    for k, (ok, value) in enumerate(zip(pairs.both_ok(), loads, strict=True)):
        if ok:
            label, low = bin_of[value]
            bins.setdefault(low, (label, []))[1].append(k)
    return tuple(
        group_ratio(bins[b][0], float(b), bins[b][1], series, lengths) for b in sorted(bins)
    )


def ratio_by_category(
    cols: RecordColumns,
    pairs: PairColumns,
    series: PairSeries,
    lengths: Sequence[float],
) -> tuple[GroupRatio, ...]:
    """Completed pairs grouped by prompt category (``category_members``)."""
    groups = category_members(cols, pairs)
    return tuple(group_ratio(c, None, groups[c], series, lengths) for c in sorted(groups))


def category_members(cols: RecordColumns, pairs: PairColumns) -> dict[str, list[int]]:
    """The completed pairs of each prompt category (the candidate's, else the baseline's)."""
    groups: dict[str, list[int]] = {}
    category, names = cols.category, cols.categories
    cand, base = map(category.__getitem__, pairs.cand), map(category.__getitem__, pairs.base)
    for k, (ok, mine, other) in enumerate(zip(pairs.both_ok(), cand, base, strict=True)):
        code = mine if mine >= 0 else other
        if ok and code >= 0:
            groups.setdefault(names[code], []).append(k)
    return groups


def output_agreement(
    cols: RecordColumns, pairs: PairColumns, sampling: Mapping[str, Any] | None
) -> OutputAgreement:
    """Agreement over the pairs where both sides completed and reported an output hash."""
    compared = matched = 0
    positions: list[float] = []
    sha, odd, width = bytes(cols.sha), cols.odd_sha, SHA_BYTES
    for b, c, ok in zip(pairs.base, pairs.cand, pairs.both_ok(), strict=True):
        if not ok:
            continue
        if b in odd or c in odd:
            b_sha, c_sha = cols.sha_of(b), cols.sha_of(c)
        else:  # sha_of without a call: the raw bytes, None for none
            b_sha, c_sha = sha[b * width : (b + 1) * width], sha[c * width : (c + 1) * width]
            b_sha = None if b_sha == _NO_SHA else b_sha
            c_sha = None if c_sha == _NO_SHA else c_sha
        if b_sha is None or c_sha is None:
            continue
        compared += 1
        if b_sha == c_sha:
            matched += 1
        elif b in cols.texts and c in cols.texts:
            positions.append(float(first_divergence(cols.texts[b], cols.texts[c])))
    return agreement_of(compared, matched, positions, sampling)


def side_requests(cols: RecordColumns, side: Role) -> int:
    """Records of ``side``, warm-up included (what the server finished in the run)."""
    return cols.side.count(SIDES.index(side))
