"""Two simulators with a known crossover (issue 11's setup), started as separate processes.

Baseline: ``--decode-step-ms 5 --per-token-us 100``. Candidate: STANDALONE, 3 steps, topk 1,
4 draft tokens, ``--accept-prob 0.7 --verify-step-ms 5 --draft-step-ms 0.5
--per-token-us 100``. Both: ``--contention 0`` (the simulator's default contention of 1%
per running request would move the crossover; the closed form takes it as 0 here),
``--prefill-us-per-token 0``, a high ``--max-running-requests``. ``scale`` multiplies every
cost: the crossover is unchanged (each per-token time scales alike), while the
simulator's event rate falls, which keeps a small shared machine's CPU out of the timing.

Each simulator is its own process (``python -m specproxy sim --port 0``), so its event
loop shares nothing with the sweep's client; both are stopped by their handles.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from specproxy.core.load.crossover import SideCost, closed_form_crossover

STEPS, DRAFT_TOKENS, ACCEPT = 3, 4, 0.7
_URL = re.compile(r"http://127\.0\.0\.1:\d+")


PER_TOKEN_US = 100.0


def sim_args(
    scale: float, seed: int, per_token_us: float = PER_TOKEN_US, extra: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """The baseline's and the candidate's ``specproxy sim`` options (``extra`` on both,
    e.g. ``sim.variation``'s flags; the candidate's seed is ``seed + 1``)."""

    def common(side_seed: int) -> list[str]:
        return ["--port", "0", "--max-running-requests", "1024", "--contention", "0",
                "--prefill-us-per-token", "0", "--model-path", "sim/target", "--random-seed",
                "1", "--seed", str(side_seed), "--per-token-us", f"{per_token_us * scale:g}",
                *extra]  # fmt: skip

    base = [*common(seed), "--decode-step-ms", f"{5 * scale:g}"]
    cand = [*common(seed + 1), "--algorithm", "standalone", "--speculative-draft-model-path", "sim/draft",
            "--speculative-num-steps", str(STEPS), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(DRAFT_TOKENS), "--accept-prob", str(ACCEPT),
            "--verify-step-ms", f"{5 * scale:g}", "--draft-step-ms", f"{0.5 * scale:g}"]  # fmt: skip
    return base, cand


def setup_costs(per_token_us: float = PER_TOKEN_US) -> tuple[SideCost, SideCost]:
    """The setup's baseline and candidate step costs (unscaled, ``core.load.crossover``)."""
    base = SideCost.baseline(decode_step_ms=5.0, per_token_us=per_token_us)
    cand = SideCost.speculative(
        verify_step_ms=5.0, num_steps=STEPS, num_draft_tokens=DRAFT_TOKENS, accept_prob=ACCEPT,
        max_accepted=min(STEPS, DRAFT_TOKENS - 1), draft_step_ms=0.5, per_token_us=per_token_us,
    )  # fmt: skip
    return base, cand


def true_crossover(per_token_us: float = PER_TOKEN_US) -> float:
    """The closed-form per-token crossover of the setup (``core.load.crossover``), in streams."""
    found = closed_form_crossover(*setup_costs(per_token_us))
    assert found is not None
    return found


def closed_loop_crossover(output_tokens: int, per_token_us: float = PER_TOKEN_US) -> float:
    """The crossover a closed loop sees: N* corrected for the wait to join the batch.

    At concurrency n a request that replaces a finished one arrives during a step and
    joins the batch at the next step boundary, half a step later on average; a request
    spends ``S`` steps in the batch (``(L - 1) / E`` on the candidate, ``L - 1`` on the
    baseline), so each side runs a batch of about ``n * S / (S + 1/2)``. Equating the
    per-token times at those batches moves the crossover above N*: it is the crossover
    in concurrency, the load a sweep sets (``bench/sweep_coverage.py`` judges the
    interval against it and against N*; the medians of its estimates land on it).
    """
    base, cand = setup_costs(per_token_us)
    tokens_per_step = cand.tokens_per_step
    steps_c, steps_b = (output_tokens - 1) / tokens_per_step, output_tokens - 1
    share_c, share_b = steps_c / (steps_c + 0.5), steps_b / (steps_b + 0.5)
    fixed_c = cand.step_us + cand.draft_us
    slope_c = cand.per_token_us * cand.tokens_per_request * share_c
    fixed_b, slope_b = base.step_us, base.per_token_us * share_b
    return (fixed_c / tokens_per_step - fixed_b) / (slope_b - slope_c / tokens_per_step)


def start_sim(args: Sequence[str]) -> tuple[subprocess.Popen[str], str, list[tuple[float, float]]]:
    """One ``specproxy sim`` process: the process, its URL and its drift episodes (Unix s;
    none unless ``--drift-every-s`` is among ``args``)."""
    proc = subprocess.Popen(  # noqa: S603 - argv: this interpreter, fixed words and the caller's options
        [sys.executable, "-m", "specproxy", "sim", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the simulator prints its URL once it listens
    found = _URL.search(line)
    if found is None:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        raise RuntimeError(f"simulator did not start: {line!r}")
    episodes: list[tuple[float, float]] = []
    if "--drift-every-s" in args:
        listed = proc.stdout.readline().rpartition(": ")[2].strip()
        for span in listed.split(", ") if listed != "none" else ():
            start, _, end = span.partition("-")
            episodes.append((float(start), float(end)))
    return proc, found.group(0), episodes


@contextlib.contextmanager
def sim_pair(
    base_args: Sequence[str], cand_args: Sequence[str]
) -> Iterator[tuple[tuple[str, list[tuple[float, float]]], tuple[str, list[tuple[float, float]]]]]:
    """Start a baseline and a candidate; yields ``(url, drift episodes)`` of each; stops both."""
    procs = []
    try:
        base, base_url, base_drift = start_sim(base_args)
        procs.append(base)
        cand, cand_url, cand_drift = start_sim(cand_args)
        procs.append(cand)
        yield (base_url, base_drift), (cand_url, cand_drift)
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


@contextlib.contextmanager
def crossover_sims(
    scale: float = 4.0, seed: int = 0, per_token_us: float = PER_TOKEN_US, extra: Sequence[str] = ()
) -> Iterator[tuple[str, str]]:
    """Start the baseline and the candidate; yields their URLs; stops both on exit."""
    with sim_pair(*sim_args(scale, seed, per_token_us, extra)) as ((base, _), (cand, _)):
        yield base, cand


def add_variation_options(
    parser: argparse.ArgumentParser, *, regime_sigma: float, drift_every_s: float
) -> None:
    """``sim.variation``'s settings as a bench's options (both simulators get them)."""
    parser.add_argument(
        "--regime-sigma",
        type=float,
        default=regime_sigma,
        help="Block-level random effects (0: off).",
    )
    parser.add_argument("--regime-s", type=float, default=1.0)
    parser.add_argument(
        "--drift-every-s",
        type=float,
        default=drift_every_s,
        help="Mean seconds between drift episodes (0: off).",
    )
    parser.add_argument("--drift-slowdown", type=float, default=0.8)
    parser.add_argument("--drift-s", type=float, default=4.0)  # fmt: skip


def variation_flags(args: argparse.Namespace) -> list[str]:
    """The ``specproxy sim`` flags of ``add_variation_options``' settings (none when off)."""
    flags: list[str] = []
    if args.regime_sigma > 0:
        flags += ["--regime-sigma", str(args.regime_sigma), "--regime-s", str(args.regime_s)]
    if args.drift_every_s > 0:
        flags += ["--drift-every-s", str(args.drift_every_s), "--drift-s", str(args.drift_s),
                  "--drift-slowdown", str(args.drift_slowdown)]  # fmt: skip
    return flags


def write_trace(path: Path, requests: int, output_tokens: int, input_tokens: int = 16) -> Path:
    """A lengths-only native trace of identical requests (every request the same length)."""
    line = json.dumps({"t": 0, "input_tokens": input_tokens, "output_tokens": output_tokens})
    path.write_text((line + "\n") * requests, encoding="utf-8")
    return path
