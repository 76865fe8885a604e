"""The "where the gain goes" section: the paired ratio and the accept length by input
length, output length and category, and the candidate's acceptance per verify step.

Each table carries its own text plot (a strip per bin: the interval as ``─``, the point
as ``●``, 1.0 as ``│``; bars of ``█`` for shares), so the text and Markdown reports show
the shape the HTML figures (``report.breakdown_figures``) draw.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specproxy.core.compare.acceptance import GroupRatio
from specproxy.core.compare.breakdown import Breakdown, Breakdowns, StepHistogram
from specproxy.report import fmt
from specproxy.report.document.blocks import Section, Table
from specproxy.report.model import Report

STRIP = 24
"""Characters of a ratio strip."""
BAR = 30
"""Characters of a full share bar."""


def _ends(group: GroupRatio) -> tuple[float, float, float] | None:
    """``(point, low, high)`` of the group's E2E ratio as shown (the point alone where the
    report shows no interval)."""
    iv = group.e2e
    if iv is None or not math.isfinite(iv.point):
        return None
    if fmt.shows_interval(iv) and (iv.units is None or iv.units >= 2):
        return iv.point, iv.low, iv.high
    return iv.point, iv.point, iv.point


def ratio_strips(groups: Sequence[GroupRatio]) -> tuple[list[str], tuple[float, float]]:
    """One strip per group on a common scale that holds 1.0 and every finite end, and
    that scale's ends."""
    ends = [_ends(g) for g in groups]
    values = [v for e in ends if e is not None for v in e if math.isfinite(v)] + [1.0]
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0

    def at(v: float) -> int:
        v = min(max(v, lo), hi) if math.isfinite(v) else hi
        return round((v - lo) / span * (STRIP - 1))

    out = []
    for e in ends:
        cells = ["·"] * STRIP
        cells[at(1.0)] = "│"
        if e is not None:
            point, low, high = e
            for i in range(at(low), at(high) + 1):
                cells[i] = "─"
            cells[at(point)] = "●"
        out.append("".join(cells))
    return out, (lo, hi)


def bar(share: float) -> str:
    return "█" * round(share * BAR) or ("▏" if share > 0 else "")


def _units(g: GroupRatio, b: Breakdown) -> str:
    if g.e2e is None or g.e2e.units is None:
        return str(g.units)
    note = f" (under {b.min_units})" if g.units < b.min_units else ""
    return f"{fmt.units(g.e2e)}{note}"


def breakdown_table(b: Breakdown, first: str) -> Table:
    strips, (lo, hi) = ratio_strips(b.groups)
    accept = b.accept_length or (None,) * len(b.groups)
    rows = tuple(
        (
            g.label,
            str(g.n),
            strip,
            fmt.ratio(g.e2e),
            fmt.ratio(g.tpot),
            fmt.ratio(length),
            _units(g, b),
        )
        for g, strip, length in zip(b.groups, strips, accept, strict=True)
    )
    headers = (
        first, "pairs", "E2E ratio plot", "E2E ratio [95% CI]", "TPOT ratio [95% CI]",
        "accept length median [95% CI]", "rests on",
    )  # fmt: skip
    caption = f"{b.title} (plot {fmt.num(lo)}–{fmt.num(hi)}: ● median ratio, ─ 95% CI, │ 1.0)"
    return Table(headers, rows, caption)


def _breakdown_blocks(b: Breakdown, first: str, unit: str) -> list[str | Table]:
    if not b.groups:
        return [f"{b.title}: no completed pair carries its {unit}."]
    blocks: list[str | Table] = [breakdown_table(b, first)]
    if b.without:
        blocks.append(f"{b.without} completed pairs carry no {unit} and are left out above.")
    return blocks


def histogram_label(h: StepHistogram) -> str:
    mean = fmt.num(h.mean_accepted)
    return (
        f"Acceptance per verify step ({h.side.value}), {h.label.upper()}: {h.steps:,} verify "
        f"steps of {h.requests:,} requests, {mean} drafts accepted per step. Source: {h.source}."
    )


def histogram_tables(h: StepHistogram) -> list[Table]:
    tag = h.label.upper()
    steps = tuple(
        (str(k), f"{n:,}", fmt.pct(share), bar(share))
        for k, (n, share) in enumerate(zip(h.counts, h.shares, strict=True))
    )
    positions = tuple(
        (str(k), fmt.pct(rate), bar(rate)) for k, rate in enumerate(h.position_rates, start=1)
    )
    return [
        Table(
            ("drafts accepted", "verify steps", "share", "plot"),
            steps,
            f"Acceptance histogram per verify step ({tag})",
        ),
        Table(
            ("draft position", "accepted in (share of steps)", "plot"),
            positions,
            f"Per-position acceptance rate ({tag})",
        ),
    ]


def _histogram_blocks(hists: Sequence[StepHistogram]) -> list[str | Table]:
    if not hists:
        return [
            "Acceptance per verify step: not available (no candidate record carries a step "
            "histogram: the server sent none, and no stream had exact tokens per chunk)."
        ]
    blocks: list[str | Table] = []
    for h in hists:
        blocks.append(histogram_label(h))
        blocks += histogram_tables(h)
    return blocks


def breakdown_section(report: Report) -> Section | None:
    """The section, or None for a report built without the breakdowns."""
    b: Breakdowns | None = report.breakdown
    if b is None:
        return None
    intro = (
        "Paired ratios (candidate/baseline) and the candidate's median accept length per "
        "request over the completed pairs of each bin. Length bins are powers of two merged until each holds "
        f"at least {b.by_input_tokens.min_pairs} pairs; a bin's interval comes from the "
        "spread between its own units of replication, and a bin on too few shows its point."
    )
    blocks: list[str | Table] = [intro]
    blocks += _breakdown_blocks(b.by_input_tokens, "prompt tokens", "prompt token count")
    blocks += _breakdown_blocks(b.by_output_tokens, "completion tokens", "completion token count")
    blocks += _breakdown_blocks(b.by_category, "category", "prompt category")
    blocks += _histogram_blocks(b.step_acceptance)
    return Section("breakdown", "Where the gain goes", tuple(blocks))
