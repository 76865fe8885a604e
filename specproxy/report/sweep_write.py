"""Write a sweep's report files (``report.txt``, ``.md``, ``.html``) from its sweep.json."""

from __future__ import annotations

from pathlib import Path

from specproxy.errors import ConfigError
from specproxy.report.sweep_html import render_sweep_html
from specproxy.report.sweep_report import load_sweep, render_sweep_md, render_sweep_text

SWEEP_FORMATS = ("text", "md", "html")
_FILES = {"text": "report.txt", "md": "report.md", "html": "report.html"}


def render_sweep(sweep_dir: str | Path, fmt: str) -> str:
    """The sweep report of ``sweep_dir`` in ``fmt`` (text, md, html, or json: sweep.json)."""
    doc = load_sweep(sweep_dir)
    if fmt == "text":
        return render_sweep_text(doc)
    if fmt == "md":
        return render_sweep_md(doc)
    if fmt == "html":
        return render_sweep_html(doc)
    if fmt == "json":
        return (Path(sweep_dir) / "sweep.json").read_text(encoding="utf-8")
    raise ConfigError(f"unknown sweep report format {fmt!r} (known: text, md, html, json)")


def write_sweep_reports(
    sweep_dir: str | Path, out_dir: str | Path, formats: tuple[str, ...] = SWEEP_FORMATS
) -> list[Path]:
    """Write the sweep report files into ``out_dir``; returns their paths (text first)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        if fmt == "json":
            continue
        path = out / _FILES[fmt]
        path.write_text(render_sweep(sweep_dir, fmt), encoding="utf-8")
        paths.append(path)
    return paths
