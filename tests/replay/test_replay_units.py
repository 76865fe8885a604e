"""An alternate replay's verdict rests on block pairs, end to end over loopback simulators."""

from __future__ import annotations

from pathlib import Path

from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay
from specproxy.report.build import build_report
from specproxy.report.load import load_run_dir
from specproxy.sim.server import serve_in_background
from specproxy.testing.crossover_setup import write_trace
from tests.replay.conftest import fast_sim


async def _alternate(tmp_path: Path, block_size: int, requests: int) -> Path:
    """The candidate 4x slower per step than the baseline (no speculation on either side)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    trace = write_trace(tmp_path / "trace.jsonl", requests, 12)
    async with (
        serve_in_background(fast_sim(decode_step_ms=0.5)) as baseline,
        serve_in_background(fast_sim(decode_step_ms=2.0)) as candidate,
    ):
        cfg = ReplayConfig(traces=(str(trace),), baseline=baseline, candidate=candidate,
                           mode="alternate", block_size=block_size, concurrency=2,
                           output_len=12, ignore_eos=True, run_dir=str(tmp_path / "run"),
                           snapshots=False)  # fmt: skip
        return (await run_replay(cfg)).run_dir


async def test_two_block_pairs_give_no_verdict_however_large_the_effect(tmp_path: Path) -> None:
    """40 pairs in 2 block pairs, the candidate about 4x slower in every one: inconclusive,
    and the reason says the verdict needs 6 block pairs; the same effect over 8 block pairs
    (40 pairs) is called slower."""
    few = build_report([load_run_dir(await _alternate(tmp_path / "few", 20, 40))])
    e2e = few.paired[0]
    assert e2e.n == 40 and e2e.units == 2 and e2e.interval is not None
    assert e2e.interval.point > 2.0
    assert few.verdict.label.value == "inconclusive"
    assert "a verdict needs at least 6 block pairs" in few.verdict.reason
    many = build_report([load_run_dir(await _alternate(tmp_path / "many", 5, 40))])
    assert many.paired[0].units == 8
    assert many.verdict.label.value == "slower"
