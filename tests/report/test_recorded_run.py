"""A run directory written by the real Recorder and ExperimentWriter reports end to end, and
the report's summary goes back into experiment.json."""

from __future__ import annotations

import json
from pathlib import Path

from specproxy.core.compare.acceptance import acceptance_metrics
from specproxy.core.launch.config import build_launch_config
from specproxy.core.records.model import Role, SendMode
from specproxy.recording.experiment import ExperimentWriter
from specproxy.recording.recorder import Recorder
from specproxy.report.model import to_jsonable
from specproxy.report.write import report_for, write_reports
from specproxy.testing.fabricate import fake_server_info, make_records


def _recorded_run(run_dir: Path, *, simulated: bool) -> Path:
    run_dir.mkdir(parents=True)
    declared = {"gpu": "NVIDIA H200", "precision": "bf16"}
    base = build_launch_config(fake_server_info(speculative=False), declared=declared)
    cand = build_launch_config(fake_server_info(speculative=True), declared=declared)
    writer = ExperimentWriter(run_dir, "exp000000001")
    writer.start(
        mode=SendMode.MIRROR,
        workload={"trace": "mtbench_question.jsonl", "concurrency": 8},
        sampling={"temperature": 0},
        baseline=base,
        candidate=cand,
        simulated=simulated,
    )
    recorder = Recorder(run_dir, experiment_id="exp000000001")
    for rec in make_records(
        n_pairs=80, true_ratio=0.8, chunks=True, warmup=2, fail_cand=0.02, fail_base=0.02
    ):
        recorder.write(rec)
    recorder.close()
    return run_dir


def test_recorded_run_reports_and_stores_its_summary(tmp_path: Path) -> None:
    """Records, histogram logs and experiment.json from the recording layer give a report
    whose summary ExperimentWriter.finish stores, acceptance metrics lifted to the top."""
    run = _recorded_run(tmp_path / "run", simulated=False)
    report = report_for([run])
    assert report.pairing.pairs == 80
    assert report.verdict.label.value == "faster"
    assert {h.metric for h in report.histograms} >= {"ttft_us", "itl_us", "tpot_us", "e2e_us"}
    assert any(c.metric == "itl_us" for c in report.plots.cdfs)
    missing = [c.key for c in report.recommendation.conditions if not c.met]
    assert missing == ["failures_counted_both_sides"]  # the run is still "running"
    writer = ExperimentWriter(run, "exp000000001")
    candidate = next(a for a in report.acceptance if a.side is Role.CANDIDATE)
    section = acceptance_metrics(candidate, synthetic_prompts=None)
    summary = {"acceptance_metrics": section, "verdict": report.verdict}
    writer.finish("completed", summary=to_jsonable(summary))
    stored = json.loads((run / "experiment.json").read_text())
    assert stored["acceptance_metrics"]["mean_accept_length"] > 2.0
    assert stored["summary"]["verdict"]["label"] == "faster"
    finished = report_for([run])
    assert finished.recommendation.text is not None
    assert finished.recommendation.text.startswith("Use EAGLE3")


def test_recorded_simulated_run_is_labelled(tmp_path: Path) -> None:
    """A simulated recorded run renders SIMULATED in every format and recommends nothing."""
    run = _recorded_run(tmp_path / "run", simulated=True)
    paths = write_reports([run], run)
    for path in paths:
        assert "SIMULATED" in path.read_text() or '"simulated": true' in path.read_text()
    text = (run / "report.txt").read_text()
    assert "Recommendation: simulated" in text
    side = report_for([run]).side(Role.CANDIDATE)
    assert side is not None and side.warmup_excluded == 2
