"""Pairs grouped by acceptance bin, load bin and category, record by record: the oracle
the column pass (``specproxy.core.compare.column_acceptance``) is held equal to."""

from __future__ import annotations

import math
from collections.abc import Sequence

from specproxy.core.compare.acceptance import ACCEPT_BIN_EDGES, GroupRatio, load_bin
from specproxy.core.compare.pairing import Metric, Pair, pair_units, paired_ratio
from specproxy.core.records.model import RequestRecord


def _accept_length(rec: RequestRecord) -> float | None:
    acc = rec.measurement.acceptance
    if acc is None or acc.accept_length is None or not math.isfinite(acc.accept_length):
        return None
    return acc.accept_length


def group_ratio(label: str, low: float | None, pairs: Sequence[Pair]) -> GroupRatio:
    units = pair_units(pairs)
    e2e, tpot = (paired_ratio(pairs, m, units=units) for m in (Metric.E2E, Metric.TPOT))
    lengths = [a for p in pairs if (a := _accept_length(p.candidate)) is not None]
    mean_len = math.fsum(lengths) / len(lengths) if lengths else None
    return GroupRatio(label, low, len(pairs), e2e.interval, tpot.interval, mean_len, e2e.units)


def ratio_by_acceptance(pairs: Sequence[Pair]) -> tuple[GroupRatio, ...]:
    """Completed pairs binned by the candidate's accept length (``ACCEPT_BIN_EDGES``)."""
    bins: dict[int, list[Pair]] = {}
    for pair in pairs:
        length = _accept_length(pair.candidate)
        if not pair.both_ok or length is None:
            continue
        idx = max(0, sum(length >= e for e in ACCEPT_BIN_EDGES) - 1)
        bins.setdefault(idx, []).append(pair)
    out = []
    for idx in sorted(bins):
        low = ACCEPT_BIN_EDGES[idx]
        high = ACCEPT_BIN_EDGES[idx + 1] if idx + 1 < len(ACCEPT_BIN_EDGES) else None
        label = f"{low:g}–{high:g}" if high is not None else f"≥{low:g}"
        out.append(group_ratio(label, low, bins[idx]))
    return tuple(out)


def ratio_by_load(pairs: Sequence[Pair]) -> tuple[GroupRatio, ...]:
    """Completed pairs binned by the candidate's ``in_flight_at_send``."""
    bins: dict[int, tuple[str, list[Pair]]] = {}
    for pair in pairs:
        if pair.both_ok:
            label, low = load_bin(pair.candidate.in_flight_at_send)
            bins.setdefault(low, (label, []))[1].append(pair)
    return tuple(group_ratio(bins[k][0], float(k), bins[k][1]) for k in sorted(bins))


def ratio_by_category(pairs: Sequence[Pair]) -> tuple[GroupRatio, ...]:
    """Completed pairs grouped by prompt category (empty when no record has one)."""
    groups: dict[str, list[Pair]] = {}
    for pair in pairs:
        category = pair.candidate.category or pair.baseline.category
        if pair.both_ok and category:
            groups.setdefault(category, []).append(pair)
    return tuple(group_ratio(c, None, groups[c]) for c in sorted(groups))
