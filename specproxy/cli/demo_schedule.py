"""`specproxy demo --sweep`'s second part: a SIMULATED setting sweep whose best step count
changes with load, shown as the schedule at a glance (also the schedule tests' setup).

Simulator processes (``python -m specproxy sim``) stand in for SGLang servers: the sweep keeps
the baseline up and relaunches the candidate per ``speculative-num-steps`` value.

Baseline: ``--decode-step-ms 3 --per-token-us 480``. Candidate: EAGLE, topk 1 (so draft
tokens = steps + 1), ``--accept-prob 0.8 --verify-step-ms 3 --draft-step-ms 0.3``, the same
per-token cost; both ``--contention 0 --prefill-us-per-token 0``. A verify step over ``n``
streams at ``k`` steps costs ``3 + 0.48 n (k + 1) + 0.3 k`` ms and yields ``E(k) = sum 0.8^i``
(i = 0..k) tokens a stream, the baseline's step ``3 + 0.48 n`` ms one. Per-token ratios
(``expected_ratio``): at 1 stream 4 steps 0.56, 1 step 0.68 (4 steps best); at 8 streams
1 step 0.89, 4 steps 1.02 (1 step best); at 32 streams 1 step 1.03, 4 steps 1.31 (off).

Requests ask for ``OUTPUT_LEN`` (20) tokens. The E2E of one request counts whole verify steps,
so at 1 stream its ratio takes few values: at 12 tokens 4 steps needed 3 verify steps (ratio
0.52) in about half the requests and 4 or more (0.69 and up, no better than 1 step's 0.68) in
the rest, so the median per-pair E2E ratio landed on either and the choice at 1 stream was a
coin toss; at 20 tokens (mostly 5 to 7 verify steps at 4 steps, 10 to 12 at 1) the medians
sit near the per-token ratios. The step costs are scaled so that a request at 1 stream still
takes about 65 ms on the baseline, and the sweep about as long.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specproxy.backends.base import BackendKind
from specproxy.recording.rundir import new_run_dir
from specproxy.report.sweep_schedule import schedule_glance
from specproxy.report.sweep_write import write_sweep_reports
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.launchers import ServerCommand, free_port, override_flags, setting_flags
from specproxy.sweep.run import run_sweep

DECODE_MS, PER_TOKEN_US, DRAFT_MS, ACCEPT = 3.0, 480.0, 0.3, 0.8
OUTPUT_LEN = 20  # tokens a request asks for (module docstring)
COMMON = ["--contention", "0", "--prefill-us-per-token", "0", "--model-path", "sim/target",
          "--random-seed", "3", "--max-running-requests", "256",
          "--per-token-us", f"{PER_TOKEN_US:g}"]  # fmt: skip
BASE = ["--decode-step-ms", f"{DECODE_MS:g}"]
SPEC = ["--algorithm", "eagle", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4", "--accept-prob", f"{ACCEPT:g}",
        "--verify-step-ms", f"{DECODE_MS:g}", "--draft-step-ms", f"{DRAFT_MS:g}"]  # fmt: skip


def expected_ratio(streams: int, steps: int) -> float:
    """The closed-form per-token ratio candidate/baseline of this setup (module docstring)."""
    tokens = sum(ACCEPT**i for i in range(steps + 1))
    c = PER_TOKEN_US / 1000
    cand = (DECODE_MS + c * streams * (steps + 1) + DRAFT_MS * steps) / tokens
    return cand / (DECODE_MS + c * streams)


def candidate_argv(setting: Mapping[str, str]) -> list[str]:
    """The candidate's options for ``setting`` (``adaptive`` becomes ``--speculative-adaptive``
    at topk 1, as ``sweep.launchers`` launches SGLang)."""
    return override_flags(list(SPEC), setting_flags(setting))


@dataclass(frozen=True, slots=True)
class ScheduleSims:
    """A ``SettingLauncher`` of ``specproxy sim`` processes (same protocol as SGLang's)."""

    kind: BackendKind = BackendKind.SGLANG
    health_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0

    def _command(self, extra: list[str]) -> ServerCommand:
        port = free_port()
        argv = [sys.executable, "-m", "specproxy", "sim", "--port", str(port), *COMMON, *extra]
        return ServerCommand(tuple(argv), f"http://127.0.0.1:{port}")

    def baseline(self) -> ServerCommand:
        return self._command(BASE)

    def candidate(self, setting: Mapping[str, str]) -> ServerCommand:
        return self._command(candidate_argv(setting))

    def candidate_args(self, setting: Mapping[str, str]) -> dict[str, str]:
        argv = candidate_argv(setting)
        out: dict[str, str] = {}
        for i, item in enumerate(argv):
            if item.startswith("--"):
                nxt = argv[i + 1] if i + 1 < len(argv) else ""
                out[item[2:]] = "True" if not nxt or nxt.startswith("--") else nxt
        return out

    def check_key(self, key: str) -> None:
        if not key.startswith("speculative-"):
            raise ValueError(f"--vary {key}: not a speculative setting")


LADDER, VALUES = "1,8,32", "1,4"


async def run_schedule_demo(run_dir: Path | None, *, pairs: int = 48) -> tuple[Path, str]:
    """Run the demo's setting sweep; returns its directory and the schedule at a glance."""
    root = new_run_dir(run_dir, "demo-schedule")
    trace = resources.files("specproxy.data").joinpath("demo_mtbench_question.jsonl")
    with resources.as_file(trace) as trace_path:
        cfg = SweepConfig(
            traces=(str(trace_path),), launch="simulators", concurrency=LADDER, pairs=pairs,
            block_size=16, output_len=OUTPUT_LEN, ignore_eos=True, run_dir=str(root),
            snapshots=False,
            vary=(f"speculative-num-steps={VALUES}",),
        )  # fmt: skip
        outcome = await run_sweep(cfg, launcher=ScheduleSims())
    write_sweep_reports(outcome.root, outcome.root)
    truth = ", ".join(
        f"{n} stream{'s' if n > 1 else ''}: "
        + " / ".join(f"{k} steps {expected_ratio(n, k):.2f}" for k in (1, 4))
        for n in (1, 8, 32)
    )
    text = "\n".join(schedule_glance(outcome.doc))
    return outcome.root, f"{text}\nclosed-form per-token ratios of these simulators: {truth}\n"
