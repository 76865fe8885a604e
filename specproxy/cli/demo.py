"""`specproxy demo`: the whole product on one machine, with SIMULATED servers.

Starts a simulated non-speculative baseline and a simulated EAGLE3 candidate (matched:
same model, same explicit ``max_running_requests``), puts the proxy in front of them in
mirror mode, replays the bundled MT-Bench prompt set through the proxy with the
official request shapes, stops the proxy (which finalises ``experiment.json``), and
writes and prints the report. ``--sweep`` runs the load sweep demo instead
(``cli.demo_sweep``). Everything it produces is labelled SIMULATED: the
simulator's latency and acceptance models are knobs, not measurements of a GPU.

This module composes sibling layers (sim, proxy, replay, report), which only the
command-line layer may do.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import click

from specproxy import log
from specproxy.cli.demo_schedule import run_schedule_demo
from specproxy.cli.demo_sweep import run_sweep_demo
from specproxy.cli.file_options import config_option
from specproxy.core.records.model import SendMode
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.server import serve_proxy_in_background
from specproxy.recording.rundir import new_run_dir
from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay
from specproxy.report import write_reports
from specproxy.runtime import run
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background

MODEL = "simulated/Llama-3.1-8B-Instruct"
DRAFT = "simulated/EAGLE3-LLaMA3.1-Instruct-8B"


@dataclass(frozen=True, slots=True)
class DemoSettings:
    """The demo's few knobs: requests sent, arrival rate, output length, acceptance."""

    requests: int = 80
    rate: float = 8.0
    output_len: int = 128
    accept_prob: float = 0.75
    run_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.requests < 8:
            raise ValueError("requests must be >= 8")
        if self.rate <= 0 or self.output_len < 2:
            raise ValueError("rate must be > 0 and output_len >= 2")
        if not 0.0 <= self.accept_prob <= 1.0:
            raise ValueError("accept_prob must be between 0 and 1")


def simulated_pair(accept_prob: float) -> tuple[SimConfig, SimConfig]:
    """A matched baseline/candidate pair: only the speculative settings differ."""
    shared = {
        "model_path": MODEL,
        "max_running_requests": 48,
        "random_seed": 1234,
        "decode_step_ms": 6.0,
        "prefill_us_per_token": 20.0,
        "contention": 0.02,
        "decode_log_interval": 8,
        "seed": 7,
    }
    baseline = SimConfig(**shared)  # type: ignore[arg-type]
    candidate = SimConfig(
        **shared,  # type: ignore[arg-type]
        speculative_algorithm="EAGLE3",
        speculative_draft_model_path=DRAFT,
        speculative_num_steps=3,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=4,
        verify_step_ms=8.0,
        accept_prob=accept_prob,
    )
    return baseline, candidate


async def run_demo(settings: DemoSettings) -> tuple[Path, str]:
    """Run the demo; returns the run directory and the text report."""
    run_dir = new_run_dir(settings.run_dir, "demo")
    trace = resources.files("specproxy.data").joinpath("demo_mtbench_question.jsonl")
    base_cfg, cand_cfg = simulated_pair(settings.accept_prob)
    async with serve_in_background(base_cfg) as base_url, serve_in_background(cand_cfg) as cand_url:
        proxy_cfg = ProxyConfig(
            baseline=base_url,
            candidate=cand_url,
            mode=SendMode.MIRROR,
            port=0,
            run_dir=run_dir,
            label="demo",
        )
        async with serve_proxy_in_background(proxy_cfg) as proxy_url:
            with resources.as_file(trace) as trace_path:
                replay_cfg = ReplayConfig(
                    traces=(str(trace_path),),
                    via=proxy_url,
                    mode=SendMode.MIRROR.value,
                    rate=settings.rate,
                    arrival="poisson",
                    limit=settings.requests,
                    warmup=4,
                    route="chat",
                    output_len=settings.output_len,
                    ignore_eos=True,
                    run_dir=str(run_dir / "client"),
                    label="demo-client",
                    seed=11,
                )
                await run_replay(replay_cfg, progress=sys.stderr if sys.stderr.isatty() else None)
    paths = write_reports([run_dir], run_dir)
    text = next(p for p in paths if p.suffix == ".txt").read_text(encoding="utf-8")
    return run_dir, text


@click.command()
@config_option("demo")
@click.option("--requests", type=int, default=80, show_default=True, help="Requests to replay.")
@click.option("--rate", type=float, default=8.0, show_default=True, help="Arrivals per second.")
@click.option("--output-len", type=int, default=128, show_default=True, help="Tokens per answer.")
@click.option(
    "--accept-prob",
    type=float,
    default=0.75,
    show_default=True,
    help="Simulated chance that each drafted token is accepted.",
)
@click.option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option(
    "--sweep",
    is_flag=True,
    help="Instead: a load sweep across a known crossover, then a setting sweep and its"
    " schedule (specproxy sweep), SIMULATED.",
)
def command(
    *,
    requests: int,
    rate: float,
    output_len: int,
    accept_prob: float,
    run_dir: Path | None,
    sweep: bool,
) -> None:
    """SIMULATED baseline and EAGLE3 candidate, the proxy in mirror mode, a replay, a report."""
    if sweep:
        log.configure(level=30)
        click.echo("specproxy demo --sweep: SIMULATED servers (no GPU); starting...", err=True)
        out_dir, text = run(run_sweep_demo(run_dir))
        click.echo(text)
        click.echo(f"sweep directory: {out_dir}  (report.html, sweep.json, experiments.jsonl)")
        click.echo("setting sweep: speculative-num-steps=1,4, SIMULATED; starting...", err=True)
        sched_dir, glance = run(run_schedule_demo(run_dir / "schedule" if run_dir else None))
        click.echo(glance + f"setting sweep directory: {sched_dir}  (report.html, schedule.json)")
        return
    try:
        settings = DemoSettings(requests, rate, output_len, accept_prob, run_dir)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    log.configure(level=30)
    click.echo("specproxy demo: SIMULATED servers (no GPU); starting...", err=True)
    out_dir, text = run(run_demo(settings))
    click.echo(text)
    click.echo(
        f"run directory: {out_dir}  (report.html, report.md, requests.jsonl, experiment.json)"
    )
