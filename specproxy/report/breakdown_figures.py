"""SVG figures of the "where the gain goes" section (``report.document.breakdown``): the
E2E ratio per bin with its interval, the step histogram and the per-position rates."""

from __future__ import annotations

from specproxy.report import svg
from specproxy.report.figures import ratio_rows
from specproxy.report.model import SIMULATED_LABEL, Report


def breakdown_figures(report: Report) -> list[str]:
    """The section's figures, SIMULATED in every title of a simulated report."""
    tag = f"{SIMULATED_LABEL} " if report.simulated else ""
    b = report.breakdown
    if b is None:
        return []
    figs = [
        svg.intervals(
            f"{tag}E2E ratio {part.title[0].lower()}{part.title[1:]} (95% interval bars)",
            ratio_rows(part.groups),
            x_label=part.title.removeprefix("By "),
            y_label="E2E ratio (candidate/baseline)",
        )
        for part in (b.by_input_tokens, b.by_output_tokens, b.by_category)
        if part.groups
    ]
    for h in b.step_acceptance:
        label = f"{tag}{h.label.upper()}"
        figs.append(
            svg.bars(
                f"{label} acceptance histogram per verify step ({h.side.value})",
                [(str(k), share) for k, share in enumerate(h.shares)],
                x_label="drafts accepted in the step",
                y_label="share of verify steps",
            )
        )
        figs.append(
            svg.bars(
                f"{label} per-position acceptance rate ({h.side.value})",
                [(str(k), rate) for k, rate in enumerate(h.position_rates, start=1)],
                x_label="draft position",
                y_label="share of steps that accepted it",
            )
        )
    return figs
