"""The timeline and the breakdowns computed in a forked process (``report.beside``) give
the report the process itself gives, and the child's failures reach the caller."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specproxy.errors import ConfigError
from specproxy.report import beside as beside_module
from specproxy.report.beside import beside
from specproxy.report.write import render, report_for
from specproxy.testing.fabricate import experiment, make_records, write_run_dir


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every report forks its figure process, whatever its size or the CPUs here."""
    monkeypatch.setattr(beside_module, "BESIDE_PAIRS", 0)
    monkeypatch.setattr(beside_module, "workers", lambda: 2)


def test_the_result_comes_from_a_child_process(forked: None) -> None:
    wait = beside(os.getpid, 1)
    assert wait() != os.getpid()


def test_under_the_threshold_it_runs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(beside_module, "workers", lambda: 2)
    assert beside(os.getpid, beside_module.BESIDE_PAIRS - 1)() == os.getpid()


def test_the_childs_error_is_raised_by_the_wait(forked: None) -> None:
    def fails() -> int:
        raise ConfigError("requests.jsonl: record at byte 7 changed")

    wait = beside(fails, 1)
    with pytest.raises(ConfigError, match="record at byte 7 changed"):
        wait()


def test_a_forked_report_is_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = make_records(
        n_pairs=240, true_ratio=0.8, fail_cand=0.03, warmup=4, chunks=True,
        categories=("coding", "math", "writing"), accept=lambda rng: rng.uniform(1.0, 4.0),
    )  # fmt: skip
    run = write_run_dir(tmp_path / "run", records, experiment())
    here = render(report_for([run]), "json")
    monkeypatch.setattr(beside_module, "BESIDE_PAIRS", 0)
    monkeypatch.setattr(beside_module, "workers", lambda: 2)
    assert render(report_for([run]), "json") == here
    assert '"by_category"' in here and '"timeline"' in here
