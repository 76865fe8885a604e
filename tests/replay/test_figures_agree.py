"""One run directory, every output: experiment.json, the text, Markdown, HTML and JSON
reports and what ``specproxy replay`` prints all show the same counts and percentiles."""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from specproxy.core.compare.pairing import Metric
from specproxy.core.measurement.histogram import PERCENTILE_RULE, SUMMARY_PERCENTILES
from specproxy.core.records.tally import format_ms
from specproxy.replay.summary import render_summary
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import TRACES, fast_sim

SIDES = ("baseline", "candidate")
WARMUP = 4
LIMIT = 30
_ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


async def _replay_cli(baseline: str, candidate: str, run_dir: Path) -> str:
    """`python -m specproxy replay ...` as a real process; returns what it printed."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specproxy", "replay", str(TRACES / "sharegpt_v3_first200.json"),
        "--baseline", baseline, "--candidate", candidate, "--mode", "mirror",
        "--limit", str(LIMIT), "--warmup", str(WARMUP), "--rate", "40", "--seed", "3",
        "--route", "chat", "--output-len", "24", "--ignore-eos", "--max-lag-ms", "250",
        "--run-dir", str(run_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=_ENV,
    )  # fmt: skip
    async with asyncio.timeout(120):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return out.decode()


def _rows_text(text: str, label: str) -> list[list[str]]:
    """Cells of every text-table row whose first cell is ``label`` (columns: 2+ spaces)."""
    pattern = re.compile(rf"^  {re.escape(label)}(?:  |$)")
    return [re.split(r"\s{2,}", ln.strip()) for ln in text.splitlines() if pattern.match(ln)]


def _rows_md(md: str, label: str) -> list[list[str]]:
    out = []
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and cells[0] == label:
            out.append(cells)
    return out


def _rows_html(page: str, label: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", page)
    cells = [[html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", r)] for r in rows]
    return [c for c in cells if c and c[0] == label]


def _side_rows(exp_sides: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """The per-side table rows experiment.json's figures must print as."""

    def both(get: Any) -> tuple[str, str]:
        return get(exp_sides["baseline"]), get(exp_sides["candidate"])

    rows = {
        "requests (warm-up excluded)": both(lambda s: f"{s['requests']:,}"),
        "completed": both(lambda s: f"{s['completed']:,}"),
        "failed": both(
            lambda s: ", ".join(f"{k} {n}" for k, n in sorted(s["failed_by_kind"].items())) or "0"
        ),
    }
    for metric in Metric:
        for q in SUMMARY_PERCENTILES:
            rows[f"{metric.label} p{q:g}"] = both(
                lambda s, m=metric, q=q: format_ms(s[m.value][f"p{q:g}"])
            )
        rows[f"{metric.label} p99, failures as worst"] = both(
            lambda s, m=metric: (
                "failed" if s[m.value]["with_failures"]["p99"] is None and s["failed"]
                else format_ms(s[m.value]["with_failures"]["p99"])
            )
        )  # fmt: skip
    rows["send lag p99 (warm-up excluded)"] = both(
        lambda s: format_ms(s["send_lag_us"]["p99"]) + (" LAGGED" if s["send_lag_us"]["lagged"] else "")
    )  # fmt: skip
    return rows


async def test_experiment_reports_and_printed_summary_agree(tmp_path: Path) -> None:
    """A real mirror replay with warm-up and candidate failures: experiment.json, report.json,
    the text, Markdown and HTML reports and the printed summary carry the same figures."""
    run_dir = tmp_path / "run"
    async with (
        serve_in_background(fast_sim()) as baseline,
        serve_in_background(fast_sim(speculative_algorithm="EAGLE", fail_rate=0.2, seed=5)) as cand,
    ):
        printed = await _replay_cli(baseline, cand, run_dir)
    exp = json.loads((run_dir / "experiment.json").read_text(encoding="utf-8"))
    summary = exp["summary"]
    sides = summary["sides"]
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    text = (run_dir / "report.txt").read_text(encoding="utf-8")
    md = (run_dir / "report.md").read_text(encoding="utf-8")
    page = (run_dir / "report.html").read_text(encoding="utf-8")

    # The run has what the rules are about: warm-up on both sides, failures on one.
    records = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    for side in SIDES:
        mine = [r for r in records if r["side"] == side]
        warm = [r for r in mine if r["warmup"]]
        s = sides[side]
        assert s["warmup_excluded"] == len(warm) == WARMUP
        assert s["requests"] == len(mine) - WARMUP == s["completed"] + s["failed"]
        assert s["sent"] == len(mine)
    assert sides["candidate"]["failed"] > 0 and sides["baseline"]["failed"] == 0

    # experiment.json == report.json, field by field, for every count and percentile.
    by_side = {s["side"]: s for s in report["sides"]}
    for side in SIDES:
        e, r = sides[side], by_side[side]
        assert (e["requests"], e["completed"], e["warmup_excluded"], e["warmup_failed"]) == (
            r["requests"], r["completed"], r["warmup_excluded"], r["warmup_failed"]
        )  # fmt: skip
        assert e["failed_by_kind"] == dict(r["failures"])
        for lat in r["latency"]:
            ours = e[lat["metric"]]
            assert [ours[f"p{q:g}"] for q in SUMMARY_PERCENTILES] == lat["ok"]
            assert list(ours["with_failures"].values()) == lat["with_failures"]
            assert ours["count"] == lat["n_ok"]
        assert e["send_lag_us"]["p99"] == r["send_lag_p99_us"]
        itl = next(h for h in report["histograms"] if h["side"] == side and h["metric"] == "itl_us")
        assert [e["itl_us"][f"p{q:g}"] for q in SUMMARY_PERCENTILES] == [
            itl["p50_us"], itl["p90_us"], itl["p99_us"]
        ]  # fmt: skip
        assert e["itl_us"]["count"] == itl["count"] > 0

    # Acceptance: the replay's own tally is the report's definition.
    for acc in report["acceptance"]:
        e = sides[acc["side"]]
        assert (e["accept_length_mean"], e["accept_length_token_weighted"]) == (
            acc["request_weighted_mean"], acc["token_weighted_mean"]
        )  # fmt: skip
        assert (e["accept_length_requests"], e["accept_length_exactness"]) == (
            acc["n_requests"], acc["exactness"]
        )  # fmt: skip
    assert sides["candidate"]["accept_length_requests"] == sides["candidate"]["completed"]
    assert (
        exp["acceptance_metrics"]["mean_accept_length"] == sides["candidate"]["accept_length_mean"]
    )

    # The three rendered formats print exactly those figures, and name the percentile rule.
    for label, (b_cell, c_cell) in _side_rows(sides).items():
        for found in (_rows_text(text, label), _rows_md(md, label), _rows_html(page, label)):
            assert [row[1:] for row in found] == [[b_cell, c_cell]], label
    for side in SIDES:
        itl_cells = [format_ms(sides[side]["itl_us"][f"p{q:g}"]) for q in SUMMARY_PERCENTILES]
        for found in (_rows_text(text, side), _rows_md(md, side), _rows_html(page, side)):
            itl_rows = [row for row in found if row[1] == "itl_us"]
            assert [row[3:6] for row in itl_rows] == [itl_cells], side
    for rendered in (" ".join(f.split()) for f in (text, md, html.unescape(page))):
        assert PERCENTILE_RULE in rendered
        assert "p99 send lag at most 250 ms on every side" in rendered

    # What `specproxy replay` printed: the text report, then its own lines, with the same
    # load-met verdict; the full replay summary (the fallback print) shows the same figures.
    assert printed.startswith(text.rstrip("\n"))
    lagged = [s for s in SIDES if sides[s]["send_lag_us"]["lagged"]]
    assert summary["load_met"] is (not lagged)
    footer = printed[len(text.rstrip("\n")) :]
    assert ("LOAD NOT MET" in footer) is bool(lagged)
    assert "limit 250.0 ms at p99" in footer
    full = render_summary(summary)
    for side in SIDES:
        s = sides[side]
        assert f"{side}: sent {s['sent']}, warm-up {WARMUP}" in full
        assert f"counted {s['requests']}: completed {s['completed']}, failed {s['failed']}" in full
        for name, key in (("TTFT", "ttft_us"), ("E2E", "e2e_us"), ("ITL", "itl_us")):
            cells = "  ".join(
                f"p{q:g} {format_ms(s[key][f'p{q:g}'], '-'):>9}" for q in SUMMARY_PERCENTILES
            )
            assert f"  {name:<5} {cells}" in full
