"""The Markdown report: one heading per section, pipe tables (cells escaped)."""

from __future__ import annotations

from specproxy.report.document import document
from specproxy.report.document.blocks import Badge, Table
from specproxy.report.model import Report


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ") or " "


def _table(table: Table) -> list[str]:
    out = [f"*{_cell(table.caption)}*", ""] if table.caption else []
    out.append("| " + " | ".join(_cell(h) for h in table.headers) + " |")
    out.append("|" + "|".join("---" for _ in table.headers) + "|")
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in table.rows]
    return [*out, ""]


def render_md(report: Report) -> str:
    """The whole report as Markdown (ends with a newline)."""
    title, banner, sections = document(report)
    lines = [f"# {title}", ""]
    for text in banner:
        lines += [f"> **{text}**", ""]
    for section in sections:
        lines += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Badge):
                lines += [f"**{block.line}**", ""]
            else:
                lines += _table(block) if isinstance(block, Table) else [block, ""]
    return "\n".join(lines).rstrip("\n") + "\n"
