"""A real speed-up, measured: the report calls a speculative server faster when it is.

The big pair (``start_speedup_pair``): a target whose layers 1-7 compute but change
nothing, and its layer 0 alone as the draft, so every draft is accepted at a fraction of
the target's cost (about 1.7x the baseline's tokens/s on the 2-core CI machine). Together
with the exact-copy draft being called slower (test_engine_replay.py) this shows the
verdict follows the measurements in both directions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from specproxy import cli
from specproxy.replay import config as replay_config
from specproxy.replay import run as replay_run
from specproxy.runtime import run
from tests.engine.llama_http import PROMPTS
from tools.engine.llamacpp import EnginePaths, RunningServer, start_speedup_pair

pytestmark = pytest.mark.engine

N = 30  # the report's default minimum of completed pairs for a verdict
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def big_pair(
    engine_paths: EnginePaths, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, RunningServer]]:
    with start_speedup_pair(engine_paths, log_dir=tmp_path_factory.mktemp("big-logs")) as servers:
        yield servers


def test_report_calls_the_faster_candidate_faster(
    big_pair: dict[str, RunningServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Alternate replay of 30 prompts on the big pair -> verdict `faster`, outputs agreeing."""
    trace = tmp_path / "prompts.jsonl"
    lines = [json.dumps({"prompt": f"{PROMPTS[i % len(PROMPTS)]} [{i}]"}) for i in range(N)]
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = replay_config.ReplayConfig(
        traces=(str(trace),),
        format="prompts",
        baseline=big_pair["big-baseline"].url,
        candidate=big_pair["big-spec"].url,
        mode="alternate",
        block_size=3,  # 10 block pairs: the verdict rests on the spread between them
        concurrency=1,
        route="chat",
        output_len=MAX_TOKENS,
        run_dir=str(tmp_path / "run"),
    )
    outcome = run(replay_run.run_replay(config))
    assert outcome.status == "completed"
    with pytest.raises(SystemExit) as exited:
        cli.main(["report", str(outcome.run_dir), "--format", "json"])
    assert exited.value.code == 0
    report = json.loads(capsys.readouterr().out)
    verdict = report["verdict"]
    assert verdict["n_pairs"] == N
    assert verdict["label"] == "faster", verdict  # the whole 95 % interval below 0.98
    assert report["agreement"]["matched"] >= N - 1
    candidate = next(a for a in report["acceptance"] if a["side"] == "candidate")
    assert candidate["request_weighted_mean"] > 5.0  # tokens per verify step, 8 drafts max
