"""Write a sweep's report files (``report.txt``, ``.md``, ``.html``) from its sweep.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specproxy.errors import ConfigError
from specproxy.report.sweep_html import render_sweep_html
from specproxy.report.sweep_report import load_sweep, render_sweep_md, render_sweep_text
from specproxy.report.write import FILE_NAMES

SWEEP_FORMATS = ("text", "md", "html")


def render_sweep(sweep_dir: str | Path, fmt: str) -> str:
    """The sweep report of ``sweep_dir`` in ``fmt`` (text, md, html, or json: sweep.json)."""
    doc = load_sweep(sweep_dir)  # checked even when its text is what is returned
    if fmt == "json":
        return (Path(sweep_dir) / "sweep.json").read_text(encoding="utf-8")
    return _render(doc, fmt)


def _render(doc: dict[str, Any], fmt: str) -> str:
    if fmt == "text":
        return render_sweep_text(doc)
    if fmt == "md":
        return render_sweep_md(doc)
    if fmt == "html":
        return render_sweep_html(doc)
    raise ConfigError(f"unknown sweep report format {fmt!r} (known: text, md, html, json)")


def write_sweep_reports(
    sweep_dir: str | Path, out_dir: str | Path, formats: tuple[str, ...] = SWEEP_FORMATS
) -> list[Path]:
    """Write the sweep report files into ``out_dir``; returns their paths (text first)."""
    doc = load_sweep(sweep_dir)  # read once for every format
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        if fmt == "json":
            continue
        path = out / FILE_NAMES[fmt]
        path.write_text(_render(doc, fmt), encoding="utf-8")
        paths.append(path)
    return paths
