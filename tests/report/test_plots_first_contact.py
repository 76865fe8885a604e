"""Plots a new user can read (issue 33, item 14): CDF axes with at least three ticks, a
per-token CDF fitted to its data, titles clear of legends, the sweep's crossover before
its plots, and rates that rest on little activity saying so. The report of a real replay
over loopback with the simulator, and the drawing helpers on the shapes that failed."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

from specproxy.report import svg
from specproxy.report.figures import fit_cdf
from specproxy.report.sweep_html import render_sweep_html
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import TRACES, fast_sim
from tests.sweep.test_recommend_render import _doc

MTBENCH = str(TRACES / "mtbench_question.jsonl")
_TICK_Y = svg.HEIGHT - svg.BOTTOM + 16


def _x_ticks(figure: str) -> list[str]:
    return re.findall(
        rf'<text x="[\d.]+" y="{_TICK_Y}" text-anchor="middle">([^<]+)</text>', figure
    )


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", page, flags=re.S)


def test_a_cdf_over_300_to_950_ms_has_readable_ticks() -> None:
    """The shape that showed a lone "500": now 300, 400, ... 900 across the data."""
    points = tuple((300 + 650 * i / 99, i / 99) for i in range(100))
    figure = svg.chart("CDF: E2E", [svg.Series("baseline", points, "step")],
                       x_label="ms", y_label="fraction", log_x=True)  # fmt: skip
    ticks = [float(t) for t in _x_ticks(figure)]
    assert len(ticks) >= svg.MIN_TICKS
    assert ticks[0] <= 400 and ticks[-1] >= 800 and all(300 <= t <= 950 for t in ticks)


def test_a_per_token_cdf_with_zeros_is_cut_where_the_data_are() -> None:
    """Per-token latencies of 0 (tokens that arrived together) rule out a log axis; values
    at 3-6 ms with one at 130 ms get an axis cut at the 99th percentile, which the label
    states with the largest value."""
    values = [0.0] * 10 + [3 + 3 * i / 989 for i in range(989)] + [130.0]
    points = tuple((v, (i + 1) / len(values)) for i, v in enumerate(values))
    fitted, cut = fit_cdf([svg.Series("candidate", points, "step")])
    assert max(x for x, _ in fitted[0].points) <= 6.0
    assert cut == " (axis cut at the 99th percentile, 5.97 ms; the largest is 130 ms)"
    positive = [svg.Series("b", ((1.0, 0.5), (130.0, 1.0)), "step")]
    assert fit_cdf(positive) == (positive, "")  # all > 0: the log axis shows it whole


def test_a_long_title_moves_the_legend_below_it() -> None:
    """A title that reaches the legend's place puts the legend in the band's lower half."""
    series = [svg.Series(n, ((1.0, 0.1), (2.0, 0.9))) for n in ("baseline", "candidate")]
    short = svg.chart("CDF: TTFT", series, x_label="ms", y_label="fraction")
    long = svg.chart("CDF: per-token latency (chunk gap / tokens) (estimated tokens per chunk:"
                     " baseline 100%)", series, x_label="ms", y_label="fraction")  # fmt: skip
    assert re.findall(r'<rect x="[\d.]+" y="(\d+)" width="10"', short) == ["8", "8"]
    assert re.findall(r'<rect x="[\d.]+" y="(\d+)" width="10"', long) == ["16", "16"]


def test_the_sweep_states_its_crossover_before_its_plots() -> None:
    page = render_sweep_html(_doc())
    assert 0 < page.index("E2E crossover:") < page.index("<svg")
    assert 0 < page.index("TPOT crossover:") < page.index("<svg")


@pytest.fixture
async def report_dir(tmp_path: Path) -> Path:
    """A short real mirror replay (a few seconds of activity at most) and its reports."""
    async with (
        serve_in_background(fast_sim()) as baseline,
        serve_in_background(fast_sim(speculative_algorithm="EAGLE")) as candidate,
    ):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "specproxy", "replay", MTBENCH, "--baseline", baseline,
            "--candidate", candidate, "--route", "chat", "--output-len", "32", "--rate", "50",
            "--max-requests", "40", "--run-dir", str(tmp_path / "run"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _out, err = await asyncio.wait_for(proc.communicate(), 180)
        assert proc.returncode == 0, err.decode()
    return tmp_path / "run"


def test_the_report_of_a_real_run(report_dir: Path) -> None:
    """Every latency CDF has >= 3 x ticks, no title runs into its legend, and the tok/s
    figures say how little activity they rest on."""
    page = (report_dir / "report.html").read_text()
    cdfs = [f for f in _svgs(page) if "<title>" in f and "CDF:" in f]
    assert len(cdfs) == 4  # TTFT, E2E, TPOT, per-token; both sides drawn in each
    for figure in cdfs:
        assert len(_x_ticks(figure)) >= svg.MIN_TICKS, figure[:300]
    for figure in _svgs(page):
        title = re.search(r'font-weight="bold">([^<]*)</text>', figure)
        legend = re.findall(r'<rect x="([\d.]+)" y="(\d+)" width="10" height="9"', figure)
        if title and legend:
            start = min(float(x) for x, _ in legend)
            if svg.LEFT + len(title.group(1)) * 7.2 > start:
                assert {y for _, y in legend} == {"16"}, title.group(1)
    text = (report_dir / "report.txt").read_text()
    rows = [ln for ln in text.splitlines() if ln.strip().startswith("output tokens/s")]
    assert rows and all(re.search(r"\(over \d+\.\d s of activity\)", ln) for ln in rows), rows
