"""`specproxy demo`: simulated pair, proxy in mirror mode, replay, report — all labelled SIMULATED."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from specproxy.cli import main
from specproxy.cli.demo import DemoSettings, run_demo, simulated_pair


async def test_demo_writes_a_labelled_report_with_one_record_per_request_per_side(
    tmp_path: Path,
) -> None:
    """A short demo run leaves 2 records per request, a completed experiment and a SIMULATED
    report; the records keep each prompt's category, so the report has its category table,
    and experiment.json has the candidate's acceptance_metrics."""
    settings = DemoSettings(requests=12, rate=40.0, output_len=24, run_dir=tmp_path / "demo")
    run_dir, text = await run_demo(settings)
    lines = (run_dir / "requests.jsonl").read_bytes().splitlines()
    records = [orjson.loads(line) for line in lines]
    assert sorted(r["side"] for r in records) == ["baseline"] * 12 + ["candidate"] * 12
    assert len({r["pair_id"] for r in records}) == 12
    experiment = orjson.loads((run_dir / "experiment.json").read_bytes())
    assert experiment["status"] == "completed"
    assert experiment["simulated"] is True
    assert experiment["candidate"]["algorithm"] == "EAGLE3"
    assert "SIMULATED" in text
    html = (run_dir / "report.html").read_text()
    assert html.count("<svg") >= 1
    assert all(r["category"] for r in records)
    assert "By prompt category" in html
    assert experiment["acceptance_metrics"]["mean_accept_length"] > 1.0
    counted = [r for r in records if r["side"] == "candidate" and not r["warmup"]]
    assert experiment["acceptance_metrics"]["requests_with_acceptance"] == len(counted) > 0


def test_demo_pair_differs_only_in_speculative_settings() -> None:
    """The simulated baseline and candidate share every non-speculative setting."""
    base, cand = simulated_pair(0.5)
    assert base.speculative_algorithm is None
    assert cand.speculative_algorithm == "EAGLE3"
    assert base.max_running_requests == cand.max_running_requests == 48
    assert base.model_path == cand.model_path


def test_demo_rejects_bad_settings() -> None:
    """Out-of-range demo options are a usage error (exit status 2)."""
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--accept-prob", "1.5"])
    assert exc.value.code == 2
