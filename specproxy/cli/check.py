"""`specproxy check`: preflight a baseline/candidate pair (docs/contract.md, Preflight).

Parses options and calls ``specproxy.launch.preflight``; prints the table (or JSON
with ``--json``). Exit status: 0 when nothing failed (warnings allowed), 1 when a
check failed, 3 when a server could not be reached.
"""

from __future__ import annotations

import click
import orjson

from specproxy.backends.base import BackendKind, BackendSpec
from specproxy.cli.file_options import config_option
from specproxy.core.protocol.urls import ROOT_URL_HELP, check_server_url
from specproxy.core.records.model import Role
from specproxy.errors import ConfigError
from specproxy.launch.checks import render_table
from specproxy.launch.preflight import raise_for_outcome, run_preflight
from specproxy.runtime import run


def _target(url: str, role: Role, kind: str, key: str | None) -> BackendSpec:
    try:
        check_server_url(str(role), url)
        return BackendSpec(url, role, BackendKind(kind), key)
    except ValueError as exc:
        raise ConfigError(f"--{role}: {exc}") from exc


@click.command()
@config_option("check")
@click.option(
    "--baseline",
    "baseline_url",
    required=True,
    help="Baseline server URL, speculation off" + ROOT_URL_HELP,
)
@click.option(
    "--candidate",
    "candidate_url",
    required=True,
    help="Candidate server URL, speculation on" + ROOT_URL_HELP,
)
@click.option(
    "--kind",
    type=click.Choice([k.value for k in BackendKind]),
    default="sglang",
    show_default=True,
    help="Server protocol: sglang (server info, /generate) or openai.",
)
@click.option(
    "--api-key",
    envvar="SPECPROXY_API_KEY",
    default=None,
    help="API key for both servers (env SPECPROXY_API_KEY).",
)
@click.option(
    "--baseline-api-key",
    envvar="SPECPROXY_BASELINE_API_KEY",
    default=None,
    help="API key for the baseline only.",
)
@click.option(
    "--candidate-api-key",
    envvar="SPECPROXY_CANDIDATE_API_KEY",
    default=None,
    help="API key for the candidate only.",
)
@click.option(
    "--expect-algorithm",
    default=None,
    metavar="NAME",
    help="The algorithm the candidate should run (EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM...).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds allowed for each request.",
)
@click.option(
    "--launch-dir",
    envvar="SPECPROXY_RUN_DIR",
    default=None,
    type=click.Path(file_okay=False, exists=True),
    help="A `specproxy launch` run directory: its launch.json adds the servers' commands and "
    "environment to the checks (default: $SPECPROXY_RUN_DIR, set by `specproxy launch`).",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the outcome as JSON instead of a table."
)
def command(
    *,
    baseline_url: str,
    candidate_url: str,
    kind: str,
    api_key: str | None,
    baseline_api_key: str | None,
    candidate_api_key: str | None,
    expect_algorithm: str | None,
    timeout_s: float,
    launch_dir: str | None,
    as_json: bool,
) -> None:
    """Check that a baseline/candidate pair is fit for a comparison."""
    baseline = _target(baseline_url, Role.BASELINE, kind, baseline_api_key or api_key)
    candidate = _target(candidate_url, Role.CANDIDATE, kind, candidate_api_key or api_key)
    outcome = run(
        run_preflight(
            baseline,
            candidate,
            expect_algorithm=expect_algorithm,
            timeout_s=timeout_s,
            launch_dir=launch_dir,
        )
    )
    if as_json:
        click.echo(orjson.dumps(outcome.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render_table(outcome.checks))
    raise_for_outcome(outcome)
