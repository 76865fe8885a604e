"""`specproxy replay`: the load generator (parse options -> ReplayConfig -> ``run_replay``).

Options given on the command line win over a ``[replay]`` table of a TOML file given
with ``--config`` (keys with ``-`` or ``_``). Progress is one updating line on stderr
when stderr is a terminal. Ctrl-C (or SIGTERM) stops sending, lets in-flight requests
drain for ``--drain-s`` and writes the partial results (status ``aborted``, exit status
130). At the end the reports are written into the run directory (``report.txt``,
``.md``, ``.html``, ``.json``) and the text report is printed, followed by the replay's
own summary lines. Exit statuses: 0 completed; 1 completed, but every request to a side failed
(the line names the side and the error classes); 2 nothing to send (the files are named)
or a usage/config error; 3 some requests failed because a server (or, with ``--via``,
the proxy) could not be reached, after the results are written; 130 stopped early.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import click

from specproxy.cli.launch_options import LAUNCH_OPTIONS
from specproxy.config import build, load_toml_table
from specproxy.core.protocol.urls import ROOT_URL_HELP
from specproxy.core.records.model import Role, SendMode
from specproxy.errors import SpecproxyError
from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import ReplayOutcome, run_replay
from specproxy.replay.servers import proxy_status
from specproxy.report.write import write_reports
from specproxy.runtime import install_stop_signals, run

EXIT_CHECK_FAILED = 1  # docs/contract.md, Exit statuses: every request to a side failed
EXIT_UNREACHABLE = (
    3  # docs/contract.md, Exit statuses: a backend could not be reached (here: for some requests)
)
_FORMATS = ("native", "mooncake", "azure", "sharegpt", "prompts", "mtbench")


_OPTIONS = (  # the option table of `specproxy replay`, in --help order
    click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        help="TOML file with a [replay] table.",
    ),
    click.option(
        "--format",
        type=click.Choice(_FORMATS),
        help="Trace format [default: detected from each file].",
    ),
    click.option(
        "--skip-bad/--no-skip-bad",
        default=None,
        help="Skip and count unreadable trace lines instead of failing.",
    ),
    click.option(
        "--concat/--no-concat",
        default=None,
        help="Play several trace files one after another (default: all from 0).",
    ),
    click.option(
        "--all-turns/--first-turn",
        default=None,
        help="Prompt sets: send every turn (with earlier turns as history).",
    ),
    click.option("--baseline", help="Baseline server URL" + ROOT_URL_HELP),
    click.option("--candidate", help="Candidate server URL" + ROOT_URL_HELP),
    click.option(
        "--via",
        help="Drive a running specproxy proxy at this URL instead"
        " (--mode then names the proxy's mode; --baseline/--candidate, if given,"
        " are read for tokenizer, launch configs and snapshots only).",
    ),
    click.option(
        "--api-key",
        envvar="SPECPROXY_UPSTREAM_API_KEY",
        help="Bearer key for the servers (env SPECPROXY_UPSTREAM_API_KEY).",
    ),
    click.option(
        "--mode",
        type=click.Choice([m.value for m in SendMode]),
        help="mirror | split | alternate | passthrough [default: mirror with two"
        " servers, passthrough with one].",
    ),
    click.option(
        "--side",
        type=click.Choice([r.value for r in Role]),
        help="Side for passthrough [default: baseline].",
    ),
    click.option("--split", type=float, help="Split mode: share sent to the candidate."),
    click.option(
        "--block-size",
        type=int,
        help="Alternate mode: requests per block; a verdict needs 6 block pairs [16].",
    ),
    click.option("--speed", type=float, help="Recorded timestamps: play X times faster."),
    click.option("--rate", type=float, help="Open loop at R requests/s instead."),
    click.option(
        "--arrival",
        type=click.Choice(["poisson", "constant"]),
        help="Arrival process with --rate [default: poisson].",
    ),
    click.option(
        "--concurrency",
        type=int,
        help="Closed loop with N in flight (with --rate/--speed: a cap).",
    ),
    click.option(
        "--spread-buckets/--no-spread-buckets",
        default=None,
        help="Spread requests sharing a timestamp over the gap to the next one.",
    ),
    click.option("--max-idle-s", type=float, help="Shorten idle gaps longer than S seconds."),
    click.option(
        "--limit",
        type=int,
        help="Read at most N trace records (counted before the context, duration and"
        " other filters; see --max-requests).",
    ),
    click.option(
        "--max-requests",
        type=int,
        help="Send at most N requests per side, counted after the filters (warm-up included).",
    ),
    click.option("--duration", "duration_s", type=float, help="Stop sending after S seconds."),
    click.option(
        "--warmup",
        type=int,
        help="First N requests: sent and recorded, counted apart, in no other figure.",
    ),
    click.option("--seed", type=int, help="Seed of Poisson arrivals and split sides."),
    click.option(
        "--route",
        type=click.Choice(["generate", "completions", "chat"]),
        help="Route for synthesised and text prompts [default: generate].",
    ),
    click.option("--model", help="Model name in OpenAI bodies [default: from /v1/models]."),
    click.option(
        "--output-len",
        type=int,
        help="Max output tokens of prompts without a length [default: 256].",
    ),
    click.option(
        "--output-len-from-reference/--no-output-len-from-reference",
        default=None,
        help="Ask for the reference answer's length when known.",
    ),
    click.option("--temperature", type=float, help="Sampling temperature [default: 0]."),
    click.option(
        "--ignore-eos/--stop-at-eos",
        default=None,
        help="Text prompts: generate the full length even past EOS.",
    ),
    click.option(
        "--min-tokens/--no-min-tokens",
        default=None,
        help="Also send the minimum for recorded output lengths [default: on].",
    ),
    click.option(
        "--max-context",
        type=int,
        help="Context limit in tokens [default: the server's max_model_len]; when"
        " given, text prompts whose tokens plus output exceed it are skipped too.",
    ),
    click.option(
        "--over-context",
        type=click.Choice(["skip", "clamp"]),
        help="Length records over the context limit [default: skip].",
    ),
    click.option(
        "--max-lag-ms",
        type=float,
        help="Load met: every side's p99 send lag (warm-up excluded) is at most this"
        " [default: 10].",
    ),
    click.option("--drain-s", type=float, help="Ctrl-C: seconds to let requests finish."),
    click.option("--run-dir", type=click.Path(file_okay=False), help="Run directory."),
    click.option("--label", help="Label in the run directory's name."),
    click.option(
        "--snapshots/--no-snapshots",
        default=None,
        help="Save server snapshots before and after [default: on].",
    ),
    click.option(
        "--declare",
        multiple=True,
        metavar="KEY=VALUE",
        help="An identity fact the servers cannot report, for both launch configs (repeat):"
        " commit, gpu, driver, cuda, precision, target_revision, draft_revision.",
    ),
    *LAUNCH_OPTIONS,
    # the output-distribution check (replay.scoring)
    click.option(
        "--score-requests",
        type=int,
        help="After the run, score up to N outputs (two per pair) on the baseline with"
        " teacher-forced /generate requests, for the output-distribution check [default: 0].",
    ),
)


def _options(func: Any) -> Any:
    for opt in reversed(_OPTIONS):
        func = opt(func)
    return func


def _reports(outcome: ReplayOutcome) -> str:
    """Write the run's reports (text, Markdown, HTML, JSON) and return the text to print.

    The report module's text comes first; the replay's own lines (prompt synthesis, send
    lag and whether the load was met) follow. When the report cannot be built, the
    replay's small summary stands alone.
    """
    try:
        write_reports([outcome.run_dir], outcome.run_dir)
    except SpecproxyError as exc:
        click.echo(f"specproxy replay: report not written ({exc})", err=True)
        (outcome.run_dir / "report.txt").write_text(outcome.text + "\n", encoding="utf-8")
        return outcome.text
    report = (outcome.run_dir / "report.txt").read_text(encoding="utf-8").rstrip("\n")
    return f"{report}\n\n{outcome.footer}"


async def proxy_note(via: str, api_key: str | None) -> str | None:
    """Where a pairing proxy keeps the comparison of a ``--via`` run, or None.

    The replayer sees one answer per request (the client's view); a proxy in mirror or
    split mode records both sides and the pairs in its own run directory, named by its
    ``/_specproxy/status``.
    """
    status = await proxy_status(via, api_key)
    if status is None:
        return None
    mode, run_dir = status.get("mode"), status.get("run_dir")
    if mode not in (SendMode.MIRROR.value, SendMode.SPLIT.value) or not run_dir:
        return None
    return (
        f"comparison: in the {mode} proxy's run directory {run_dir} (the proxy pairs the two"
        f" sides itself; its report is written when it stops, `specproxy report {run_dir}`"
        " renders it now). This run saw one answer per request (the client's view, above and"
        " in its run directory), so it compares nothing itself."
    )


async def _main(config: ReplayConfig) -> tuple[ReplayOutcome, str | None]:
    stop = asyncio.Event()
    remove = install_stop_signals(stop)
    try:
        outcome = await run_replay(config, stop=stop, progress=sys.stderr)
    finally:
        remove()
    note = await proxy_note(config.via, config.api_key) if config.via else None
    return outcome, note


@click.command(context_settings={"show_default": True})
@click.argument("traces", nargs=-1, type=click.Path(dir_okay=False))
@_options
def command(traces: tuple[str, ...], config_path: str | None, **options: Any) -> None:
    """Replay TRACE files against a baseline and a candidate server and compare them."""
    file_values = load_toml_table(config_path, "replay") if config_path else {}
    options["traces"] = traces or None
    options["declare"] = options.get("declare") or None  # none given: keep the file's
    config = build(ReplayConfig, file_values, options, config_path or "command line")
    outcome, note = run(_main(config))
    report = _reports(outcome)
    # --via a pairing proxy: this run saw one answer per request, so its own comparison
    # would be empty; the pointer to the proxy's comparison is the result
    click.echo(f"{outcome.text}\n\n{note}" if note else report)
    if outcome.status != "completed":
        click.echo(
            f"specproxy replay: run {outcome.status}; partial results in {outcome.run_dir}",
            err=True,
        )
        raise click.exceptions.Exit(130)
    if outcome.unreachable:
        click.echo(
            f"specproxy replay: {outcome.unreachable} requests failed because a server could"
            f" not be reached (records say connect); results in {outcome.run_dir}",
            err=True,
        )
        raise click.exceptions.Exit(EXIT_UNREACHABLE)
    if outcome.failed_sides:
        click.echo(_all_failed_line(outcome), err=True)
        raise click.exceptions.Exit(EXIT_CHECK_FAILED)


def _all_failed_line(outcome: ReplayOutcome) -> str:
    """One line naming each side on which every request failed, and how."""
    parts = []
    for side, kinds in outcome.failed_sides.items():
        how = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items()))
        parts.append(f"every request to the {side} failed ({how})")
        if "http_4xx" in kinds:
            parts[-1] += "; is the URL the server's root (no /v1) and the route one it serves?"
    return f"specproxy replay: {'; '.join(parts)}; nothing to compare, results in {outcome.run_dir}"
