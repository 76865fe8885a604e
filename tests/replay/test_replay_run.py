"""Replay runs beyond the plain modes: via a proxy, stopped early, failures, bad targets, CLI."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from specproxy.core.records.model import RequestRecord, SendMode
from specproxy.errors import BackendUnreachable, ConfigError
from specproxy.proxy.config import ProxyConfig
from specproxy.proxy.server import serve_proxy_in_background
from specproxy.replay.config import ReplayConfig
from specproxy.replay.run import run_replay
from specproxy.sim.server import serve_in_background
from tests.replay.conftest import fast_sim


def _records(path: Path) -> list[dict[str, Any]]:
    with path.open() as fh:
        return [json.loads(line) for line in fh]


async def test_via_proxy_records_client_view_and_proxy_records_both_sides(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path
) -> None:
    """--via: the replayer records each request once (client view); the proxy records both sides."""
    baseline, candidate = sim_pair
    proxy_dir = tmp_path / "proxy"
    proxy = ProxyConfig(
        baseline=baseline, candidate=candidate, mode=SendMode.MIRROR, port=0, run_dir=proxy_dir
    )
    async with serve_proxy_in_background(proxy) as url:
        cfg = ReplayConfig(
            traces=(str(traces_dir / "sample_native.jsonl"),),
            via=url,
            baseline=baseline,
            speed=20.0,
            run_dir=str(tmp_path / "replay"),
        )
        outcome = await run_replay(cfg)
    mine = _records(outcome.run_dir / "requests.jsonl")
    assert len(mine) == 24
    assert {r["side"] for r in mine} == {"baseline"}
    assert all(r["backend_url"] == url and r["labels"]["via"] == url for r in mine)
    assert all(r["send_lag_us"] is not None for r in mine)
    theirs = _records(proxy_dir / "requests.jsonl")
    assert Counter(r["side"] for r in theirs) == {"baseline": 24, "candidate": 24}
    exp = json.loads((outcome.run_dir / "experiment.json").read_text())
    assert exp["workload"]["via"] == url
    assert exp["workload"]["prompt_synthesis"]["source"] == "server_tokenizer"
    assert (outcome.run_dir / "snapshots" / "baseline-before.json").exists()


async def test_stop_drains_and_writes_partial_results(traces_dir: Path, tmp_path: Path) -> None:
    """Stopping mid-run sends nothing more, cancels what does not drain (recorded as
    ``aborted``, cut off by the drain, not as a client's cancellation), and marks it aborted."""
    stop = asyncio.Event()
    seen: list[RequestRecord] = []

    def observe(record: RequestRecord) -> None:
        seen.append(record)
        stop.set()

    async with serve_in_background(fast_sim(decode_step_ms=4.0)) as url:
        cfg = ReplayConfig(
            traces=(str(traces_dir / "sharegpt_v3_first200.json"),),
            baseline=url,
            # 200 requests take 10 s to send at 20/s; the first answer (200 steps of 4 ms)
            # stops the run long before that, even on a loaded machine.
            rate=20.0,
            output_len=200,
            ignore_eos=True,
            drain_s=0.05,
            run_dir=str(tmp_path / "run"),
        )
        outcome = await run_replay(cfg, stop=stop, observer=observe)
    assert outcome.status == "aborted"
    records = _records(outcome.run_dir / "requests.jsonl")
    summary = json.loads((outcome.run_dir / "experiment.json").read_text())["summary"]
    sent = summary["sides"]["baseline"]["sent"]
    assert len(records) == sent == len(seen)
    assert 1 < sent < 200
    kinds = Counter(r["error_kind"] for r in records)
    assert kinds["aborted"] >= 1
    assert "client_cancelled" not in kinds
    cut = [r for r in records if r["error_kind"] == "aborted"]
    assert all("drain deadline ran out" in r["error_message"] for r in cut)
    exp = json.loads((outcome.run_dir / "experiment.json").read_text())
    assert exp["status"] == "aborted"


async def test_failed_requests_get_one_record_each(traces_dir: Path, tmp_path: Path) -> None:
    """Server failures are records with an error class, counted in the summary."""
    async with serve_in_background(fast_sim(fail_rate=0.5, seed=4)) as url:
        cfg = ReplayConfig(
            traces=(str(traces_dir / "mtbench_question.jsonl"),),
            baseline=url,
            rate=200.0,
            arrival="constant",
            output_len=8,
            run_dir=str(tmp_path / "run"),
        )
        outcome = await run_replay(cfg)
    records = _records(outcome.run_dir / "requests.jsonl")
    assert len(records) == 80
    failed = [r for r in records if r["error_kind"] is not None]
    assert 10 < len(failed) < 70
    side = outcome.summary["sides"]["baseline"]
    assert side["failed"] == len(failed)
    assert sum(side["failed_by_kind"].values()) == len(failed)


async def test_unreachable_server_is_reported_before_any_run_dir(
    traces_dir: Path, tmp_path: Path
) -> None:
    """A server that refuses connections stops the run with BackendUnreachable (exit 3)."""
    async with serve_in_background(fast_sim()) as url:
        pass  # the port is now closed
    cfg = ReplayConfig(
        traces=(str(traces_dir / "sample_native.jsonl"),),
        baseline=url,
        run_dir=str(tmp_path / "run"),
    )
    with pytest.raises(BackendUnreachable) as err:
        await run_replay(cfg)
    assert err.value.exit_code == 3
    assert not (tmp_path / "run").exists()


def test_config_rejects_impossible_combinations() -> None:
    """Options that cannot work together are refused with the option named."""
    with pytest.raises(ValueError, match="needs both --baseline and --candidate"):
        ReplayConfig(traces=("t",), baseline="http://127.0.0.1:1", mode="mirror")
    with pytest.raises(ValueError, match="--baseline and/or --candidate"):
        ReplayConfig(traces=("t",))
    with pytest.raises(ValueError, match="route"):
        ReplayConfig(traces=("t",), baseline="http://127.0.0.1:1", route="embeddings")
    with pytest.raises(ValueError, match="at least one trace"):
        ReplayConfig(baseline="http://127.0.0.1:1")


async def test_prompt_set_without_rate_or_concurrency_is_a_usage_error(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path
) -> None:
    """A prompt set has no arrival times, so it needs --rate or --concurrency."""
    cfg = ReplayConfig(
        traces=(str(traces_dir / "mtbench_question.jsonl"),),
        baseline=sim_pair[0],
        run_dir=str(tmp_path / "run"),
    )
    with pytest.raises(ConfigError, match="--rate R or --concurrency N"):
        await run_replay(cfg)


async def test_mooncake_sample_with_context_limit_and_spread_buckets(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path
) -> None:
    """Mooncake lengths are synthesised exactly; requests over the context limit are skipped."""
    baseline, _ = sim_pair
    cfg = ReplayConfig(
        traces=(str(traces_dir / "mooncake_conversation_300.jsonl"),),
        baseline=baseline,
        limit=40,
        speed=100.0,
        spread_buckets=True,
        max_context=8192,
        run_dir=str(tmp_path / "run"),
    )
    outcome = await run_replay(cfg)
    records = _records(outcome.run_dir / "requests.jsonl")
    skipped = outcome.summary["over_context_skipped"]
    assert skipped > 0 and len(records) == 40 - skipped
    assert all(r["synthetic_prompt"] for r in records)
    exp = json.loads((outcome.run_dir / "experiment.json").read_text())
    assert exp["workload"]["over_context"] == {"policy": "skip", "skipped": skipped, "clamped": 0}
    assert exp["workload"]["schedule"]["spread_buckets"] is True
    # the prompt is exactly the trace's input length; the output exactly its output length
    from specproxy.replay.readers import read_traces

    trace = read_traces([traces_dir / "mooncake_conversation_300.jsonl"]).records
    for r in records:
        assert r["prompt_tokens"] == trace[r["trace_index"]].input_tokens
        assert r["completion_tokens"] == trace[r["trace_index"]].output_tokens
    assert any(r["cached_tokens"] for r in records), "shared hash blocks hit the prefix cache"


async def test_cli_replay_writes_reports_and_prints_summary(
    sim_pair: tuple[str, str], traces_dir: Path, tmp_path: Path
) -> None:
    """`specproxy replay` runs end to end in its own process and exits 0 with a report."""
    baseline, candidate = sim_pair
    run_dir = tmp_path / "cli-run"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "specproxy",
        "replay",
        str(traces_dir / "sample_native.jsonl"),
        "--baseline",
        baseline,
        "--candidate",
        candidate,
        "--speed",
        "20",
        "--run-dir",
        str(run_dir),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    text = out.decode()
    assert "send lag" in text and "synthesised" in text
    assert (run_dir / "report.txt").exists() and (run_dir / "report.html").exists()
    assert len(_records(run_dir / "requests.jsonl")) == 48
    assert err.decode() == ""  # not a terminal: no progress line


def test_toml_config_fills_options_and_rejects_unknown_keys(tmp_path: Path) -> None:
    """A [replay] TOML table builds the config; the command line wins; unknown keys are named."""
    from specproxy.config import build, load_toml_table

    path = tmp_path / "replay.toml"
    path.write_text(
        '[replay]\ntraces = ["a.jsonl", "b.jsonl"]\nbaseline = "http://127.0.0.1:1"\n'
        "rate = 5.0\nspread-buckets = true\n"
    )
    cfg = build(ReplayConfig, load_toml_table(path, "replay"), {"rate": 9.0}, str(path))
    assert cfg.traces == ("a.jsonl", "b.jsonl")
    assert cfg.rate == 9.0 and cfg.spread_buckets
    path.write_text('[replay]\ntraces = ["a"]\nbaseline = "http://127.0.0.1:1"\nrat = 5\n')
    with pytest.raises(ConfigError, match="unknown key 'rat'"):
        build(ReplayConfig, load_toml_table(path, "replay"), {}, str(path))
    with pytest.raises(ValueError, match="alternate mode needs the servers"):
        ReplayConfig(traces=("t",), via="http://127.0.0.1:1", mode="alternate")


def test_progress_line_counts_each_side_and_stays_quiet_off_a_terminal(tmp_path: Path) -> None:
    """The progress line shows per-side counts and rate; nothing is drawn when not a TTY."""
    import io

    from specproxy.core.records.model import Role
    from specproxy.recording.recorder import Recorder
    from specproxy.replay.progress import Progress, progress_line
    from specproxy.replay.summary import Tally
    from specproxy.runtime import MonotonicClock

    recorder = Recorder(tmp_path, experiment_id="progress")
    tally = Tally(recorder)
    for _ in range(3):
        tally.on_sent(Role.BASELINE)
    tally.on_sent(Role.CANDIDATE)
    recorder.stats(Role.BASELINE).requests = recorder.stats(Role.BASELINE).completed = 2
    recorder.stats(Role.CANDIDATE).requests = 1  # counted, not completed: failed
    recorder.close()
    line = progress_line(tally, 2.0)
    assert line == (
        "baseline 3 sent 2 ok 0 failed | candidate 1 sent 0 ok 1 failed | 2.0 req/s | 2 s"
    )

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert not Progress(tally, MonotonicClock(), io.StringIO()).enabled
    assert Progress(tally, MonotonicClock(), Terminal()).enabled
    assert not Progress(tally, MonotonicClock(), None).enabled
