"""Ctrl-C during `specproxy sweep`: finished levels are kept and the sweep is marked aborted."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.testing.crossover_setup import write_trace


def _sim(**overrides: object) -> SimConfig:
    settings: dict[str, object] = {"decode_step_ms": 1.0, "verify_step_ms": 1.2,
                                   "prefill_us_per_token": 0.0, "contention": 0.0}  # fmt: skip
    settings.update(overrides)
    return SimConfig(**settings)  # type: ignore[arg-type]


async def test_sigint_keeps_finished_levels_and_marks_the_sweep_aborted(tmp_path: Path) -> None:
    """SIGINT after the first batch's line: exit 130, status aborted, that level still there."""
    trace = write_trace(tmp_path / "trace.jsonl", 100, 8)
    root = tmp_path / "sweep"
    async with (
        serve_in_background(_sim()) as base,
        serve_in_background(_sim(speculative_algorithm="EAGLE")) as cand,
    ):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "specproxy", "sweep", str(trace), "--baseline", base,
            "--candidate", cand, "--concurrency", "1,2", "--pairs", "400", "--block-size", "8",
            "--output-len", "8", "--run-dir", str(root), "--no-snapshots",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        seen = []
        while True:  # synchronise on the line the sweep prints after each batch
            line = (await proc.stderr.readline()).decode()
            assert line, f"the sweep ended before its first batch: {seen}"
            seen.append(line)
            if "batch 1 done" in line:
                break
        proc.send_signal(signal.SIGINT)
        out, _ = await proc.communicate()
    assert proc.returncode == 130
    doc = json.loads((root / "sweep.json").read_text())
    assert doc["status"] == "aborted"
    assert doc["recommendation"] == "simulated"  # simulated servers: gated before anything else
    finished = seen[-1].split(":")[1].strip()  # "specproxy sweep: c1: batch 1 done, ..."
    levels = {f"c{lv['level']:g}": lv for lv in doc["levels"]}
    assert finished in levels and levels[finished]["pairs"] == 2 * (
        8 - 1
    )  # two blocks less cool-down
    lines = [json.loads(x) for x in (root / "experiments.jsonl").read_text().splitlines()]
    assert any(x["level"] == levels[finished]["level"] for x in lines)
    assert b"aborted" in out or (root / "report.txt").is_file()
