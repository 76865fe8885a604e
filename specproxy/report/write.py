"""Render a report in one format, or write every format into a directory.

``write_reports`` is what ``specproxy demo`` and ``replay`` call at the end of a run;
``render`` is what ``specproxy report`` prints.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from specproxy.errors import ConfigError
from specproxy.report.build import BuildOptions, build_report
from specproxy.report.load import load_run_dir
from specproxy.report.model import Report, to_jsonable
from specproxy.report.render_html import render_html
from specproxy.report.render_md import render_md
from specproxy.report.render_text import render_text
from specproxy.report.scan import without_gc

FORMATS = ("text", "md", "html", "json")
FILE_NAMES = {"text": "report.txt", "md": "report.md", "html": "report.html", "json": "report.json"}


def render(report: Report, fmt: str) -> str:
    """``report`` in ``fmt`` (one of ``FORMATS``); ConfigError for an unknown format."""
    if fmt == "text":
        return render_text(report)
    if fmt == "md":
        return render_md(report)
    if fmt == "html":
        return render_html(report)
    if fmt == "json":
        return json.dumps(to_jsonable(report), indent=1, allow_nan=False) + "\n"
    raise ConfigError(f"unknown report format {fmt!r} (known: {', '.join(FORMATS)})")


@without_gc
def report_for(run_dirs: Sequence[str | Path], options: BuildOptions | None = None) -> Report:
    """Load ``run_dirs`` and build their merged report."""
    if not run_dirs:
        raise ConfigError("no run directory given")
    return build_report([load_run_dir(p) for p in run_dirs], options)


def write_reports(
    run_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    formats: Sequence[str] = FORMATS,
    options: BuildOptions | None = None,
) -> list[Path]:
    """Write ``report.txt``/``.md``/``.html``/``.json`` for ``run_dirs`` into ``out_dir``."""
    report = report_for(run_dirs, options)
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{out}: cannot create output directory: {exc.strerror}") from exc
    paths = []
    for fmt in formats:
        text = render(report, fmt)  # ConfigError for an unknown format
        path = out / FILE_NAMES[fmt]
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


@dataclass(frozen=True, slots=True)
class ReportSettings(BuildOptions):
    """What ``specproxy report`` was asked for (options, or a ``[report]`` TOML table): the
    statistics settings it passes on as ``BuildOptions``, plus where and how to write.

    ``format`` None means text on stdout, or every format when ``out`` is given.
    """

    format: str | None = None
    out: str | None = None

    def __post_init__(self) -> None:
        BuildOptions.__post_init__(self)
        if self.format is not None and self.format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {self.format!r}")
