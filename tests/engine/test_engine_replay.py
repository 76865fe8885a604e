"""A replay in alternate mode against the real llama.cpp pair, then the report on its records.

One replay (64 greedy chat prompts per side, blocks of 4, one request in flight) is run
for the module; the tests check its records against the servers' own counters and the
verdict the report draws from them. On these tiny CPU models drafting costs more than it
saves (captured: median 36 ms baseline against 69 ms with the exact-copy draft), so the
measured verdict must be ``slower`` even though every drafted token is accepted.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from specproxy import cli
from specproxy.core.measurement import acceptance_window
from specproxy.core.records.model import Role
from specproxy.replay import config as replay_config
from specproxy.replay import run as replay_run
from specproxy.runtime import run
from tests.engine.llama_http import ACCEPTED, DRAFTED, PROMPTS, parse_counters
from tools.engine.llamacpp import PairUrls

pytestmark = pytest.mark.engine

N = 64  # pairs: 16 block pairs, so that the interval clears the margin on a loaded machine
MAX_TOKENS = 24


def _metrics(url: str) -> dict[str, float]:
    from urllib.request import urlopen

    with urlopen(f"{url}/metrics", timeout=5) as response:  # loopback only
        return parse_counters(response.read().decode())


@pytest.fixture(scope="module")
def replayed(llama_pair: PairUrls, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the replay once; returns its run dir, outcome and the candidate's counter deltas."""
    folder = tmp_path_factory.mktemp("replay")
    trace = folder / "prompts.jsonl"
    lines = [json.dumps({"prompt": f"{PROMPTS[i % len(PROMPTS)]} ({i})"}) for i in range(N)]
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = replay_config.ReplayConfig(
        traces=(str(trace),),
        format="prompts",
        baseline=llama_pair.baseline,
        candidate=llama_pair.spec_same,
        mode="alternate",
        block_size=4,
        concurrency=1,
        route="chat",
        output_len=MAX_TOKENS,
        run_dir=str(folder / "run"),
    )
    before = _metrics(llama_pair.spec_same)
    outcome = run(replay_run.run_replay(config))
    after = _metrics(llama_pair.spec_same)
    delta = {k: after[k] - before.get(k, 0.0) for k in (DRAFTED, ACCEPTED)}
    return {"run_dir": outcome.run_dir, "outcome": outcome, "delta": delta}


def _records(run_dir: Path) -> list[dict[str, Any]]:
    text = (run_dir / "requests.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_every_request_has_exactly_one_record_per_side(replayed: dict[str, Any]) -> None:
    """128 records: each prompt once per side, all at full length, sides in A B B A blocks."""
    assert replayed["outcome"].status == "completed"
    records = _records(replayed["run_dir"])
    assert len(records) == 2 * N
    for side in ("baseline", "candidate"):
        mine = [r for r in records if r["side"] == side]
        assert len(mine) == N
        assert sorted(r["trace_index"] for r in mine) == list(range(N))
    assert all(r["error_kind"] is None and r["completion_tokens"] == MAX_TOKENS for r in records)
    sides_in_order = [r["side"] for r in sorted(records, key=lambda r: r["actual_send_us"])]
    runs = [(side, len(list(group))) for side, group in itertools.groupby(sides_in_order)]
    # blocks of 4 prompts, each sent to one side then the other, the order flipping per block:
    # A4 B4 | B4 A4 | A4 B4 ... -> runs of 4, 8, 8, ..., 8, 4 starting with the baseline
    assert runs[0] == ("baseline", 4)
    assert [n for _, n in runs] == [4] + [8] * (N // 4 - 1) + [4]


def test_recorded_acceptance_equals_the_server_counters(replayed: dict[str, Any]) -> None:
    """Σ per-record drafted/accepted on the candidate equal its llamacpp: counter deltas."""
    records = [r for r in _records(replayed["run_dir"]) if r["side"] == "candidate"]
    found = [r["acceptance"] for r in records]
    assert all(a is not None and a["source"] == "llamacpp_timings" for a in found)
    proposed = sum(a["proposed_drafts"] for a in found)
    correct = sum(a["correct_drafts"] for a in found)
    assert (proposed, correct) == (replayed["delta"][DRAFTED], replayed["delta"][ACCEPTED])
    assert proposed == correct > 0
    experiment = json.loads((replayed["run_dir"] / "experiment.json").read_text(encoding="utf-8"))
    assert experiment["status"] == "completed"
    verify = sum(a["verify_ct"] for a in found)
    mean = experiment["acceptance_metrics"]["mean_accept_length"]
    assert mean == pytest.approx(N * MAX_TOKENS / verify)


def test_report_verdict_comes_from_the_measurements(
    replayed: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`specproxy report --format json` calls the exact-copy draft slower here, outputs agreeing."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["report", str(replayed["run_dir"]), "--format", "json"])
    assert exited.value.code == 0
    report = json.loads(capsys.readouterr().out)
    verdict = report["verdict"]
    assert verdict["n_pairs"] == N
    assert verdict["label"] == "slower", verdict
    assert verdict["interval"]["low"] > 1.0
    assert report["agreement"]["compared"] == N
    assert report["agreement"]["matched"] >= N - 1
    candidate = next(a for a in report["acceptance"] if a["side"] == "candidate")
    assert candidate["exactness"] == "exact"
    assert candidate["n_requests"] == N


def test_snapshots_give_the_same_window_as_the_records(replayed: dict[str, Any]) -> None:
    """The candidate's saved /metrics snapshots yield the records' drafted and accepted totals."""
    folder = replayed["run_dir"] / "snapshots"
    assert (folder / "candidate-before.json").exists(), "no candidate snapshot saved"
    before, after = (
        json.loads((folder / f"candidate-{when}.json").read_text(encoding="utf-8"))
        for when in ("before", "after")
    )
    window = acceptance_window.server_acceptance(Role.CANDIDATE, before, after, requests=N).window
    assert window is not None
    assert window.source == "llamacpp_prometheus"
    assert (window.proposed_drafts, window.accepted_drafts) == (
        replayed["delta"][DRAFTED],
        replayed["delta"][ACCEPTED],
    )


def test_replay_command_runs_and_prints_the_report(
    llama_pair: PairUrls, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`specproxy replay --mode alternate` exits 0, writes report.txt and prints the verdict."""
    trace = tmp_path / "prompts.jsonl"
    trace.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS), encoding="utf-8")
    run_dir = tmp_path / "run"
    argv = ["replay", str(trace), "--format", "prompts", "--mode", "alternate"]
    argv += ["--baseline", llama_pair.baseline, "--candidate", llama_pair.spec_same]
    argv += ["--block-size", "3", "--concurrency", "1", "--route", "chat", "--output-len", "16"]
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--run-dir", str(run_dir)])
    assert exited.value.code == 0
    assert len(_records(run_dir)) == 2 * len(PROMPTS)
    assert "Verdict" in (run_dir / "report.txt").read_text(encoding="utf-8")
    assert "Verdict" in capsys.readouterr().out
