"""`specproxy report RUN_DIR...`: re-render the comparison from saved records (README, Using it on a GPU host).

Several run directories merge (records concatenated, histograms merged); A/A run
directories given alongside others become the noise floor. A sweep directory (one
holding ``sweep.json``) is re-rendered as its one-page sweep report instead. Without ``--out`` the report
is printed (text unless ``--format`` says otherwise); with ``--out DIR`` it is written
there (every format unless ``--format`` picks one) and the paths are printed. A TOML
file given with ``--config`` may hold any option in a ``[report]`` table.
"""

from __future__ import annotations

from typing import Any

import click

from specproxy.config import build, load_toml_table
from specproxy.errors import ConfigError
from specproxy.report.sweep_report import is_sweep_dir
from specproxy.report.sweep_write import SWEEP_FORMATS, render_sweep, write_sweep_reports
from specproxy.report.write import FORMATS, ReportSettings, render, report_for, write_reports


def _sweep(run_dirs: tuple[str, ...], settings: ReportSettings) -> None:
    """A sweep directory (one with sweep.json): its one-page sweep report."""
    if len(run_dirs) != 1:
        raise ConfigError("a sweep directory is re-rendered alone: give one DIR with sweep.json")
    if settings.out is None:
        click.echo(render_sweep(run_dirs[0], settings.format or "text"), nl=False)
        return
    formats = (settings.format,) if settings.format else SWEEP_FORMATS
    for path in write_sweep_reports(run_dirs[0], settings.out, formats):
        click.echo(str(path))


@click.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option(
    "--format",
    "format",
    type=click.Choice(FORMATS),
    default=None,
    help="Output format (default text).",
)
@click.option(
    "--out", default=None, type=click.Path(file_okay=False), help="Write report files into DIR."
)
@click.option(
    "--margin", type=float, default=None, help="Verdict margin as a fraction (default 0.02)."
)
@click.option(
    "--min-pairs",
    type=int,
    default=None,
    help=(
        "Fewest ranked pairs for a verdict: a pair counts when either side completed; a pair"
        " where both failed is counted but not ranked (default 30)."
    ),
)
@click.option(
    "--resamples",
    type=int,
    default=None,
    help="Resamples of the unpaired (split-mode) bootstrap (default 2000).",
)
@click.option("--seed", type=int, default=None, help="Seed of the unpaired bootstrap.")
@click.option(
    "--window", "window_s", type=float, default=None, help="Throughput window in seconds."
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="TOML file with a [report] table.",
)
def command(run_dirs: tuple[str, ...], config_path: str | None, **options: Any) -> None:
    """Re-render the comparison of RUN_DIR... from their saved records."""
    file_values = load_toml_table(config_path, "report") if config_path else {}
    settings = build(ReportSettings, file_values, options, config_path or "command line")
    if any(is_sweep_dir(d) for d in run_dirs):
        _sweep(run_dirs, settings)
        return
    if settings.out is None:
        report = report_for(run_dirs, settings)
        click.echo(render(report, settings.format or "text"), nl=False)
        return
    formats = (settings.format,) if settings.format else FORMATS
    for path in write_reports(run_dirs, settings.out, formats=formats, options=settings):
        click.echo(str(path))
