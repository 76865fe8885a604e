"""Rendering: text, Markdown, one self-contained HTML page, JSON, and write_reports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specproxy.core.compare.acceptance import AcceptanceSummary
from specproxy.core.records.model import Role, SendMode
from specproxy.report.build import build_report
from specproxy.report.document.detail import _acceptance_line
from specproxy.report.load import load_run_dir
from specproxy.report.model import Report
from specproxy.report.write import render, write_reports
from specproxy.testing.fabricate import experiment, make_records, side_histograms, write_run_dir
from tests.oracles.plots import itl_cdf


def _report(tmp_path: Path, *, simulated: bool, name: str = "run") -> Report:
    recs = make_records(
        n_pairs=120,
        true_ratio=0.8,
        accept=lambda rng: rng.uniform(1.0, 4.0),
        categories=("code", "chat"),
        chunks=True,
        fail_cand=0.03,
        fail_base=0.03,
        disagree=0.05,
        seed=6,
    )
    run = write_run_dir(tmp_path / name, recs, experiment(simulated=simulated))
    return build_report([load_run_dir(run)])


@pytest.fixture
def simulated(tmp_path: Path) -> Report:
    return _report(tmp_path, simulated=True)


def test_text_states_verdict_and_simulated_label(simulated: Report) -> None:
    """The terminal report names the verdict and says SIMULATED in title, banner and verdict."""
    text = render(simulated, "text")
    assert simulated.verdict.label.value == "faster"
    assert "Verdict (SIMULATED): FASTER" in text
    assert text.startswith("[SIMULATED] specproxy report: EAGLE3 vs baseline")
    assert "SIMULATED: every number below comes from simulated servers" in text
    assert "Recommendation: simulated" in text
    assert "mirror mode" in text and "contend" in text


def test_real_report_has_no_simulated_label_and_recommends(tmp_path: Path) -> None:
    """A non-simulated report with every condition met carries a recommendation, no label."""
    report = _report(tmp_path, simulated=False)
    text = render(report, "text")
    assert "SIMULATED" not in text
    assert report.recommendation.text is not None
    assert f"Recommendation: {report.recommendation.text[:40]}" in text
    assert "MISSING" not in text


def test_markdown_has_tables(simulated: Report) -> None:
    """Markdown output has a heading per section and pipe tables with separator rows."""
    md = render(simulated, "md")
    assert md.startswith("# [SIMULATED] specproxy report")
    assert "## Paired comparison" in md
    header = (
        "| metric | median per-pair ratio [95% CI] | ratio of medians [95% CI] | level | "
        "rests on | change | ranked pairs | candidate faster in |"
    )
    assert header in md
    assert "|---|---|---|---|---|---|" in md
    assert re.search(
        r"^\| E2E \| 0\.\d{3} \[0\.\d{3}, 0\.\d{3}\] \| 0\.\d{3} \[0\.\d{3}, 0\.\d{3}\] \| 9\d\.\d% \|",
        md,
        re.M,
    )


def test_html_is_one_self_contained_page(simulated: Report) -> None:
    """HTML is one page with inline SVG figures and no external address, script or link."""
    page = render(simulated, "html")
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") >= 7
    assert "http://" not in page and "https://" not in page
    for banned in ("<script", "<link", "src=", "url("):
        assert banned not in page
    assert "SIMULATED" in page
    assert "SIMULATED CDF: TTFT" in page
    assert "SIMULATED E2E ratio (candidate/baseline) versus accept length" in page


def test_json_is_the_model_with_infinities_as_null(simulated: Report) -> None:
    """JSON output parses, holds the verdict, and writes infinite quantiles as null."""
    data = json.loads(render(simulated, "json"))
    assert data["verdict"]["label"] == "faster"
    assert data["simulated"] is True
    cand = next(s for s in data["sides"] if s["side"] == "candidate")
    e2e = cand["latency"][0]
    assert e2e["metric"] == "e2e_us"
    assert e2e["with_failures"][2] is None  # p99 lands on a failure (3% failed)


def test_write_reports_writes_every_format(tmp_path: Path) -> None:
    """write_reports writes each format's file with that format's rendering of the runs' report."""
    run = write_run_dir(tmp_path / "run", make_records(n_pairs=40), experiment())
    paths = write_reports([run], tmp_path / "out")
    assert [p.name for p in paths] == ["report.txt", "report.md", "report.html", "report.json"]
    report = build_report([load_run_dir(run)])
    written = {p.suffix: p.read_text(encoding="utf-8") for p in paths}
    for suffix, fmt in ((".txt", "text"), (".md", "md"), (".html", "html"), (".json", "json")):
        assert written[suffix] == render(report, fmt), fmt
    assert written[".html"].lower().startswith("<!doctype html>")
    assert written[".md"].startswith("# ")
    doc = json.loads(written[".json"])
    assert doc["verdict"]["label"] == report.verdict.label.value


def test_report_without_experiment_json_lists_missing_conditions(tmp_path: Path) -> None:
    """Records without experiment.json still render, with the missing conditions listed."""
    run = write_run_dir(tmp_path / "bare", make_records(n_pairs=40), None)
    text = render(build_report([load_run_dir(run)]), "text")
    assert "Recommendation: none (conditions not met" in text
    assert "MISSING  launch_configs_complete" in text
    assert "no experiment.json" in text


def test_itl_cdf_from_logs_matches_records(tmp_path: Path) -> None:
    """The per-token latency CDF drawn from merged itl_us logs matches the one from records
    (logs keep 3 significant digits)."""
    recs = make_records(n_pairs=200, chunks=True, accept=lambda rng: rng.uniform(1, 4), seed=3)
    mine = [r for r in recs if r.side is Role.CANDIDATE and r.ok]
    from_records = itl_cdf(Role.CANDIDATE, mine, None)
    from_log = itl_cdf(Role.CANDIDATE, mine, side_histograms(recs, Role.CANDIDATE)["itl_us"])
    assert from_records is not None and from_log is not None
    assert from_records.n == from_log.n
    for q in (0.25, 0.5, 0.9):
        a = next(v for v, f in from_records.points if f >= q)
        b = next(v for v, f in from_log.points if f >= q)
        assert b == pytest.approx(a, rel=0.02)


def test_degenerate_runs_still_render(tmp_path: Path) -> None:
    """A one-sided passthrough run and a rejected run with no records render every format
    with an inconclusive verdict and the missing conditions listed."""
    one_side = [
        r for r in make_records(n_pairs=30, mode=SendMode.PASSTHROUGH) if r.side is Role.BASELINE
    ]
    passthrough = write_run_dir(tmp_path / "pass", one_side, experiment(mode="passthrough"))
    rejected_exp = experiment(status="rejected")
    rejected = write_run_dir(tmp_path / "rejected", [], rejected_exp, histograms=False)
    common = {
        "raw_measurements_saved",
        "failures_counted_both_sides",
        "candidate_fails_no_more_often",
        "greedy_outputs_compared",
    }
    expected = {passthrough: common, rejected: common | {"compatibility_scope_stated"}}
    for run, missing in expected.items():
        report = build_report([load_run_dir(run)])
        assert report.verdict.label.value == "inconclusive"
        assert report.recommendation.text is None
        assert {c.key for c in report.recommendation.missing} == missing
        for fmt in ("text", "md", "html"):
            out = " ".join(render(report, fmt).split())  # the text format wraps long lines
            assert "inconclusive" in out.lower() and report.verdict.reason in out, fmt
            assert all(key in out for key in missing), fmt
        doc = json.loads(render(report, "json"))
        assert doc["verdict"]["label"] == "inconclusive"
        assert doc["recommendation"]["text"] is None
        unmet = {c["key"] for c in doc["recommendation"]["conditions"] if not c["met"]}
        assert unmet == missing
    text = render(build_report([load_run_dir(rejected)]), "text")
    assert "run status is rejected" in text


def test_a_baseline_chunk_estimate_is_reported_as_an_estimator_check() -> None:
    """On the baseline, tokens per stream event are not called an accept length."""
    summary = AcceptanceSummary(
        side=Role.BASELINE,
        n_requests=10,
        request_weighted_mean=1.02,
        token_weighted_mean=1.01,
        quantiles=None,
        sources=(("chunk_estimate", 10),),
        exactness="estimated",
        distribution=(),
        step_histogram=None,
    )
    line = _acceptance_line(summary)
    assert "tokens per stream event" in line
    assert "accept length" not in line
