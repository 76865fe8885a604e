"""`specproxy sim`: one simulated SGLang server, until SIGTERM or SIGINT.

Options use SGLang's own flag names where SGLang has the setting (``--model-path``,
``--speculative-algorithm``, ...); the rest are simulator knobs. A TOML file given
with ``--config`` may hold any of them in a ``[sim]`` table (keys with ``-`` or
``_``); options on the command line win. Prints one line ending with the server's URL
once it listens; with drift episodes (``--drift-every-s``), a second line lists those of
the first hour as ``start-end`` Unix times (``sim.variation``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from specproxy.config import build, load_toml_table
from specproxy.runtime import run
from specproxy.sim.config import ALGORITHMS, SimConfig

if TYPE_CHECKING:
    from specproxy.sim.server import RunningSim

EPISODE_HORIZON_S = 3600.0


def _announce(config: SimConfig) -> Any:
    spec = config.spec
    label = spec.algorithm if spec is not None else "no speculation"

    def on_ready(running: RunningSim) -> None:
        url = running.url
        click.echo(f"specproxy sim: simulated SGLang {config.sglang_version} ({label}) at {url}")
        variation = running.server.variation
        if variation is not None and config.drift_every_s > 0:
            spans = ", ".join(f"{a:.3f}-{b:.3f}" for a, b in variation.episodes(EPISODE_HORIZON_S))
            click.echo(f"specproxy sim: drift episodes of {url} (Unix s): {spans or 'none'}")

    return on_ready


@click.command(context_settings={"show_default": True})
@click.option(
    "--config", "config_path", type=click.Path(dir_okay=False), help="TOML file with a [sim] table."
)
@click.option("--host", help="Address to listen on [default: 127.0.0.1].")
@click.option("--port", type=int, help="Port to listen on; 0 picks a free one [default: 30000].")
@click.option("--model-path", help="Model path reported by the server.")
@click.option("--revision", help="Target model revision reported by the server.")
@click.option("--served-model-name", help="Served model name [default: the model path].")
@click.option("--api-key", help="Require 'Authorization: Bearer KEY' (not on /health*, /metrics).")
@click.option(
    "--max-running-requests",
    type=int,
    help="Concurrent requests in the batch; more wait in a queue.",
)
@click.option(
    "--speculative-algorithm",
    "--algorithm",
    type=click.Choice(ALGORITHMS, case_sensitive=False),
    help="Speculative algorithm (NONE = baseline).",
)
@click.option("--speculative-num-steps", type=int, help="Draft depth.")
@click.option("--speculative-eagle-topk", type=int, help="Draft branching factor.")
@click.option(
    "--speculative-num-draft-tokens",
    "--num-draft-tokens",
    type=int,
    help="Tokens verified per step.",
)
@click.option(
    "--speculative-draft-model-path", help="Draft model path (required by EAGLE3 and STANDALONE)."
)
@click.option(
    "--speculative-draft-model-revision",
    help="Draft model revision [default: main with a draft path].",
)
@click.option(
    "--speculative-ngram-max-bfs-breadth", type=int, help="NGRAM breadth (becomes eagle_topk)."
)
@click.option(
    "--speculative-adaptive",
    is_flag=True,
    default=None,
    help="Choose the steps at runtime from observed acceptance (EAGLE/EAGLE3, topk 1).",
)
@click.option("--random-seed", type=int, help="SGLang's --random-seed (reported only).")
@click.option("--mem-fraction-static", type=float, help="Reported memory fraction.")
@click.option(
    "--enable-metrics/--disable-metrics", default=None, help="Serve /metrics [default: on]."
)
@click.option(
    "--decode-log-interval", type=int, help="Decode steps per statistics window [default: 40]."
)
@click.option("--context-length", type=int, help="Context length in tokens [default: 131072].")
@click.option(
    "--architecture",
    help="Model architecture /model_info reports (DeepseekV3ForCausalLM: a target with NextN "
    "layers, as NEXTN needs) [default: LlamaForCausalLM].",
)
@click.option(
    "--cuda-graph-max-bs", type=int, help="Report decode CUDA graphs on, up to this batch."
)
@click.option("--max-total-tokens", type=int, help="Report this KV pool cap, in tokens.")
@click.option("--accept-prob", type=float, help="Probability that each draft token is accepted.")
@click.option(
    "--long-prompt-tokens",
    type=int,
    help="SIMULATED long-context loss: past this many prompt tokens use --long-accept-prob.",
)
@click.option("--long-accept-prob", type=float, help="Acceptance past --long-prompt-tokens.")
@click.option(
    "--decode-step-ms", type=float, help="Baseline decode step time (one running request)."
)
@click.option(
    "--verify-step-ms", type=float, help="Speculative verify step time (one running request)."
)
@click.option("--prefill-us-per-token", type=float, help="Prefill cost per uncached prompt token.")
@click.option(
    "--contention", type=float, help="Step slowdown per additional running request (0.01 = 1%)."
)
@click.option(
    "--per-token-us",
    type=float,
    help="Compute per token in a step: 1 per running request, num-draft-tokens on a verify"
    " step [default: 0].",
)
@click.option(
    "--draft-step-ms",
    type=float,
    help="Draft cost per draft step; a verify step pays num-steps of them [default: 0].",
)
@click.option("--fail-rate", type=float, help="Share of generation requests that fail.")
@click.option("--stall-rate", type=float, help="Share of streams that stall once.")
@click.option("--stall-s", type=float, help="Length of a stall in seconds.")
@click.option("--truncate-rate", type=float, help="Share of streams cut off without [DONE].")
@click.option(
    "--startup-delay-s", type=float, help="Answer 503 on /health and generation routes this long."
)
@click.option(
    "--disagree-rate",
    type=float,
    help="Share of requests whose output diverges (speculative only).",
)
@click.option(
    "--regime-sigma",
    type=float,
    help="Block-level random effects: every --regime-s seconds, multiply step costs by a new "
    "lognormal factor of median 1 and this log standard deviation [default: 0, off].",
)
@click.option("--regime-s", type=float, help="Length of one regime in seconds [default: 2].")
@click.option(
    "--drift-every-s",
    type=float,
    help="Drift episodes: mean seconds between them (exponential gaps) [default: 0, off].",
)
@click.option(
    "--drift-slowdown",
    type=float,
    help="During an episode step costs are 1 + this times higher [default: 0.8].",
)
@click.option("--drift-s", type=float, help="Length of one drift episode in seconds [default: 10].")
@click.option(
    "--speculative-accept-threshold-single",
    type=float,
    help="SGLang's accept threshold; below 1.0 the lossy mode: a sampled token is the draft's"
    " with probability 1 - min(single, acc) (speculative only) [default: 1.0].",
)
@click.option(
    "--speculative-accept-threshold-acc",
    type=float,
    help="See the single threshold [default: 1.0].",
)
@click.option("--seed", type=int, help="Seed of the acceptance model, faults and variation.")
@click.option(
    "--sample-seed",
    type=int,
    help="Sampled outputs drawn from this server's own seeded stream, so two servers with"
    " different values sample independently, as real ones do [default: by prompt, the same"
    " sample on every server].",
)
@click.option("--sglang-version", help="SGLang version to imitate [default: 0.5.16].")
@click.option(
    "--deterministic-ids/--random-ids",
    default=None,
    help="Derive ids from the request; freeze times.",
)
def command(config_path: str | None, **options: Any) -> None:
    """Run one simulated SGLang server (every response is marked as simulated).

    \b
    Latency model. A step over N running requests takes, in microseconds,
      baseline:  D*(1 + c*(N-1)) + a*N
      verify:    V*(1 + c*(N-1)) + a*K*N + S*d
    with D/V = --decode-step-ms/--verify-step-ms (x1000), c = --contention,
    a = --per-token-us, K = num draft tokens, S = num steps, d = --draft-step-ms
    (x1000). A prefill step costs --prefill-us-per-token per uncached token.
    A verify step keeps each of at most m drafts with probability p until the
    first rejection (p = --accept-prob, m = min(S, K-1); NGRAM: K-1), plus one
    bonus token: E = 1 + p + ... + p^m tokens per step on average. With
    --speculative-adaptive (EAGLE/EAGLE3 at topk 1) S, K = S + 1 and m = S follow
    the steps SGLang's EMA rule picks among 1, 3, 7 at each step (sim.adaptive).

    \b
    Per-token time is step time / tokens per step (1 on the baseline, E on a
    verify step), so with the same a and c on both servers speculation stops
    paying at the concurrency
      N* = (E*D' - V' - S*d) / (a*(K - E) + c*(V - E*D)),  D' = D*(1-c), V' = V*(1-c)
    e.g. D = V = 5000, a = 100, S = 3, K = 4, d = 500, p = 0.7, c = 0:
    E = 2.533, N* = 42.0 concurrent streams.
    """
    from specproxy.sim.server import serve_until_stopped

    file_values = load_toml_table(config_path, "sim") if config_path else {}
    source = config_path or "command line"
    config = build(SimConfig, file_values, options, source)
    run(serve_until_stopped(config, _announce(config)))
