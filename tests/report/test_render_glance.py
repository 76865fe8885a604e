"""The report opens with the answer: verdict badge, recommendation, key numbers; then the
candidate's speculation, both launches side by side, the workload as rows, and figures
that say what their axes really are."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from specproxy.core.records.model import Role
from specproxy.report import svg
from specproxy.report.build import build_report
from specproxy.report.figures import itl_histogram
from specproxy.report.launch_rows import shown, workload_rows
from specproxy.report.load import load_run_dir
from specproxy.report.model import Cdf, Report, to_jsonable
from specproxy.report.render_html import render_html
from specproxy.report.render_md import render_md
from specproxy.report.render_text import render_text
from specproxy.testing.fabricate import experiment, make_records, write_run_dir
from tests.oracles.plots import alternate_blocks


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    recs = make_records(
        n_pairs=80,
        true_ratio=0.8,
        accept=lambda rng: rng.uniform(1.0, 4.0),
        categories=("code", "chat", "math"),
        chunks=True,
        seed=3,
    )
    run = write_run_dir(tmp_path_factory.mktemp("glance") / "run", recs, experiment(simulated=True))
    return build_report([load_run_dir(run)])


def _cells(text: str, label: str) -> list[str]:
    """The cells after ``label`` on the first text-table line that starts with it."""
    line = next(ln for ln in text.splitlines() if ln.strip().startswith(label + "  "))
    return re.split(r"\s{2,}", line.strip())[1:]


def test_glance_comes_first_in_every_format(report: Report) -> None:
    """Text, Markdown and HTML all put the verdict badge line before the detail sections."""
    verdict = f"Verdict (SIMULATED): {report.verdict.label.value.upper()}: E2E ratio"
    for page in (render_text(report), render_md(report)):
        assert page.index("At a glance") < page.index(verdict) < page.index("Paired comparison")
    page = render_html(report)
    assert (
        page.index('id="verdict-badge"') < page.index('class="banner"') < page.index('id="paired"')
    )


def test_badge_matches_report_json(report: Report) -> None:
    """The HTML badge's data-verdict and text are the verdict, ratio and pairs of report.json."""
    data = json.loads(json.dumps(to_jsonable(report)))
    page = render_html(report)
    badge = re.search(
        r'<div id="verdict-badge" class="badge (\w+)" data-verdict="(\w+)"><b>([A-Z ]+)</b>([^<]*)',
        page,
    )
    assert badge is not None
    kind, value, label, text = badge.groups()
    assert kind == value == data["verdict"]["label"]
    assert label == data["verdict"]["label"].replace("_", " ").upper()
    assert f"{data['verdict']['interval']['point']:.3f}" in text
    assert f"over {data['verdict']['n_pairs']} pairs" in text


def test_key_numbers_agree_with_the_side_table(report: Report) -> None:
    """The card's E2E, TTFT and TPOT p50 / p99 are the per-side table's, for both sides."""
    text = render_text(report)
    card = text[text.index("Key numbers") : text.index("Verdict and recommendation")]
    table = text[text.index("Per side:") :]
    for metric in ("E2E", "TTFT", "TPOT"):
        p50, p99 = _cells(table, f"{metric} p50"), _cells(table, f"{metric} p99")
        card_row = _cells(card, f"{metric} p50 / p99")
        assert card_row == [f"{p50[i]} / {p99[i]}" for i in range(2)]
    assert _cells(card, "failed requests")[0].endswith(f"of {report.sides[0].requests} (0.0%)")
    accept = _cells(card, "accept length")
    assert accept[1] != "–"


def test_missing_conditions_are_listed(tmp_path: Path) -> None:
    """Without a recommendation, the glance names every condition that is not met."""
    recs = make_records(n_pairs=40, true_ratio=0.8, seed=4)
    run = write_run_dir(tmp_path / "run", recs, experiment(facts={}))
    report = build_report([load_run_dir(run)])
    missing = [c.key for c in report.recommendation.missing]
    assert missing
    text = render_text(report)
    glance = text[text.index("At a glance") : text.index("Key numbers")]
    assert "No recommendation:" in glance
    for key in missing:
        assert key in " ".join(glance.split())


def test_launch_tables(report: Report) -> None:
    """The candidate's speculative settings and a side-by-side launch table are shown."""
    text = render_text(report)
    assert _cells(text, "algorithm")[0] == report.algorithm
    row = _cells(text, "speculative_algorithm")
    assert row[0] == "-" and row[1] == report.algorithm
    assert _cells(text, "model_path")[0] == _cells(text, "model_path")[1]
    assert "Workload as recorded" in text and _cells(text, "rate") == ["10"]


def test_html_has_contents_and_a_grid(report: Report) -> None:
    """The page has a table of contents linking each section and lays figures in a grid."""
    page = render_html(report)
    for key in ("glance", "paired", "sides", "acceptance", "launch"):
        assert f'<a href="#{key}">' in page and f'<h2 id="{key}">' in page
    assert "grid-template-columns" in page
    assert "E2E ratio by prompt category" in page
    assert "Paired E2E ratio against load" in page
    assert "Histogram: per-token latency" in page


def test_itl_titles_say_estimated(report: Report) -> None:
    """An ITL CDF resting partly on estimated chunks says so in its title and hlog row."""
    page = render_html(report)
    assert "estimated tokens per chunk" not in page
    cdfs = tuple(
        dataclasses.replace(c, estimated=c.n // 2)
        if c.metric == "itl_us" and c.side is Role.CANDIDATE
        else c
        for c in report.plots.cdfs
    )
    marked = dataclasses.replace(report, plots=dataclasses.replace(report.plots, cdfs=cdfs))
    page = render_html(marked)
    assert (
        "CDF: per-token latency (chunk gap / tokens) (estimated tokens per chunk: candidate 50%)"
        in page
    )
    if any(h.metric == "itl_us" and h.side is Role.CANDIDATE for h in report.histograms):
        assert "itl_us (estimated)" in render_text(marked)


def test_log_label_only_when_log() -> None:
    """A chart asked for log x says "log scale" only when it could draw one (every x > 0)."""
    positive = [svg.Series("a", ((1.0, 0.1), (100.0, 1.0)))]
    with_zero = [svg.Series("a", ((0.0, 0.1), (100.0, 1.0)))]
    assert "ms (log scale)" in svg.chart("t", positive, x_label="ms", y_label="y", log_x=True)
    drawn = svg.chart("t", with_zero, x_label="ms", y_label="y", log_x=True)
    assert "log scale" not in drawn and ">ms<" in drawn


def test_log_ticks_are_1_2_5() -> None:
    """Log axes tick at 1, 2 and 5 of every decade they span."""
    assert svg.log_ticks(0.8, 60.0) == [1.0, 2.0, 5.0, 10.0, 20.0, 50.0]


def test_bands_shade_alternate_blocks() -> None:
    """Bands become translucent rectangles in their side's colour, behind the series."""
    series = [svg.Series("baseline", ((0.0, 1.0), (10.0, 2.0)))]
    drawn = svg.chart("t", series, x_label="s", y_label="y", spans=[(0.0, 5.0, "candidate")])
    rect = re.search(
        r'<rect x="[\d.]+" y="\d+" width="([\d.]+)"[^>]*fill="#d2452d" fill-opacity="0.08"', drawn
    )
    assert rect is not None and float(rect.group(1)) > 100
    assert drawn.index('fill-opacity="0.08"') < drawn.index("<polyline")


def test_itl_histogram_sums_to_one() -> None:
    """The per-token latency histogram read off a CDF holds every token once."""
    cdf = Cdf(
        Role.BASELINE,
        "itl_us",
        tuple((float(v), (i + 1) / 100) for i, v in enumerate(range(1000, 101000, 1000))),
        100,
    )
    shares = [s for _, s in itl_histogram(cdf)]
    assert sum(shares) == pytest.approx(1.0)
    assert all(s >= 0 for s in shares)


def test_swapped_sides_are_said_plainly(tmp_path: Path) -> None:
    """A run whose baseline speculates and candidate does not says so at a glance."""
    exp = experiment()
    exp["baseline"], exp["candidate"] = exp["candidate"], exp["baseline"]
    run = write_run_dir(tmp_path / "run", make_records(n_pairs=40, true_ratio=1.2, seed=5), exp)
    text = render_text(build_report([load_run_dir(run)]))
    glance = " ".join(text[text.index("At a glance") : text.index("Key numbers")].split())
    assert (
        "The sides look swapped: the baseline speculates (EAGLE3) and the candidate does not"
        in glance
    )
    assert "The sides look swapped" not in render_text(
        build_report(
            [
                load_run_dir(
                    write_run_dir(
                        tmp_path / "ok",
                        make_records(n_pairs=40, true_ratio=1.2, seed=5),
                        experiment(),
                    )
                )
            ]
        )
    )


def test_alternate_blocks_become_shaded_bands(tmp_path: Path) -> None:
    """Records labelled with alternate blocks give one span per block and side, shaded."""
    recs = make_records(n_pairs=40, true_ratio=0.9, seed=8)
    labelled = [
        dataclasses.replace(r, labels={**r.labels, "block": str(i // 20)})
        for i, r in enumerate(recs)
    ]
    origin = min(r.sent_at_unix_s for r in labelled)
    blocks = alternate_blocks(labelled, origin)
    assert len(blocks) == len({(r.labels["block"], r.side) for r in labelled}) == 8
    assert all(0 <= lo <= hi for lo, hi, _ in blocks)
    run = write_run_dir(tmp_path / "run", labelled, experiment(mode="alternate"))
    page = render_html(build_report([load_run_dir(run)]))
    assert "shaded: alternate blocks by side" in page
    assert page.count('fill-opacity="0.08"') == len(blocks)


def test_addresses_never_reach_the_launch_table() -> None:
    """A server argument holding a URL is shown as an address placeholder, not the URL."""
    assert shown("http://10.0.0.1:30000") == "(an address, not shown)"
    assert workload_rows({"workload": {"via": "http://x:1", "rate": 3, "u": "https://y"}}) == (
        ("rate", "3"),
    )
