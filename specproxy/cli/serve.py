"""`specproxy serve`: the drop-in proxy, until SIGTERM or SIGINT.

Every option may also be given in a TOML file (``--config``), in a ``[serve]`` table
or, in a file without subcommand tables, at the top level (keys with ``-`` or ``_``;
unknown keys and wrong types are rejected by name); options on the command line win. Prints one line with the proxy's URL and run
directory once it listens, and one with the run directory when it has stopped. Before it
listens it checks that each server answers (``GET /health``): one that cannot be reached
ends it with exit status 3 and one line naming it, unless ``--no-require-upstreams``.

``--workers N`` (N > 1) serves with N processes on one port (``proxy.workers``); a
worker that died makes the command exit 1 after the report is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from specproxy.cli.launch_options import LAUNCH_OPTIONS
from specproxy.config import build, load_toml_table
from specproxy.core.protocol.urls import ROOT_URL_HELP
from specproxy.errors import BackendUnreachable, SpecproxyError
from specproxy.proxy.config import (
    DEFAULT_DRAIN_S,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_SHADOW_IN_FLIGHT,
    DEFAULT_SHADOW_DEADLINE_S,
    ProxyConfig,
)
from specproxy.runtime import run


def _launch_options(func: Any) -> Any:
    for opt in reversed(LAUNCH_OPTIONS):
        func = opt(func)
    return func


def _file_values(path: str | None) -> dict[str, Any]:
    return load_toml_table(path, "serve") if path is not None else {}


def _on_ready(url: str, run_dir: Path) -> None:
    click.echo(f"specproxy serve: listening on {url} (run directory {run_dir})", err=True)


@click.command(context_settings={"show_default": True})
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="TOML file.")
@click.option("--baseline", help="Baseline server URL" + ROOT_URL_HELP)
@click.option("--candidate", help="Candidate server URL" + ROOT_URL_HELP)
@click.option(
    "--mode",
    type=click.Choice(["mirror", "split", "passthrough"]),
    help="mirror: both sides, client gets the primary; split: one side per request; "
    "passthrough: the primary only [default: mirror].",
)
@click.option(
    "--primary",
    type=click.Choice(["baseline", "candidate"]),
    help="Side whose answer clients get in mirror/passthrough [default: baseline].",
)
@click.option("--split", type=float, help="Share of split-mode requests sent to the candidate.")
@click.option("--seed", type=int, help="Seed of the split draw.")
@click.option("--sticky-header", help="Pin split clients to a side by this request header.")
@click.option("--sticky-user/--no-sticky-user", default=None, help="Pin by the body's `user`.")
@click.option("--host", help="Address to listen on [default: 127.0.0.1].")
@click.option("--port", type=int, help="Port to listen on; 0 picks a free one [default: 8000].")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Run directory [default: new].")
@click.option("--label", help="Label in the new run directory's name [default: serve].")
@click.option(
    "--kind",
    type=click.Choice(["sglang", "openai"]),
    help="Server kind: sglang, or any other OpenAI-compatible server [default: sglang].",
)
@click.option("--api-key", help="Key clients must present as 'Authorization: Bearer KEY'.")
@click.option(
    "--baseline-api-key",
    envvar=["SPECPROXY_BASELINE_API_KEY", "SPECPROXY_UPSTREAM_API_KEY"],
    help="Key the proxy sends to the baseline server (env SPECPROXY_BASELINE_API_KEY,"
    " else SPECPROXY_UPSTREAM_API_KEY).",
)
@click.option(
    "--candidate-api-key",
    envvar=["SPECPROXY_CANDIDATE_API_KEY", "SPECPROXY_UPSTREAM_API_KEY"],
    help="Key the proxy sends to the candidate server (env SPECPROXY_CANDIDATE_API_KEY,"
    " else SPECPROXY_UPSTREAM_API_KEY).",
)
@click.option(
    "--max-shadow-in-flight",
    type=int,
    help=f"Shadow copies in flight before dropping [default: {DEFAULT_MAX_SHADOW_IN_FLIGHT}].",
)
@click.option(
    "--shadow-deadline-s",
    type=float,
    help=f"Cut-off for one shadow copy [default: {DEFAULT_SHADOW_DEADLINE_S:g}].",
)
@click.option(
    "--max-body-bytes",
    type=int,
    help=f"Largest request body accepted [default: {DEFAULT_MAX_BODY_BYTES}].",
)
@click.option(
    "--record-text/--no-record-text",
    default=None,
    help="Keep output text in records, and request bodies in --record's trace [default: off].",
)
@click.option(
    "--declare",
    multiple=True,
    metavar="KEY=VALUE",
    help="An identity fact the servers cannot report, for both launch configs (repeat):"
    " commit, gpu, driver, cuda, precision, target_revision, draft_revision.",
)
@click.option(
    "--record/--no-record",
    default=None,
    help="Write RUN_DIR/trace.jsonl, a replayable trace of the live traffic (token lengths"
    " only unless --record-text) [default: off].",
)
@click.option("--connect-timeout-s", type=float, help="Upstream connect deadline [default: 5].")
@click.option(
    "--first-byte-timeout-s", type=float, help="Deadline for upstream headers [default: 300]."
)
@click.option("--idle-timeout-s", type=float, help="Longest upstream silence [default: 120].")
@click.option("--total-timeout-s", type=float, help="Whole-request deadline [default: 1800].")
@click.option("--health-timeout-s", type=float, help="Health and info reads [default: 10].")
@click.option(
    "--drain-s", type=float, help=f"Drain time on SIGTERM [default: {DEFAULT_DRAIN_S:g}]."
)
@click.option(
    "--rotate-mb",
    type=float,
    help="Roll requests.jsonl at this size (MB) into requests-NNNNNN.jsonl [default: never].",
)
@click.option(
    "--rotate-s",
    type=float,
    help="Roll requests.jsonl after this many seconds [default: never].",
)
@click.option(
    "--require-upstreams/--no-require-upstreams",
    default=None,
    help="Exit 3 before listening when a server does not answer; --no-require-upstreams"
    " serves anyway (clients get 502 until it is up) [default: on].",
)
@click.option(
    "--workers",
    type=int,
    help="Proxy processes sharing the port (SO_REUSEPORT), each with its own records [default: 1].",
)
@_launch_options
def command(config_path: str | None, **options: Any) -> None:
    """Serve the drop-in proxy in front of a baseline and a candidate server."""
    source = config_path or "command line"
    options["declare"] = options.get("declare") or None  # none given: keep the file's
    config = build(ProxyConfig, _file_values(config_path), options, source)
    if config.require_upstreams:
        _require_upstreams(config)
    failure: str | None = None
    if config.workers > 1:
        from specproxy.proxy.workers import run_workers

        ended = run_workers(config, on_ready=_on_ready)
        run_dir, failure = ended.run_dir, ended.failure
    else:
        from specproxy.proxy.server import run_proxy

        run_dir = run(run_proxy(config, on_ready=_on_ready))
    click.echo(f"specproxy serve: stopped; records in {run_dir}", err=True)
    _write_report(run_dir)
    if failure is not None:
        raise SpecproxyError(f"serve: {failure} (run directory {run_dir} marked aborted)")


def _require_upstreams(config: ProxyConfig) -> None:
    """Exit 3 (docs/contract.md) with one line when a configured server does not answer."""
    from specproxy.proxy.lifecycle import unreachable_upstreams

    problems = run(unreachable_upstreams(config))
    if problems:
        raise BackendUnreachable(
            f"serve: not started: {'; '.join(problems)}; start it first, or give"
            " --no-require-upstreams to serve anyway (clients then get 502 until it answers)"
        )


def _write_report(run_dir: Path) -> None:
    from specproxy.report import write_reports

    try:
        paths = write_reports([run_dir], run_dir)
    except SpecproxyError as exc:  # a run with no records still stopped cleanly
        click.echo(f"specproxy serve: report not written ({exc})", err=True)
        return
    click.echo(f"specproxy serve: report in {', '.join(p.name for p in paths)}", err=True)
