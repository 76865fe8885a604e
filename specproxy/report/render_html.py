"""The HTML report: one self-contained page (inline CSS and SVG, no script, no address).

The page opens with the answer: the verdict badge (``#verdict-badge``, its
``data-verdict`` the verdict's value in ``report.json``), the recommendation and the key
numbers per side; a SIMULATED banner follows, quieter than the badge, then a table of
contents. Figures (``report.figures``) sit in a grid under the section they illustrate.
"""

from __future__ import annotations

import html

from specproxy.report.breakdown_figures import breakdown_figures
from specproxy.report.document import document
from specproxy.report.document.blocks import Badge, Section, Table
from specproxy.report.figures import figures
from specproxy.report.model import SIMULATED_LABEL, Report

_CSS = """
body{font-family:sans-serif;max-width:1320px;margin:1em auto;padding:0 1em;color:#222}
h1{font-size:22px}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5em 0 1em}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:left;font-size:13px}caption{text-align:left;font-style:italic;padding:2px 0}
.banner{background:#fff8e1;border-left:4px solid #c98a14;padding:.3em .8em;font-size:13px}
.badge{display:inline-block;padding:.5em 1em;border-radius:6px;font-size:20px;color:#fff;
margin:.3em 0}.badge b{font-size:24px;margin-right:.6em}.badge small{font-size:12px;
margin-left:.8em;opacity:.85}.faster{background:#1e7d3c}.slower{background:#b3261e}
.no_difference{background:#55606e}.inconclusive{background:#9a6a00}
.card table{font-size:14px}.card td:not(:first-child){text-align:right}
nav.toc{font-size:13px;margin:.8em 0}nav.toc a{margin-right:1em}
.figs{display:grid;grid-template-columns:repeat(auto-fill,minmax(520px,1fr));gap:12px}
svg{border:1px solid #eee;width:100%;height:auto}
"""


def _table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in table.rows
    )
    caption = f"<caption>{html.escape(table.caption)}</caption>" if table.caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _badge(badge: Badge) -> str:
    tag = f"<small>{html.escape(badge.tag)}</small>" if badge.tag else ""
    return (
        f'<div id="verdict-badge" class="badge {html.escape(badge.kind)}" '
        f'data-verdict="{html.escape(badge.kind)}"><b>{html.escape(badge.label)}</b>'
        f"{html.escape(badge.text)}{tag}</div>"
    )


def _block(block: str | Table | Badge) -> str:
    if isinstance(block, Badge):
        return _badge(block)
    if isinstance(block, Table):
        return _table(block)
    return f"<p>{html.escape(block)}</p>"


def _toc(sections: tuple[Section, ...]) -> str:
    links = "".join(f'<a href="#{s.key}">{html.escape(s.title)}</a>' for s in sections)
    return f'<nav class="toc"><b>Contents:</b> {links}</nav>'


def _section(section: Section, figs: list[str]) -> list[str]:
    out = [f'<h2 id="{section.key}">{html.escape(section.title)}</h2>']
    if section.key == "glance":
        first, *rest = section.blocks
        out.append(_block(first))
        out += [f'<div class="card">{_block(b)}</div>' for b in rest]
    else:
        out += [_block(b) for b in section.blocks]
    if figs:
        out.append('<div class="figs">' + "".join(figs) + "</div>")
    return out


def render_html(report: Report) -> str:
    """The whole report as one HTML page."""
    title, banner, sections = document(report)
    figs = {**figures(report), "breakdown": breakdown_figures(report)}
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    glance, *rest = sections
    out += _section(glance, [])
    out += [f'<p class="banner">{html.escape(b)}</p>' for b in banner]
    out.append(_toc(sections))
    for section in rest:
        out += _section(section, figs.get(section.key, []))
    if report.simulated:
        out.append(f'<p class="banner">{SIMULATED_LABEL}</p>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
