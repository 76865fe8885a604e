"""`specproxy score RUN_DIR --baseline URL`: the output-distribution check for a serve run.

Scores a finished ``serve`` run's recorded outputs (mirror mode, ``--record --record-text``)
on the baseline with teacher-forced requests (``replay.score_run``), then rewrites the run's
reports, whose at-a-glance block then shows the check. Exit statuses: 0 scored; 2 the run
cannot be scored (the missing option is named); 3 the baseline could not be reached.
"""

from __future__ import annotations

from pathlib import Path

import click

from specproxy.cli.file_options import config_option
from specproxy.report.write import write_reports
from specproxy.runtime import run


@click.command()
@config_option("score")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True))
@click.option("--baseline", required=True, help="Baseline server URL (the target model).")
@click.option(
    "--score-requests",
    type=click.IntRange(min=2),
    default=400,
    show_default=True,
    help="Most scoring requests to send (two per pair).",
)
@click.option("--api-key", envvar="SPECPROXY_API_KEY", help="API key of the baseline server.")
def command(run_dir: str, baseline: str, score_requests: int, api_key: str | None) -> None:
    """Score a serve run's recorded outputs on the baseline (output-distribution check)."""
    from specproxy.replay.score_run import score_run_dir

    path = Path(run_dir)
    counts = run(score_run_dir(path, baseline, score_requests, api_key))
    click.echo(
        f"specproxy score: {counts['pairs_scored']} pairs scored with "
        f"{counts['scoring_requests']} scoring requests ({counts['failed']} failed) in {path}",
        err=True,
    )
    paths = write_reports([path], path)
    click.echo(f"specproxy score: report in {', '.join(p.name for p in paths)}", err=True)
