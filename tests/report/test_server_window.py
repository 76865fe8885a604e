"""The server's own window acceptance reaches the report, from llama.cpp counters too, and
SGLang's per-DP-rank averages are combined and named."""

from __future__ import annotations

from pathlib import Path

import pytest

from specproxy.core.records.model import Role
from specproxy.report.build import build_report
from specproxy.report.load import load_run_dir
from specproxy.report.write import render
from specproxy.testing.captures import LLAMACPP
from specproxy.testing.fabricate import experiment, make_records, write_run_dir


def test_llamacpp_counters_give_the_report_an_exact_window(tmp_path: Path) -> None:
    """Real llama.cpp scrapes around 26 candidate requests: Δ2944 tokens over 527 - 26 steps."""
    scrapes = LLAMACPP / "tiny" / "spec-noisy"
    snaps = {
        f"candidate-{when}": {"metrics_text": (scrapes / f"metrics_{when}.prom").read_text()}
        for when in ("before", "after")
    }
    recs = make_records(n_pairs=26, seed=3)
    run = write_run_dir(tmp_path / "run", recs, experiment(), snapshots=snaps)
    report = build_report([load_run_dir(run)])
    server = next(s for s in report.server_acceptance if s.side is Role.CANDIDATE)
    assert server.window is not None and server.window.source == "llamacpp_prometheus"
    assert server.window_accept_length == pytest.approx(2944 / 501)
    assert not server.window.lower_bound
    text = " ".join(render(report, "text").split())
    assert "window accept length 5.88 from llama.cpp counters" in text
    assert '"source": "llamacpp_prometheus"' in render(report, "json")


def test_sglang_dp_ranks_are_averaged_and_named(tmp_path: Path) -> None:
    """Two DP ranks reporting 2.0 and 4.0 show as 3.00, said to be a mean over 2 ranks."""
    info = {"internal_states": [{"avg_spec_accept_length": 2.0}, {"avg_spec_accept_length": 4.0}]}
    snaps = {"candidate-before": {"server_info": {}}, "candidate-after": {"server_info": info}}
    run = write_run_dir(tmp_path / "run", make_records(n_pairs=10), experiment(), snapshots=snaps)
    report = build_report([load_run_dir(run)])
    server = next(s for s in report.server_acceptance if s.side is Role.CANDIDATE)
    assert (server.avg_after, server.dp_ranks) == (pytest.approx(3.0), 2)
    text = " ".join(render(report, "text").split())
    assert (
        "3.00 after (since start or last flush, warm-up included, unweighted mean over 2 DP ranks)"
        in text
    )
