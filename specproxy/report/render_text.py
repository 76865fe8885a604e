"""The terminal report: plain text, aligned tables, long paragraphs wrapped at 100 columns."""

from __future__ import annotations

import textwrap

from specproxy.report.document import document
from specproxy.report.model import Report
from specproxy.report.parts import Table

WIDTH = 100


def _table(table: Table) -> list[str]:
    widths = [len(h) for h in table.headers]
    for row in table.rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [table.caption + ":"] if table.caption else []
    out.append("  " + line(table.headers))
    out.append("  " + "  ".join("-" * w for w in widths))
    out += ["  " + line(row) for row in table.rows]
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
            else:
                lines += textwrap.wrap(block, WIDTH, subsequent_indent="  ") or [""]
    return "\n".join(lines) + "\n"
