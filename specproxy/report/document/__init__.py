"""The report as a renderer-neutral document: ``blocks`` (badges, tables, sections),
``glance`` (the answer at the top), ``sections`` (the whole page, in order: ``document``)
and ``detail`` (acceptance, agreement, launch and the other detail sections). The text,
Markdown and HTML renderers each walk the same document."""

from specproxy.report.document.sections import document

__all__ = ["document"]
