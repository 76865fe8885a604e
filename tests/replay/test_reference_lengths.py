"""--output-len-from-reference reads HumanEval, GSM8K and list-valued reference answers."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from specproxy.replay.config import ReplayConfig
from specproxy.replay.formats import iter_prompts
from specproxy.replay.run import run_replay
from specproxy.replay.trace import TraceRecord
from specproxy.sim.server import serve_in_background
from specproxy.sim.text import tokenize
from tests.replay.conftest import fast_sim

HUMANEVAL = {
    "task_id": "HumanEval/0",
    "prompt": "def add(a, b):\n    ",
    "canonical_solution": "    return a + b\n",
    "test": "assert add(1, 2) == 3",
    "entry_point": "add",
}
GSM8K = {
    "question": "Ann has 3 apples and buys 4 more. How many apples has she?",
    "answer": "She has 3 + 4 = 7 apples in all, counting both.\n#### 7",
}
ALTERNATIVES = {
    "prompt": "Name a colour.",
    "reference": ["", "A deep blue, like the ocean at dusk", "red"],
}
NO_ANSWER = {"prompt": "Say something.", "answer": 42}
PER_TURN = {"turns": ["First?", "Second?"], "reference": ["one answer", ["", "two", "x"]]}


def _write(path: Path, lines: list[dict[str, object]]) -> str:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(path)


def _read(lines: list[dict[str, object]], *, all_turns: bool = False) -> list[TraceRecord]:
    text = "".join(json.dumps(line) + "\n" for line in lines)
    items = list(iter_prompts("set.jsonl", text, all_turns=all_turns))
    assert all(isinstance(i, TraceRecord) for i in items)
    return [i for i in items if isinstance(i, TraceRecord)]


def test_reference_answer_fields() -> None:
    """HumanEval's canonical_solution, GSM8K's answer and the first non-empty alternative of a
    list are reference answers; a number is none; with turns, a list holds one answer per turn."""
    records = _read([HUMANEVAL, GSM8K, ALTERNATIVES, NO_ANSWER])
    assert [r.reference_answer for r in records] == [
        HUMANEVAL["canonical_solution"],
        GSM8K["answer"],
        "A deep blue, like the ocean at dusk",
        None,
    ]
    assert records[0].conversation_id == "HumanEval/0"
    turns = _read([PER_TURN], all_turns=True)
    assert [r.reference_answer for r in turns] == ["one answer", "two"]
    assert turns[1].messages[1] == ("assistant", "one answer")


async def test_replay_asks_for_each_reference_length(tmp_path: Path) -> None:
    """Each request asks for its reference answer's length (the server's token count); a line
    without one asks for --output-len, and experiment.json and the summary say how many had one."""
    trace = _write(tmp_path / "mixed.jsonl", [HUMANEVAL, GSM8K, ALTERNATIVES, NO_ANSWER])
    async with serve_in_background(fast_sim()) as baseline:
        cfg = ReplayConfig(
            traces=(trace,),
            baseline=baseline,
            rate=200.0,
            output_len=5,
            output_len_from_reference=True,
            run_dir=str(tmp_path / "run"),
        )
        outcome = await run_replay(cfg)
    lines = (outcome.run_dir / "requests.jsonl").read_text().splitlines()
    tokens = {r["trace_index"]: r["completion_tokens"] for r in map(json.loads, lines)}
    answers = [
        HUMANEVAL["canonical_solution"],
        GSM8K["answer"],
        "A deep blue, like the ocean at dusk",
    ]
    expected = [len(tokenize(str(a))) for a in answers] + [5]
    assert [tokens[i] for i in range(4)] == expected
    assert len(set(expected)) == 4  # the lengths differ, so a swapped answer would show
    workload = json.loads((outcome.run_dir / "experiment.json").read_text())["workload"]
    assert workload["output_len_from_reference"] == {"requests": 3, "of": 4}
    assert "--output-len-from-reference: 3 of 4 requests have a reference answer" in outcome.text


async def test_no_readable_reference_is_one_line(tmp_path: Path) -> None:
    """A prompt set whose answers are not text ends with exit status 2 and one line naming the
    fields that were read."""
    trace = _write(tmp_path / "numbers.jsonl", [NO_ANSWER, NO_ANSWER])
    async with serve_in_background(fast_sim()) as baseline:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "specproxy", "replay", trace, "--baseline", baseline),
            *("--rate", "50", "--output-len-from-reference", "--run-dir", str(tmp_path / "r")),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 2
    text = err.decode()
    assert "Traceback" not in text
    ours = [line for line in text.splitlines() if line.startswith("specproxy:")]
    assert len(ours) == 1
    assert "none of the 2 requests has a reference answer" in ours[0]
    assert "'reference', 'canonical_solution', 'answer'" in ours[0]
