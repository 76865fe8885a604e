"""End-to-end replays against two simulators over loopback, one test per sending mode."""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from specproxy.core.records.model import Role
from specproxy.replay.config import ReplayConfig
from specproxy.replay.modes import split_sides
from specproxy.replay.run import run_replay

NATIVE = "sample_native.jsonl"


def _records(run_dir: Path) -> list[dict[str, Any]]:
    with (run_dir / "requests.jsonl").open() as fh:
        return [json.loads(line) for line in fh]


def _experiment(run_dir: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((run_dir / "experiment.json").read_text())
    return result


def _config(traces_dir: Path, tmp_path: Path, **kw: Any) -> ReplayConfig:
    settings: dict[str, Any] = {
        "traces": (str(traces_dir / NATIVE),),
        "speed": 20.0,
        "run_dir": str(tmp_path / "run"),
    }
    settings.update(kw)
    return ReplayConfig(**settings)


def _assert_lag_recorded(records: list[dict[str, Any]]) -> None:
    for r in records:
        assert r["intended_send_us"] is not None
        assert r["actual_send_us"] >= 0
        assert r["send_lag_us"] == r["actual_send_us"] - r["intended_send_us"]
        assert r["send_lag_us"] >= 0


async def test_mirror_sends_every_request_to_both_sides_at_once(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path
) -> None:
    """Mirror: one record per request per side, paired, sent together, lag recorded."""
    baseline, candidate = sim_pair
    cfg = _config(traces_dir, tmp_path, baseline=baseline, candidate=candidate, warmup=2)
    outcome = await run_replay(cfg)
    assert outcome.status == "completed"
    records = _records(outcome.run_dir)
    assert Counter(r["side"] for r in records) == {"baseline": 24, "candidate": 24}
    assert all(r["error_kind"] is None for r in records)
    _assert_lag_recorded(records)
    by_pair: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_pair[r["pair_id"]].append(r)
    assert len(by_pair) == 24
    for pair in by_pair.values():
        assert {r["side"] for r in pair} == {"baseline", "candidate"}
        assert pair[0]["intended_send_us"] == pair[1]["intended_send_us"]
        assert pair[0]["trace_index"] == pair[1]["trace_index"]
        assert abs(pair[0]["actual_send_us"] - pair[1]["actual_send_us"]) < 20_000
    assert sum(r["synthetic_prompt"] for r in records) == 12
    assert sum(r["warmup"] for r in records) == 4
    sides = outcome.summary["sides"]
    assert sides["baseline"]["e2e_us"]["count"] == 22, "warm-up requests leave the statistics"
    assert sides["baseline"]["send_lag_us"]["count"] == 22, "and the send lag too"
    assert (sides["baseline"]["sent"], sides["baseline"]["warmup_excluded"]) == (24, 2)
    assert {r["mode"] for r in records} == {"mirror"}
    assert all(r["fingerprint"] for r in records)
    categories = Counter(r["category"] for r in records if r["side"] == "baseline")
    assert categories == {"chat": 6, "generate": 6, "shared-prefix": 6, "completions": 6}


async def test_mirror_run_directory_and_experiment(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path
) -> None:
    """The run directory holds experiment.json, snapshots and histograms; the summary has lag."""
    baseline, candidate = sim_pair
    outcome = await run_replay(
        _config(traces_dir, tmp_path, baseline=baseline, candidate=candidate)
    )
    run_dir = outcome.run_dir
    for side in ("baseline", "candidate"):
        for when in ("before", "after"):
            snap = json.loads((run_dir / "snapshots" / f"{side}-{when}.json").read_text())
            assert "server_info" in snap and "t_unix_s" in snap
        assert (run_dir / "histograms" / f"{side}.hlog").read_text().count("Tag=") == 5
    exp = _experiment(run_dir)
    assert exp["status"] == "completed"
    assert exp["simulated"] is True
    assert exp["mode"] == "mirror"
    assert exp["candidate"]["algorithm"] == "EAGLE"
    work = exp["workload"]
    assert work["synthetic_prompts"] == 6
    assert work["prompt_synthesis"]["exact"] is True
    assert work["schedule"]["kind"] == "recorded" and work["schedule"]["speed"] == 20.0
    summary = exp["summary"]
    lags = summary["send_lag"]["sides"].values()  # load met: every side's p99 within the limit
    assert summary["load_met"] is all(v["p99_us"] <= 10_000 for v in lags)
    assert summary["send_lag"]["sides"]["candidate"]["p99_us"] is not None
    assert summary["sides"]["candidate"]["completed"] == 24
    assert summary["sides"]["candidate"]["e2e_us"]["count"] == 24
    assert summary["sides"]["candidate"]["send_lag_us"]["count"] == 24
    assert summary["sides"]["candidate"]["accept_length_mean"] > 1.0
    sources = summary["sides"]["candidate"]["accept_length_by_source"]
    assert set(sources) - {"chunk_estimate"}, "some acceptance is server-reported"
    exactness = "mixed" if "chunk_estimate" in sources else "exact"
    assert summary["sides"]["candidate"]["accept_length_exactness"] == exactness
    assert exp["acceptance_metrics"]["mean_accept_length"] > 1.0
    assert "synthesised" in outcome.text and "send lag" in outcome.footer


async def test_split_sends_each_request_to_one_seeded_side(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path
) -> None:
    """Split: exactly one record per request, on the side the seeded draw chose."""
    baseline, candidate = sim_pair
    cfg = _config(
        traces_dir,
        tmp_path,
        baseline=baseline,
        candidate=candidate,
        mode="split",
        split=0.5,
        seed=3,
    )
    records = _records((await run_replay(cfg)).run_dir)
    assert len(records) == 24
    assert len({r["trace_index"] for r in records}) == 24
    chosen = split_sides(24, 0.5, 3)
    assert {r["trace_index"]: r["side"] for r in records} == {
        i: side.value for i, side in enumerate(chosen)
    }
    assert all(r["pair_id"] is None for r in records)
    _assert_lag_recorded(records)


async def test_alternate_sends_blocks_in_abba_order(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path
) -> None:
    """Alternate: blocks go A B, B A, ...; one side at a time; every request paired across sides."""
    baseline, candidate = sim_pair
    cfg = _config(
        traces_dir, tmp_path, baseline=baseline, candidate=candidate, mode="alternate", block_size=5
    )
    records = _records((await run_replay(cfg)).run_dir)
    assert Counter(r["side"] for r in records) == {"baseline": 24, "candidate": 24}
    _assert_lag_recorded(records)
    windows: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        windows[(int(r["labels"]["block"]), int(r["labels"]["phase"]))].append(r)
    assert sorted(windows) == [(b, p) for b in range(5) for p in (0, 1)]
    order = [windows[key][0]["side"] for key in sorted(windows)]
    assert order == ["baseline", "candidate", "candidate", "baseline"] * 2 + [
        "baseline",
        "candidate",
    ]
    ordered = sorted(windows)
    for earlier, later in itertools.pairwise(ordered):
        ends = [r["actual_send_us"] + r["e2e_us"] for r in windows[earlier]]
        starts = [r["actual_send_us"] for r in windows[later]]
        assert max(ends) <= min(starts), "a window started before the previous one finished"
        assert len({r["side"] for r in windows[later]}) == 1
    pairs: dict[str, set[str]] = defaultdict(set)
    for r in records:
        pairs[r["pair_id"]].add(r["side"])
    assert len(pairs) == 24 and all(s == {"baseline", "candidate"} for s in pairs.values())
    # each window's schedule restarts: its first request is due at its own start
    for rows in windows.values():
        first = min(rows, key=lambda r: r["intended_send_us"])
        assert first["send_lag_us"] < 20_000


async def test_passthrough_sends_to_one_side_only(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path
) -> None:
    """Passthrough: every request to the chosen side, none to the other."""
    _, candidate = sim_pair
    cfg = _config(traces_dir, tmp_path, candidate=candidate)
    assert cfg.passthrough_side is Role.CANDIDATE
    outcome = await run_replay(cfg)
    records = _records(outcome.run_dir)
    assert len(records) == 24 and {r["side"] for r in records} == {"candidate"}
    assert sorted(r["trace_index"] for r in records) == list(range(24))
    _assert_lag_recorded(records)
    assert _experiment(outcome.run_dir)["mode"] == "passthrough"
    assert not (outcome.run_dir / "snapshots" / "baseline-before.json").exists()


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_closed_loop_never_exceeds_the_concurrency(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path, concurrency: int
) -> None:
    """Closed loop: at most N requests in flight; every prompt-set record gets one record,
    with no intended send time (a closed loop is judged by the concurrency it held)."""
    baseline, _ = sim_pair
    cfg = ReplayConfig(
        traces=(str(traces_dir / "mtbench_question.jsonl"),),
        baseline=baseline,
        concurrency=concurrency,
        limit=20,
        output_len=16,
        run_dir=str(tmp_path / "run"),
    )
    outcome = await run_replay(cfg)
    records = _records(outcome.run_dir)
    assert len(records) == 20
    assert max(r["in_flight_at_send"] for r in records) == concurrency - 1
    assert {r["category"] for r in records} == {"writing", "roleplay"}
    assert all(r["intended_send_us"] is None and r["send_lag_us"] is None for r in records)
    assert _experiment(outcome.run_dir)["workload"]["schedule"]["kind"] == "closed_loop"
