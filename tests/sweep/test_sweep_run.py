"""A small load sweep on two in-process simulators: directories, logs, figures and report."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from specproxy import cli
from specproxy.report.write import report_for
from specproxy.sim.config import SimConfig
from specproxy.sim.server import serve_in_background
from specproxy.sweep.config import SweepConfig
from specproxy.sweep.run import run_sweep
from specproxy.testing.crossover_setup import write_trace

LEVEL_KEYS = {"level", "kind", "run_dir", "verdict", "e2e_ratio", "e2e_ci", "tpot_ratio",
              "tpot_ci", "pairs", "accept_length", "failures", "units", "e2e_medians_ratio",
              "e2e_medians_ci", "drift"}  # fmt: skip


def _sim(**overrides: object) -> SimConfig:
    settings: dict[str, object] = {"decode_step_ms": 0.5, "verify_step_ms": 0.7,
                                   "prefill_us_per_token": 0.0, "contention": 0.0}  # fmt: skip
    settings.update(overrides)
    return SimConfig(**settings)  # type: ignore[arg-type]


async def _sweep(folder: Path) -> Path:
    trace = write_trace(folder / "trace.jsonl", 200, 12)
    async with (
        serve_in_background(_sim()) as base,
        serve_in_background(_sim(speculative_algorithm="EAGLE")) as cand,
    ):
        cfg = SweepConfig(traces=(str(trace),), baseline=base, candidate=cand,
                          concurrency="1,4", pairs=40, block_size=8, output_len=12,
                          run_dir=str(folder / "sweep"), slo="tpot_ms=50")  # fmt: skip
        outcome = await run_sweep(cfg)
    return outcome.root


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One finished sweep (levels 1 and 4, 6 block pairs or more, then at most 40 pairs
    each) and its sweep.json."""
    root = asyncio.run(_sweep(tmp_path_factory.mktemp("sweep")))
    return root, json.loads((root / "sweep.json").read_text())


def test_sweep_json_keeps_the_contract_names(swept: tuple[Path, dict[str, Any]]) -> None:
    """sweep.json holds levels with the documented keys, a crossover and a recommendation."""
    _, doc = swept
    assert doc["status"] == "completed"
    assert [lv["level"] for lv in doc["levels"]] == [1.0, 4.0]
    for lv in doc["levels"]:
        assert set(lv) >= LEVEL_KEYS
        assert lv["kind"] == "concurrency"
        assert set(lv["failures"]) == {"baseline", "candidate"}
        assert len(lv["e2e_ci"]) == 2 and lv["e2e_ci"][0] <= lv["e2e_ratio"] <= lv["e2e_ci"][1]
        assert lv["units"] >= 6 and lv["units"] % 2 == 0  # two block pairs per batch
        assert lv["pairs"] >= 40 or lv["verdict"] in ("faster", "slower", "no_difference")
        assert lv["goodput_per_s"]["baseline"] is not None
    assert {"metric", "estimate", "ci"} <= set(doc["crossover"])
    assert doc["crossover"]["metric"] == "e2e"
    assert doc["recommendation"] == "simulated"
    assert "up and down" in doc["order"]


def test_each_level_is_its_own_alternate_experiment(
    swept: tuple[Path, dict[str, Any]],
) -> None:
    """Every level folder holds replay run dirs with experiment.json and records, alternate mode."""
    root, doc = swept
    for lv in doc["levels"]:
        batches = sorted(Path(lv["run_dir"]).glob("batch-*"))
        assert batches
        for batch in batches:
            experiment = json.loads((batch / "experiment.json").read_text())
            assert experiment["status"] == "completed"
            assert experiment["mode"] == "alternate"
            assert (batch / "requests.jsonl").stat().st_size > 0
        assert (Path(lv["run_dir"]) / "report.html").is_file()
    assert root.joinpath("report.txt").exists() is False  # written by the command, not the library


def test_level_figures_are_the_reports_own(swept: tuple[Path, dict[str, Any]]) -> None:
    """A level's verdict and E2E ratio equal those of the ordinary report over its batches."""
    _, doc = swept
    for lv in doc["levels"]:
        report = report_for(sorted(Path(lv["run_dir"]).glob("batch-*")))
        e2e = next(p for p in report.paired if p.metric.name == "E2E")
        assert e2e.interval is not None
        assert lv["verdict"] == report.verdict.label.value
        assert lv["e2e_ratio"] == pytest.approx(e2e.interval.point)
        assert lv["pairs"] == report.pairing.pairs


def test_experiment_log_has_one_line_per_level(swept: tuple[Path, dict[str, Any]]) -> None:
    """experiments.jsonl has a line per level in the lab's schema, with level and verdict."""
    root, doc = swept
    lines = [json.loads(x) for x in (root / "experiments.jsonl").read_text().splitlines()]
    assert [x["level"] for x in lines] == [1.0, 4.0]
    for line, lv in zip(lines, doc["levels"], strict=True):
        assert line["status"] == "completed"
        assert line["baseline"]["speculation"] is False
        assert line["candidate"]["algorithm"] == "EAGLE"
        assert line["acceptance_metrics"]["mean_accept_length"] is not None
        batch = json.loads((Path(lv["run_dir"]) / "batch-01" / "experiment.json").read_text())
        # one builder: the level's section has the keys and prompt origin of a batch's
        assert line["acceptance_metrics"].keys() == batch["acceptance_metrics"].keys()
        synthetic = batch["workload"]["synthetic_prompts"] > 0
        assert line["acceptance_metrics"]["synthetic_prompts"] is synthetic
        assert line["verdict"] == lv["verdict"]
        assert "target_revision" in line and "draft_revision" in line


def test_rounds_go_up_then_down(swept: tuple[Path, dict[str, Any]]) -> None:
    """A second batch of level 1 starts only after the level above has had its first."""
    _, doc = swept
    starts: dict[str, str] = {}
    for lv in doc["levels"]:
        for batch in Path(lv["run_dir"]).glob("batch-*"):
            exp = json.loads((batch / "experiment.json").read_text())
            starts[f"{lv['level']:g}/{batch.name}"] = exp["started_at"]
    assert starts["1/batch-01"] < starts["4/batch-01"]
    if "1/batch-02" in starts:
        assert starts["4/batch-01"] < starts["1/batch-02"]
    if "4/batch-02" in starts and "1/batch-02" in starts:
        assert starts["4/batch-02"] < starts["1/batch-02"]  # round 1 walks down


def test_report_command_rerenders_the_sweep(
    swept: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    """`specproxy report DIR` on a sweep directory prints the sweep page and writes HTML."""
    root, _ = swept
    with pytest.raises(SystemExit) as done:
        cli.main(["report", str(root)])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "E2E crossover" in text and "TPOT crossover" in text and "SIMULATED" in text
    with pytest.raises(SystemExit):
        cli.main(["report", str(root), "--out", str(root / "again")])
    page = (root / "again" / "report.html").read_text()
    assert page.count("<svg") >= 4 and "SIMULATED" in page
