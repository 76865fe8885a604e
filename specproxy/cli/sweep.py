"""`specproxy sweep`: the load and setting sweep (parse options -> SweepConfig -> ``run_sweep``).

Options given on the command line win over a ``[sweep]`` table of a TOML file given with
``--config`` (keys with ``-`` or ``_``; ladders and ``vary`` as lists or strings). At the
end the sweep report is written into the sweep directory (``report.txt``, ``.md``,
``.html``) and the text is printed. Ctrl-C (or SIGTERM) ends the running batch, keeps
every finished level, marks the sweep ``aborted`` and exits with status 130.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import click

from specproxy.cli.launch_options import LAUNCH_OPTIONS
from specproxy.config import build, load_toml_table
from specproxy.core.protocol.urls import ROOT_URL_HELP
from specproxy.report.sweep_write import write_sweep_reports
from specproxy.runtime import install_stop_signals, run
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.run import SweepOutcome, run_sweep

_HELP = """Run the alternate-mode comparison at a ladder of loads, per setting value.

\b
Load sweep:     specproxy sweep TRACE... --baseline URL --candidate URL
                    --concurrency 1,2,4,8,16,32,64   (or --rate 0.5,1,2,4)
Setting sweep:  specproxy sweep TRACE... --launch deploy/sglang/X.toml
                    --vary speculative-num-draft-tokens=2,4,8 --concurrency 1,4,16,64

\b
Each level is one alternate-mode experiment in its own folder (DIR/c16/, DIR/r2/),
sent in batches (DIR/c16/batch-01/...), each an ordinary replay run directory with
its experiment.json and records. A batch is two blocks (one ABBA unit, two block
pairs); a concurrency level n uses blocks of max(--block-size, 4n) requests, whose
last n are a cool-down (sent to keep n in flight, not counted). The intervals rest on
the spread between block pairs, and a level needs at least 6 before it may stop, at
high load more than --pairs pairs. Order: rounds alternate up and down the ladder and
each round adds one batch to each open level, so drift lands on every level alike.
Stopping rule: after each batch the level's report is rebuilt from all its batches;
with 6 block pairs or more the level stops once its verdict is faster, slower or
no_difference, or at --pairs pairs.

\b
Prompts: by default every batch sends the trace from its first request, so each
level sees the same prompts (levels differ only in load). --fresh-prompts makes
each batch, at any level, continue the trace where the previous batch stopped, so
no request is sent twice: use it for a candidate that learns from its traffic
(NGRAM drafts a prompt it has seen far better than a new one, so repeats would
measure a warmed cache). The trace must then hold enough requests (each batch
takes two blocks); levels still open when it runs out close unfinished. In a
setting sweep the one cursor carries on across values, so the kept baseline is
never sent a prompt twice.

\b
Best setting per load (setting sweep): at each level, the value whose verdict is
faster with the smallest median per-pair E2E ratio (TPOT beside), its interval
against the baseline and against the runner-up, or "off" where no value is faster.
Writes DIR/schedule.json (level -> setting or off) and, for a concurrency ladder of
speculative-num-steps values, DIR/speculative-adaptive-config.json (SGLang 0.5.16's
--speculative-adaptive-config: steps per batch-size range). The value "adaptive"
(--vary speculative-num-steps=1,3,5,adaptive) launches --speculative-adaptive at
topk 1 and is compared with the best fixed value at each level.

\b
Per level (from the level's ordinary report): verdict, median per-pair E2E and TPOT
ratio candidate/baseline with 95% intervals, pairs, accept length, failures per
side, output tokens/s per side and goodput (requests/s within --slo) per side.
The crossover: the load where the ratio crosses 1, for E2E and TPOT, with an
interval from the per-level intervals (core.load.crossover), or "pays everywhere / nowhere
tested". With --launch and --vary (repeatable: a grid walked one key at a time),
the baseline is started once and kept up; the candidate is relaunched per value;
a value the server refuses is a `rejected` experiment with its own error, a failed
preflight `preflight_failed`; the ladder runs at every accepted value.

\b
Capacity (--slo ttft_p99_ms=500,tpot_p99_ms=40,...): each side's highest load at which
every percentile bound holds (a failed request violates it), with a 95% bootstrap
interval over the levels' block pairs, the requests/s served there and the ratio
candidate/baseline; it heads the report.

\b
Writes DIR/sweep.json (levels, crossover, recommendation), DIR/experiments.jsonl
(one line per experiment) and DIR/report.{txt,md,html}; `specproxy report DIR`
re-renders it. Exit status: 0 done, 130 interrupted, 2 usage, 3 unreachable.
"""


def _options(func: Any) -> Any:
    opts = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="TOML file with a [sweep] table."),
        click.option("--baseline", help="Baseline server URL, load sweep"+ROOT_URL_HELP),
        click.option("--candidate", help="Candidate server URL, load sweep"+ROOT_URL_HELP),
        click.option("--concurrency", help="Closed-loop ladder: comma-separated in-flight levels."),
        click.option("--rate", help="Open-loop ladder: comma-separated request rates (req/s)."),
        click.option("--pairs", type=int,
                     help="Most pairs per level, once it has 6 block pairs [default: 200]."),
        click.option("--block-size", type=int,
                     help="Requests per alternate block, at least 4n at concurrency n "
                     "[default: 16]."),
        click.option("--warmup", type=int, help="First N requests of each batch not counted."),
        click.option("--run-dir", type=click.Path(file_okay=False), help="Sweep directory."),
        click.option("--slo", metavar="ttft_p99_ms=X,tpot_p99_ms=Y,e2e_p95_ms=Z",
                     help="Capacity: per-request bounds at a percentile (METRIC_pNN_ms, METRIC "
                     "ttft, tpot or e2e); ttft_ms=X,tpot_ms=Y: the goodput objective."),
        click.option("--launch", type=click.Path(dir_okay=False),
                     help="SGLang launch description (deploy/sglang/*.toml) for --vary."),
        click.option("--vary", multiple=True, metavar="KEY=V1,V2",
                     help="A speculative key and its values (repeat: walked one key at a time)."),
        click.option("--format", help="Trace format [default: detected]."),
        click.option("--route", type=click.Choice(["generate", "completions", "chat"]),
                     help="Route for synthesised and text prompts [default: generate]."),
        click.option("--model", help="Model name in OpenAI bodies."),
        click.option("--output-len", type=int, help="Max output tokens without a length [256]."),
        click.option("--ignore-eos/--stop-at-eos", default=None, help="Generate the full length."),
        click.option("--temperature", type=float, help="Sampling temperature [default: 0]."),
        click.option("--arrival", type=click.Choice(["poisson", "constant"]),
                     help="Arrival process of a rate ladder [default: poisson]."),
        click.option("--seed", type=int, help="Seed of arrivals (each batch adds 1000)."),
        click.option("--fresh-prompts/--same-prompts", default=None,
                     help="Each batch continues the trace: no request sent twice [same]."),
        click.option("--max-context", type=int, help="Context limit in tokens."),
        click.option("--skip-bad/--no-skip-bad", default=None, help="Skip unreadable lines."),
        click.option("--snapshots/--no-snapshots", default=None, help="Server snapshots [on]."),
        click.option("--declare", multiple=True, metavar="KEY=VALUE",
                     help="An identity fact for both launch configs (repeat)."),
        click.option("--drain-s", type=float, help="Ctrl-C: seconds to let requests finish."),
        click.option("--api-key", envvar="SPECPROXY_UPSTREAM_API_KEY",
                     help="Bearer key for the servers (env SPECPROXY_UPSTREAM_API_KEY)."),
        *LAUNCH_OPTIONS,
    ]  # fmt: skip
    for opt in reversed(opts):
        func = opt(func)
    return func


def _note(line: str) -> None:
    click.echo(f"specproxy sweep: {line}", err=True)


async def _main(config: SweepConfig) -> SweepOutcome:
    stop = asyncio.Event()
    remove = install_stop_signals(stop)
    try:
        return await run_sweep(config, stop=stop, progress=sys.stderr, notify=_note)
    finally:
        remove()


@click.command(help=_HELP)
@click.argument("traces", nargs=-1, type=click.Path(dir_okay=False))
@_options
def command(traces: tuple[str, ...], config_path: str | None, **options: Any) -> None:
    file_values = load_toml_table(config_path, "sweep") if config_path else {}
    options["traces"] = traces or None
    options["vary"] = options.get("vary") or None
    options["declare"] = options.get("declare") or None
    config = build(SweepConfig, file_values, options, config_path or "command line")
    outcome = run(_main(config))
    paths = write_sweep_reports(outcome.root, Path(outcome.root))
    click.echo(paths[0].read_text(encoding="utf-8"), nl=False)
    click.echo(f"sweep directory: {outcome.root} (sweep.json, experiments.jsonl, report.html)")
    if outcome.status != "completed":
        click.echo(f"specproxy sweep: {outcome.status}; finished levels kept in {outcome.root}",
                   err=True)  # fmt: skip
        raise click.exceptions.Exit(130)
