"""The report's replication section: what the intervals rest on, and how the units moved.

The unit of replication (block pair or segment) and how many the intervals rest on; the
median per-pair E2E ratio beside the ratio of the sides' medians (bench_serving's figure),
each with its interval; the heterogeneity between units; every drift episode found; and
one row per unit in time order (``core.compare.blocks``).
"""

from __future__ import annotations

import time

from specproxy.core.compare.blocks import MIN_UNITS, Replication
from specproxy.core.compare.drift import DRIFT_MIN_CHANGE, DRIFT_P
from specproxy.report import fmt
from specproxy.report.document.blocks import Section, Table
from specproxy.report.model import Report

UNIT_MEANING = {
    "block pair": (
        "a block pair: one alternate-mode block sent to the baseline and the same requests "
        "sent to the candidate"
    ),
    "segment": (
        "a segment: consecutive pairs in send order (at least 10, at most 20 segments per "
        "run), served by both sides at the same moments"
    ),
    "unit": "a block pair where requests carry a block label, else a segment of consecutive pairs",
}


def _clock(unix_s: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(unix_s))


def _ratio(value: float | None) -> str:
    return fmt.DASH if value is None else f"{value:.3f}"


def _unit_rows(rep: Replication) -> tuple[tuple[str, ...], ...]:
    return tuple(
        (
            str(u.index + 1),
            u.label,
            _clock(u.start_s),
            f"{u.end_s - u.start_s:.1f}",
            str(u.pairs),
            _ratio(u.ratio),
            _ratio(u.medians_ratio),
            fmt.ms(u.baseline_level_us),
            fmt.ms(u.candidate_level_us),
            "DRIFT" if u.flagged else "",
        )
        for u in rep.units
    )


def replication_lines(report: Report) -> list[str]:
    """The section's paragraphs (also what a sweep level shows of its units)."""
    rep = report.replication
    e2e = report.paired[0] if report.paired else None
    if not rep.units or e2e is None:
        return ["No pairs: no unit of replication (split and passthrough runs have none)."]
    meaning = UNIT_MEANING.get(rep.unit, rep.unit)
    lines = [
        f"Unit of replication: {meaning}. The paired intervals rest on the spread between "
        f"{rep.count} {rep.unit}s (whole units resampled, Student's t on their number less one, "
        "widened where neighbouring units move together), not on the spread of pairs inside "
        f"one, which share the server's state; a verdict needs at least {MIN_UNITS}.",
        f"E2E: median per-pair ratio {fmt.ratio(e2e.interval)}; ratio of the sides' medians "
        f"{fmt.ratio(e2e.medians)} (bench_serving's figure: each side's median over the "
        "same pairs). The first answers 'how much slower or faster is a typical request'; "
        "the second compares the two sides' typical latencies as a benchmark of each server "
        "alone would.",
    ]
    het = rep.heterogeneity
    lines.append(
        f"Heterogeneity: {het.describe()}."
        if het is not None
        else "Heterogeneity: not tested (fewer than 2 units with 3 or more completed pairs)."
    )
    if rep.episodes:
        lines += [f"Drift: {e.describe()}." for e in rep.episodes]
        lines.append(
            "With drift, each paired interval holds both the one over all units and the one "
            "over the units outside the episodes."
        )
    else:
        lines.append(
            "Drift: none found (an episode is a run of consecutive units in which one side's "
            f"level, its median TPOT there, moved by {DRIFT_MIN_CHANGE:.0%} or more against the "
            f"other units, beyond chance (permutation test, p <= {DRIFT_P:g}), with the ratio "
            "following it)."
        )
    return lines


def replication_section(report: Report) -> Section:
    rep = report.replication
    blocks: list[str | Table] = list(replication_lines(report))
    if rep.units:
        headers = (
            "#", "unit", "start (UTC)", "span s", "pairs", "E2E ratio (median per-pair)",
            "ratio of medians", "baseline TPOT", "candidate TPOT", "drift",
        )  # fmt: skip
        blocks.append(Table(headers, _unit_rows(rep), f"The {rep.unit}s in time order"))
    return Section("replication", "Units of replication and drift", tuple(blocks))
