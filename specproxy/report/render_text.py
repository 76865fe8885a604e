"""The terminal report: plain text, aligned tables, long paragraphs wrapped at 100 columns."""

from __future__ import annotations

import textwrap

from specproxy.report.document import document
from specproxy.report.document.blocks import Badge, Table
from specproxy.report.model import Report

WIDTH = 100


def _table(table: Table) -> list[str]:
    """Aligned columns; a last column that would overflow ``WIDTH`` wraps under itself."""
    widths = [len(h) for h in table.headers]
    for row in table.rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lead = 2 + sum(w + 2 for w in widths[:-1])
    widths[-1] = min(widths[-1], max(WIDTH - lead, 30))

    def lines(cells: tuple[str, ...]) -> list[str]:
        head = "  ".join(c.ljust(w) for c, w in zip(cells[:-1], widths[:-1], strict=True))
        tail = textwrap.wrap(cells[-1], widths[-1]) or [""]
        first = f"  {head}  {tail[0]}" if head else f"  {tail[0]}"
        return [first.rstrip()] + [(" " * lead + more).rstrip() for more in tail[1:]]

    out = [table.caption + ":"] if table.caption else []
    out += lines(table.headers)
    out.append("  " + "  ".join("-" * w for w in widths))
    for row in table.rows:
        out += lines(row)
    return out


def render_text(report: Report) -> str:
    """The whole report as terminal text (ends with a newline)."""
    title, banner, sections = document(report)
    lines = [title, "=" * len(title)]
    for text in banner:
        lines += textwrap.wrap(text, WIDTH) or [""]
    for section in sections:
        lines += ["", section.title, "-" * len(section.title)]
        for block in section.blocks:
            if isinstance(block, Table):
                lines += _table(block)
            elif isinstance(block, Badge):
                lines += textwrap.wrap(block.line, WIDTH, subsequent_indent="  ")
            else:
                lines += textwrap.wrap(block, WIDTH, subsequent_indent="  ") or [""]
    return "\n".join(lines) + "\n"
