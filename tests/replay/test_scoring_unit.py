"""Scoring against answers that are not what it asked for: each output fails alone, counted,
and nothing is scored from the wrong tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from specproxy.backends.base import BackendSpec
from specproxy.core.records.model import Role, Route
from specproxy.replay.scoring import Pending, mean_logprob, score_pairs


class _Server:
    """An InfoReader fake: /tokenize gives fixed ids, /generate what the test sets."""

    def __init__(self, generate: tuple[int, bytes]) -> None:
        self._generate = generate
        self.generate_calls = 0

    @property
    def spec(self) -> BackendSpec:
        return BackendSpec("http://127.0.0.1:1", Role.BASELINE)

    async def get(
        self, path: str, *, timeout_s: float = 10.0, api_key: str | None = None
    ) -> tuple[int, bytes]:
        return 404, b""

    async def post_json(self, path: str, obj: Any, *, timeout_s: float = 60.0) -> tuple[int, bytes]:
        if path == "/tokenize":
            return 200, orjson.dumps(
                {"tokens": [7, 8] if obj["add_special_tokens"] else [1000, 1001]}
            )
        self.generate_calls += 1
        return self._generate

    async def call(
        self,
        method: str,
        path: str,
        obj: Any = None,
        *,
        timeout_s: float = 60.0,
        api_key: str | None = None,
    ) -> tuple[int, bytes]:
        return await self.post_json(path, obj)


def _pending() -> Pending:
    body = {"text": "a prompt", "sampling_params": {"temperature": 0.7, "top_p": 0.9}}
    p = Pending(
        {"pair_id": "p0", "experiment_id": "e", "block": -1, "sent_at_unix_s": 1.0},
        body,
        Route.GENERATE,
    )
    p.texts = {Role.BASELINE: " the of", Role.CANDIDATE: " the of"}
    p.tokens = {Role.BASELINE: 2, Role.CANDIDATE: 2}
    return p


async def test_answers_without_json_or_with_other_ids_fail_each_output(tmp_path: Path) -> None:
    """A 200 that is not JSON and logprobs of other token ids both count as failed outputs."""
    for answer in (
        (200, b"not json"),
        (
            200,
            orjson.dumps(
                {"meta_info": {"input_token_logprobs": [[-1.0, 5, None], [-1.0, 6, None]]}}
            ),
        ),
    ):
        server = _Server(answer)
        counts = await score_pairs(server, [_pending()], 10, tmp_path)
        assert counts["failed"] == 2 and counts["pairs_scored"] == 0
        assert counts["scoring_requests"] == 2 == server.generate_calls
        assert counts["sampling_params"] == [{"temperature": 0.7, "top_p": 0.9}]


async def test_the_limit_stops_before_a_pair_it_cannot_finish(tmp_path: Path) -> None:
    """With room for one pair's two requests, a second pair is skipped and counted."""
    meta = {
        "input_token_logprobs": [
            [None, 7, None],
            [-0.5, 8, None],
            [-1.0, 1000, None],
            [-2.0, 1001, None],
        ]
    }
    server = _Server((200, orjson.dumps({"meta_info": meta})))
    counts = await score_pairs(server, [_pending(), _pending()], 3, tmp_path)
    assert counts["scoring_requests"] == 2 and counts["pairs_scored"] == 1
    assert counts["skipped"] == {"--score-requests reached": 1}
    line = orjson.loads((tmp_path / "scores.jsonl").read_bytes())
    assert line["baseline"]["mean_logprob"] == -1.5 and line["candidate"]["tokens"] == 2


def test_mean_logprob_takes_the_outputs_trailing_entries() -> None:
    """The mean is over the last len(output) entries, and only when their ids are the output's."""
    entries = [[None, 7, None], [-3.0, 8, None], [-1.0, 1000, None], [-2.0, 1001, None]]
    assert mean_logprob({"input_token_logprobs": entries}, [1000, 1001]) == -1.5
    assert mean_logprob({"input_token_logprobs": entries}, [1001, 1000]) is None
    assert mean_logprob({"input_token_logprobs": entries[:1]}, [1000, 1001]) is None
