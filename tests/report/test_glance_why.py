"""An INCONCLUSIVE verdict says why at a glance: the first unmet condition in plain words,
on the badge line of every rendering (issue 33, item 16). Real replays over loopback."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from specproxy.core.compare.verdict import VerdictLabel, decide
from specproxy.core.records.model import SendMode
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import TRACES, fast_sim

MTBENCH = str(TRACES / "mtbench_question.jsonl")


async def _replay(tmp_path: Path, pair: tuple[str, str], *args: str) -> tuple[str, dict]:
    baseline, candidate = pair
    run_dir = tmp_path / "run"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specproxy", "replay", MTBENCH, "--baseline", baseline,
        "--candidate", candidate, "--route", "chat", "--output-len", "4",
        "--run-dir", str(run_dir), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 180)
    assert proc.returncode == 0, err.decode()
    return out.decode(), json.loads((run_dir / "report.json").read_text())


@pytest.fixture
async def sim_pair() -> AsyncIterator[tuple[str, str]]:
    async with (
        serve_in_background(fast_sim()) as baseline,
        serve_in_background(fast_sim(speculative_algorithm="EAGLE")) as candidate,
    ):
        yield baseline, candidate


def _badge_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("Verdict"))


async def test_too_few_pairs_says_so_on_the_badge(
    sim_pair: tuple[str, str], tmp_path: Path
) -> None:
    """12 mirrored requests: "INCONCLUSIVE: fewer than 30 pairs (12)" first on the badge
    line, in the printed text, the Markdown and the HTML badge."""
    out, report = await _replay(tmp_path, sim_pair, "--rate", "100", "--max-requests", "12")
    assert report["verdict"]["label"] == "inconclusive"
    line = _badge_line(out)
    assert re.match(r"Verdict( \(SIMULATED\))?: INCONCLUSIVE: fewer than 30 pairs \(12\); ", line)
    assert "over 12 pairs" in " ".join(out.split())
    md = (tmp_path / "run" / "report.md").read_text()
    assert "fewer than 30 pairs (12)" in md
    html = (tmp_path / "run" / "report.html").read_text()
    badge = re.search(r'id="verdict-badge"[^>]*><b>INCONCLUSIVE</b>([^<]*)', html)
    assert badge is not None and "fewer than 30 pairs (12)" in badge.group(1)


async def test_too_few_block_pairs_says_so(sim_pair: tuple[str, str], tmp_path: Path) -> None:
    """Alternate mode, 40 requests in blocks of 8: 40 pairs but 5 block pairs."""
    out, report = await _replay(
        tmp_path, sim_pair, "--mode", "alternate", "--block-size", "8",
        "--concurrency", "2", "--max-requests", "40",
    )  # fmt: skip
    assert report["verdict"]["n_pairs"] == 40
    assert "INCONCLUSIVE: fewer than 6 block pairs (5); " in _badge_line(out)


@pytest.mark.parametrize(
    ("mode", "short"),
    [(SendMode.SPLIT, "no pairs (split mode)"), (SendMode.MIRROR, "fewer than 30 pairs (0)")],
)
def test_no_ratio_has_a_short_reason(mode: SendMode, short: str) -> None:
    """Without paired ratios the short reason still names the missing condition; a
    conclusive verdict has none."""
    verdict = decide(None, mode=mode)
    assert verdict.label is VerdictLabel.INCONCLUSIVE and verdict.short == short


def test_a_sweep_level_says_why_it_is_inconclusive() -> None:
    """The sweep's level table carries the same short reason beside the verdict."""
    from specproxy.report.sweep_report import level_row
    from tests.sweep.test_recommend_render import _level

    level = _level(4.0, 0.9).to_json()
    level.update(verdict="inconclusive", verdict_short="fewer than 6 block pairs (4)")
    assert level_row(level)[1] == "inconclusive (fewer than 6 block pairs (4))"
    level.update(verdict="faster", verdict_short="")
    assert level_row(level)[1] == "faster"
