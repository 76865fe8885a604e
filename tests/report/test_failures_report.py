"""The 400-pair mirror case where a candidate that times out on slow requests used to be
called faster, rendered end to end (only the report's public entry points, so the test runs,
and fails, on the code from before failures entered the verdict)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from specproxy.core.records.model import ErrorKind, RequestRecord, Role
from specproxy.report.write import render, report_for
from specproxy.testing.fabricate import experiment, record, write_run_dir

B, C = Role.BASELINE, Role.CANDIDATE
SHORT, TIMEOUTS = 215, 35


def issue_case(seed: int = 10) -> list[RequestRecord]:
    """400 mirror pairs: the candidate is 0.96x on the 215 short requests and 1.06x on the
    185 long ones, and 35 of its long requests (19%) time out."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    timeouts = set(rng.sample(range(SHORT, 400), TIMEOUTS))
    for i in range(400):
        long = i >= SHORT
        base = int((3_000_000 if long else 500_000) * math.exp(rng.gauss(0.0, 0.3)))
        cand = int(base * (1.06 if long else 0.96) * math.exp(rng.gauss(0.0, 0.01)))
        pid, t = f"p{i}", i * 0.1
        out.append(record(B, pid, e2e_us=base, ttft_us=base // 10, sent_at=t))
        if i in timeouts:
            out.append(record(C, pid, error=ErrorKind.TIMEOUT, sent_at=t))
        else:
            out.append(record(C, pid, e2e_us=cand, ttft_us=cand // 10, sent_at=t))
    return out


def test_issue_case_report_is_not_faster_and_names_the_failure_difference(
    tmp_path: Path,
) -> None:
    """The 400-pair case reported end to end: not faster, and both the JSON and the text
    report name the failure-rate difference with its interval."""
    run = write_run_dir(tmp_path / "run", issue_case(), experiment())
    report = report_for([run])
    assert report.verdict.label.value != "faster"
    iv = report.verdict.interval
    assert iv is not None and iv.low < 0.98 < 1.02 < iv.high
    doc = json.loads(render(report, "json"))
    diff = doc["verdict"]["failures"]["difference"]
    assert diff["point"] == pytest.approx(TIMEOUTS / 400)
    assert 0.0 < diff["low"] < diff["point"] < diff["high"]
    conditions = {c["key"]: c for c in doc["recommendation"]["conditions"]}
    assert conditions["candidate_fails_no_more_often"]["met"] is False
    text = render(report, "text").replace("\n  ", " ")
    shown = f"{diff['point']:+.1%} [95% CI {diff['low']:+.1%}, {diff['high']:+.1%}]"
    assert f"failure-rate difference candidate - baseline {shown}" in text
    assert "MISSING  candidate_fails_no_more_often" in text
