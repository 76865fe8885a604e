"""The "where the gain goes" section in text, Markdown, HTML and report.json: the same bins,
the step histogram labelled EXACT or ESTIMATED with its source, and "not available" for
records written before these fields."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from specproxy.core.records.model import Acceptance, AcceptanceSource, RequestRecord
from specproxy.report.build import build_report
from specproxy.report.load import load_run_dir
from specproxy.report.model import Report
from specproxy.report.write import render
from specproxy.testing.fabricate import experiment, make_records, write_run_dir


def _with(
    records: list[RequestRecord], *, histogram: tuple[int, ...] | None, prompts: bool = True
) -> None:
    """Give every record a prompt length by its index (or none) and the candidate a histogram."""
    for k, rec in enumerate(records):
        m = rec.measurement
        prompt = (100 if (k // 2) % 2 == 0 else 3000) if prompts else None
        acc = m.acceptance
        if acc is not None and histogram is not None:
            source = AcceptanceSource.META_INFO if k % 4 < 2 else AcceptanceSource.CHUNK_ESTIMATE
            acc = Acceptance(source, acc.accept_length, acc.verify_ct, histogram=histogram)
        records[k] = replace(rec, measurement=replace(m, prompt_tokens=prompt, acceptance=acc))


def _report(tmp_path: Path, histogram: tuple[int, ...] | None) -> Report:
    recs = make_records(
        n_pairs=80, true_ratio=0.8, accept=lambda rng: rng.uniform(1.5, 3.5),
        categories=("code", "chat"), chunks=True, seed=4,
    )  # fmt: skip
    _with(recs, histogram=histogram)
    run = write_run_dir(tmp_path / "run", recs, experiment(simulated=True))
    return build_report([load_run_dir(run)])


def test_every_format_shows_the_bins_and_the_labelled_histograms(tmp_path: Path) -> None:
    report = _report(tmp_path, (2, 1, 1))
    b = report.breakdown
    assert b is not None
    labels = [g.label for g in b.by_input_tokens.groups]
    assert labels == ["64–127", "2048–4095"]
    assert [h.label for h in b.step_acceptance] == ["exact", "estimated"]
    text, md, page = (render(report, f) for f in ("text", "md", "html"))
    for out in (text, md, page):
        assert "Where the gain goes" in out
        assert "By input length (prompt tokens)" in out
        assert "By output length (completion tokens)" in out
        assert "By prompt category" in out
        assert "Acceptance per verify step (candidate), EXACT" in out
        assert "Acceptance per verify step (candidate), ESTIMATED" in out
        assert "spec_correct_drafts_histogram (meta_info 40)" in out
        assert "stream bursts" in out
        assert "Per-position acceptance rate (EXACT)" in out
    # 2 + 1 + 1 steps of 40 requests each: position 1 in half of them, position 2 in a quarter.
    assert re.search(r"^  1 +50\.0% +█+$", text, re.M)
    assert re.search(r"^  2 +25\.0% +█+$", text, re.M)
    for label in labels:
        assert f"| {label} | 40 |" in md
        assert f"<td>{label}</td><td>40</td>" in page
    assert "SIMULATED EXACT acceptance histogram per verify step (candidate)" in page
    assert "SIMULATED E2E ratio by input length" in page
    doc = json.loads(render(report, "json"))
    steps = doc["breakdown"]["step_acceptance"]
    assert steps[0]["label"] == "exact" and steps[0]["counts"] == [80, 40, 40]
    assert steps[0]["position_rates"] == [0.5, 0.25]
    assert [g["label"] for g in doc["breakdown"]["by_input_tokens"]["groups"]] == labels


def test_old_records_report_not_available(tmp_path: Path) -> None:
    """Records without prompt tokens or histograms: the section says what is missing."""
    recs = make_records(n_pairs=30, true_ratio=0.9, seed=2)
    _with(recs, histogram=None, prompts=False)
    run = write_run_dir(tmp_path / "run", recs, experiment(simulated=True))
    report = build_report([load_run_dir(run)])
    text = " ".join(render(report, "text").split())  # paragraphs wrap at 100 columns
    assert "By input length (prompt tokens): no completed pair carries its prompt token" in text
    assert "Acceptance per verify step: not available" in text
    doc = json.loads(render(report, "json"))
    assert doc["breakdown"]["by_input_tokens"]["groups"] == []
    assert doc["breakdown"]["by_input_tokens"]["without"] == 30
    assert doc["breakdown"]["step_acceptance"] == []
