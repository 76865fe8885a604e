"""`specproxy demo --sweep`: a load sweep across a known crossover, on SIMULATED servers.

Two in-process simulators whose per-token times cross at a concurrency that follows
from their settings (``core.load.crossover.closed_form_crossover``): a baseline and a
STANDALONE candidate that pays at low batch and loses once verifying its draft tokens
dominates the step. The sweep walks a short concurrency ladder across that point with
few pairs per level, writes ``sweep.json``, ``experiments.jsonl`` and the one-page
report, and prints it with the closed-form value beside the estimate and, last, each
side's capacity within a p90 TPOT bound (``CAPACITY_SLO``). Everything is
labelled SIMULATED. Composes sim and sweep, which only the command-line layer may do.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from specproxy.core.load.crossover import SideCost, closed_form_crossover
from specproxy.recording.rundir import new_run_dir
from specproxy.report.sweep_capacity import capacity_lines
from specproxy.report.sweep_write import write_sweep_reports
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.run import run_sweep

MODEL = "simulated/Llama-3.1-8B-Instruct"
DRAFT = "simulated/Llama-3.2-1B-Instruct"
SCALE = 2.0  # every cost doubled: the crossover is unchanged, the event rate halved
LADDER = (2, 8, 32, 64)
STEPS, DRAFT_TOKENS, ACCEPT = 3, 4, 0.7
CAPACITY_SLO = "tpot_p90_ms=20"  # the capacity's bound: both sides cross it inside the ladder


def sweep_pair() -> tuple[SimConfig, SimConfig]:
    """The demo's matched pair: only the speculative settings (and their costs) differ."""
    shared: dict[str, object] = {
        "model_path": MODEL, "max_running_requests": 256, "random_seed": 1234,
        "prefill_us_per_token": 0.0, "contention": 0.0, "decode_log_interval": 8, "seed": 7,
        "decode_step_ms": 5.0 * SCALE, "per_token_us": 100.0 * SCALE,
    }  # fmt: skip
    baseline = SimConfig(**shared)  # type: ignore[arg-type]
    candidate = SimConfig(
        **shared,  # type: ignore[arg-type]
        speculative_algorithm="STANDALONE",
        speculative_draft_model_path=DRAFT,
        speculative_num_steps=STEPS,
        speculative_eagle_topk=1,
        speculative_num_draft_tokens=DRAFT_TOKENS,
        verify_step_ms=5.0 * SCALE,
        draft_step_ms=0.5 * SCALE,
        accept_prob=ACCEPT,
    )
    return baseline, candidate


def demo_crossover() -> float | None:
    """The concurrency where the two simulators' per-token times meet (closed form)."""
    base = SideCost.baseline(decode_step_ms=5.0 * SCALE, per_token_us=100.0 * SCALE)
    cand = SideCost.speculative(
        verify_step_ms=5.0 * SCALE, num_steps=STEPS, num_draft_tokens=DRAFT_TOKENS,
        accept_prob=ACCEPT, max_accepted=min(STEPS, DRAFT_TOKENS - 1),
        draft_step_ms=0.5 * SCALE, per_token_us=100.0 * SCALE,
    )  # fmt: skip
    return closed_form_crossover(base, cand)


async def run_sweep_demo(run_dir: Path | None, *, pairs: int = 48) -> tuple[Path, str]:
    """Run the demo sweep; returns the sweep directory and the text report."""
    root = new_run_dir(run_dir, "demo-sweep")
    trace = resources.files("specproxy.data").joinpath("demo_mtbench_question.jsonl")
    base_cfg, cand_cfg = sweep_pair()
    async with serve_in_background(base_cfg) as base_url, serve_in_background(cand_cfg) as cand_url:
        with resources.as_file(trace) as trace_path:
            cfg = SweepConfig(
                traces=(str(trace_path),), baseline=base_url, candidate=cand_url,
                concurrency=",".join(str(n) for n in LADDER), pairs=pairs, block_size=16,
                output_len=24, ignore_eos=True, run_dir=str(root), slo=f"tpot_ms=25,{CAPACITY_SLO}",
                snapshots=False,
            )  # fmt: skip
            outcome = await run_sweep(cfg)
    paths = write_sweep_reports(outcome.root, outcome.root)
    truth = demo_crossover()
    note = f"closed-form per-token crossover of these simulators: {truth:.3g} concurrent streams"
    glance = "\n".join(f"SIMULATED capacity: {line}" for line in capacity_lines(outcome.doc))
    return outcome.root, paths[0].read_text(encoding="utf-8") + note + "\n" + glance + "\n"
