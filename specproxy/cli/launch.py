"""`specproxy launch DESCRIPTION.toml [-- COMMAND...]`: start a matched SGLang pair (docs/contract.md, Launching).

Parses options and calls ``specproxy.launch.pair.launch_pair``. ``--dry-run`` prints
the two commands (API key redacted) and starts nothing. A command after ``--`` runs
once both servers are healthy, with ``SPECPROXY_BASELINE_URL``,
``SPECPROXY_CANDIDATE_URL`` and ``SPECPROXY_RUN_DIR`` set; the pair is stopped when it
ends and its exit status becomes ours. Exit statuses: 0, 1 (a server refused its
configuration, or the command failed with 1), 2 (bad description), 3 (a server did
not become healthy or died), 130 (interrupted).
"""

from __future__ import annotations

from pathlib import Path

import click

from specproxy.cli.file_options import config_option
from specproxy.core.records.model import Role
from specproxy.launch.description import load_description
from specproxy.launch.pair import PairReady, launch_pair
from specproxy.recording.rundir import new_experiment_id, new_run_dir
from specproxy.runtime import run


def _announce(ready: PairReady) -> None:
    click.echo(f"baseline  {ready.baseline_url}", err=True)
    click.echo(f"candidate {ready.candidate_url}", err=True)
    click.echo(f"ready; recording in {ready.run_dir}", err=True)


@click.command()
@config_option("launch")
@click.argument("description", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("then", nargs=-1, type=click.UNPROCESSED, metavar="[-- COMMAND...]")
@click.option(
    "--run-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Run directory (default: runs/<time>-<name>-<id>/).",
)
@click.option(
    "--python",
    default=None,
    help="Python that runs the servers (default: the description's, else python3).",
)
@click.option("--dry-run", is_flag=True, help="Print the two server commands and start nothing.")
def command(
    *,
    description: Path,
    then: tuple[str, ...],
    run_dir: Path | None,
    python: str | None,
    dry_run: bool,
) -> None:
    """Start a matched baseline/candidate SGLang pair on this GPU host.

    Servers start one after the other (each healthy before the next), are recorded in
    the run directory and stopped on SIGINT/SIGTERM. A command after `--` runs once
    both are healthy (SPECPROXY_BASELINE_URL, SPECPROXY_CANDIDATE_URL, SPECPROXY_RUN_DIR
    are set); the pair stops when it ends and its exit status becomes this one's.
    """
    desc = load_description(description)
    if dry_run:
        for role in Role:
            click.echo(f"{role}: {desc.shown_command(role, python=python)}")
        return
    experiment_id = new_experiment_id()
    target = new_run_dir(run_dir, desc.name, experiment_id=experiment_id)
    run(
        launch_pair(
            desc, target, experiment_id=experiment_id, python=python, then=then, on_ready=_announce
        )
    )
