"""The output-distribution check end to end over loopback: simulated servers, a sampled
replay with --score-requests, the report; and a serve run without stored text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from specproxy.core.compare.conditions import SAME_DISTRIBUTION
from specproxy.core.compare.distribution import DistributionLabel
from specproxy.core.records.model import SendMode
from specproxy.errors import ConfigError
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.server import serve_proxy_in_background
from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import ReplayOutcome, run_replay
from specproxy.replay.score_run import score_run_dir
from specproxy.report.build import build_report
from specproxy.report.document.glance import glance_section
from specproxy.report.load import load_run_dir
from specproxy.report.model import Report
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import fast_sim

EAGLE = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}


def _lines(path: Path) -> list[dict[str, Any]]:
    with path.open() as fh:
        return [json.loads(line) for line in fh]


async def _scored_replay(
    traces_dir: Path, run_dir: Path, score_requests: int, **candidate: Any
) -> tuple[ReplayOutcome, Report]:
    async with (
        serve_in_background(fast_sim()) as baseline,
        serve_in_background(fast_sim(**EAGLE, **candidate)) as cand,
    ):
        cfg = ReplayConfig(
            traces=(str(traces_dir / "mtbench_question.jsonl"),),
            baseline=baseline,
            candidate=cand,
            mode="mirror",
            concurrency=8,
            temperature=0.7,
            output_len=32,
            score_requests=score_requests,
            run_dir=str(run_dir),
        )
        outcome = await run_replay(cfg)
    return outcome, build_report([load_run_dir(outcome.run_dir)])


def _condition(report: Report, key: str) -> bool:
    return next(c.met for c in report.recommendation.conditions if c.key == key)


def _glance_text(report: Report) -> str:
    return " ".join(b for b in glance_section(report).blocks if isinstance(b, str))


async def test_lossless_candidate_has_the_same_distribution(
    traces_dir: Path, tmp_path: Path
) -> None:
    """A lossless candidate under sampling is called "same distribution" and meets the condition."""
    _, report = await _scored_replay(traces_dir, tmp_path / "run", 400)
    d = report.distribution
    assert d is not None and d.label is DistributionLabel.SAME
    assert d.text.startswith("same distribution within ±0.050 nats/token")
    assert d.pairs == 80
    assert _condition(report, SAME_DISTRIBUTION)
    assert "Output distribution: same distribution" in _glance_text(report)
    assert d.lossy == ()


async def test_lossy_candidate_is_called_shifted_and_loses_the_recommendation_condition(
    traces_dir: Path, tmp_path: Path
) -> None:
    """The simulator's lossy mode (accept threshold 0.9) is found shifted, named as lossy by
    configuration, and fails same_output_distribution."""
    _, report = await _scored_replay(
        traces_dir, tmp_path / "run", 400, speculative_accept_threshold_acc=0.9
    )
    d = report.distribution
    assert d is not None and d.label is DistributionLabel.SHIFTED
    assert d.logprob is not None and d.logprob.high < -d.margin
    assert d.text.startswith("shifted by -0.")
    assert not _condition(report, SAME_DISTRIBUTION)
    assert SAME_DISTRIBUTION in {c.key for c in report.recommendation.missing}
    glance = _glance_text(report)
    assert "lossy by configuration (--speculative-accept-threshold-acc 0.9)" in glance
    assert "measured: shifted by" in glance


async def test_an_aa_run_is_the_noise_floor_of_the_check(traces_dir: Path, tmp_path: Path) -> None:
    """A scored A/A run (the baseline on both sides) given beside a comparison becomes its
    noise floor: the report carries the A/A run's own check and judges the comparison against it."""
    async with (
        serve_in_background(fast_sim()) as baseline,
        serve_in_background(fast_sim(**EAGLE, speculative_accept_threshold_acc=0.9)) as cand,
    ):
        dirs = []
        for name, other in (("aa", baseline), ("ab", cand)):
            cfg = ReplayConfig(
                traces=(str(traces_dir / "mtbench_question.jsonl"),),
                baseline=baseline,
                candidate=other,
                mode="mirror",
                concurrency=8,
                temperature=0.7,
                output_len=32,
                score_requests=400,
                run_dir=str(tmp_path / name),
            )
            dirs.append((await run_replay(cfg)).run_dir)
    report = build_report([load_run_dir(d) for d in dirs])
    assert report.noise_floor is not None
    floor = report.noise_floor.distribution
    assert floor is not None and floor.label is DistributionLabel.SAME and floor.pairs == 80
    assert floor.logprob is not None
    d = report.distribution
    assert d is not None and d.label is DistributionLabel.SHIFTED
    assert d.margin == pytest.approx(max(0.05, abs(floor.logprob.low), abs(floor.logprob.high)))


async def test_scoring_is_bounded_counted_and_never_recorded_as_traffic(
    traces_dir: Path, tmp_path: Path
) -> None:
    """--score-requests 20 sends 20 scoring requests (10 pairs), counts them, and the records
    hold the 80 pairs' traffic only, without output text."""
    outcome, report = await _scored_replay(traces_dir, tmp_path / "run", 20)
    scoring = json.loads((outcome.run_dir / "scoring.json").read_text())
    assert scoring["scoring_requests"] == 20
    assert scoring["pairs_scored"] == 10
    assert scoring["pairs_collected"] == 10 and scoring["outputs_beyond_limit"] >= 120
    assert scoring["recorded_as_traffic"] is False and scoring["after_timed_blocks"] is True
    assert scoring["sampling_params"] == [{"temperature": 0.7}]
    assert scoring["logprobs"] == "raw"
    assert len(_lines(outcome.run_dir / "scores.jsonl")) == 10
    records = _lines(outcome.run_dir / "requests.jsonl")
    assert len(records) == 160
    assert all(r["output_text"] is None for r in records)
    assert all(r["completion_tokens"] == 32 for r in records)  # no 0-token scoring request
    d = report.distribution
    assert d is not None and d.label is DistributionLabel.NOT_SETTLED
    assert d.scoring is not None and d.scoring["scoring_requests"] == 20


async def test_serve_without_stored_text_is_not_checked_and_says_why(tmp_path: Path) -> None:
    """A serve run without --record-text gets "not checked" naming the missing opt-in."""
    async with (
        serve_in_background(fast_sim()) as baseline,
        serve_in_background(fast_sim(**EAGLE)) as cand,
    ):
        proxy = ProxyConfig(
            baseline=baseline, candidate=cand, mode=SendMode.MIRROR, port=0, run_dir=tmp_path
        )
        async with serve_proxy_in_background(proxy) as url, aiohttp.ClientSession() as session:
            for i in range(4):
                body = {"text": f"question {i}", "sampling_params": {"max_new_tokens": 8}}
                async with session.post(url + "/generate", json=body) as resp:
                    assert resp.status == 200
                    await resp.read()
    report = build_report([load_run_dir(tmp_path)])
    d = report.distribution
    assert d is not None and d.label is DistributionLabel.NOT_CHECKED
    assert "--record-text" in d.text and d.scoring is None
    assert "Output distribution: not checked" in _glance_text(report)
    with pytest.raises(ConfigError, match="--record-text"):
        await score_run_dir(tmp_path, baseline, 100)


async def test_serve_with_stored_text_is_scored_afterwards_and_finds_the_lossy_candidate(
    tmp_path: Path,
) -> None:
    """A mirror serve run with --record --record-text, scored after it stopped (specproxy
    score), finds the lossy candidate shifted; the scoring adds no record."""
    lossy = fast_sim(**EAGLE, speculative_accept_threshold_single=0.7)
    async with serve_in_background(fast_sim()) as baseline, serve_in_background(lossy) as cand:
        proxy = ProxyConfig(
            baseline=baseline,
            candidate=cand,
            mode=SendMode.MIRROR,
            port=0,
            run_dir=tmp_path,
            record=True,
            record_text=True,
        )
        async with serve_proxy_in_background(proxy) as url, aiohttp.ClientSession() as session:
            for i in range(80):
                params = {"max_new_tokens": 32, "temperature": 0.7}
                body = {"text": f"question number {i}", "sampling_params": params}
                async with session.post(url + "/generate", json=body) as resp:
                    assert resp.status == 200
                    await resp.read()
        counts = await score_run_dir(tmp_path, baseline, 140)
    assert counts["scoring_requests"] == 140 and counts["pairs_scored"] == 70
    assert len(_lines(tmp_path / "requests.jsonl")) == 160
    report = build_report([load_run_dir(tmp_path)])
    d = report.distribution
    assert d is not None
    assert d.label is DistributionLabel.SHIFTED, d.text
    assert d.pairs == 70
