"""Scoring requests: each side's outputs, teacher-forced on the baseline (``--score-requests``).

Owns ``RUN_DIR/scores.jsonl`` (one line per scored pair) and ``RUN_DIR/scoring.json`` (the
counts). Feeds ``core.compare.distribution``.

* **Collecting.** While the timed blocks run, ``ScoringCollector.observe`` keeps, in memory
  only, the prompt body and output text of the first complete pairs (both sides completed,
  not warm-up) up to ``limit // 2`` pairs; the records written to ``requests.jsonl`` carry
  no text (``strip_text``).
* **Scoring** happens after the last timed block and the closing snapshots, never inside
  them, straight to the baseline server (never through a proxy): per pair, the prompt's
  token ids (``input_ids`` of a ``/generate`` body as sent, else ``POST /tokenize`` of its
  text or completion prompt with special tokens, as ``/generate`` tokenizes text), each
  output's ids (``/tokenize`` without special tokens), then one ``/generate`` per output
  with ``input_ids`` = prompt + output, ``return_logprob``, ``logprob_start_len`` = the
  prompt's length minus one, and ``max_new_tokens: 0`` (SGLang 0.5.16's
  ``SamplingParams.verify`` accepts any value >= 0), with the traffic's own temperature,
  ``top_p``, ``top_k`` and ``min_p`` (the distinct sets sent are kept in ``scoring.json``,
  up to 8). The output's mean log-probability per token is the
  mean over the last ``len(output)`` entries of ``meta_info.input_token_logprobs``, whose
  token ids must equal the output's (else the output counts as failed). SGLang computes
  input-token log-probabilities from the raw logits (``LogitsProcessor``: temperature scaling
  applies only with ``temp_scaled_logprobs``, which the prefill path does not set), so they
  are recorded as ``raw``.
* **Bounded and counted.** At most ``limit`` scoring ``/generate`` requests are sent (two per
  pair); every one, and every ``/tokenize``, is counted in ``scoring.json``. None of them is a
  request record: they are not traffic. Chat prompts are skipped (counted): the chat template
  is the server's, so their token ids cannot be rebuilt here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from specproxy.backends.base import InfoReader, UpstreamRequest
from specproxy.core.records.model import RequestRecord, Role, Route
from specproxy.errors import SpecproxyError

SCORES_FILE = "scores.jsonl"
SCORING_FILE = "scoring.json"
LOGPROBS_APPLIED = "raw"
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p")


def strip_text(record: RequestRecord) -> RequestRecord:
    """``record`` without its output text (records hold text only on the operator's opt-in)."""
    if record.measurement.output_text is None:
        return record
    return dataclasses.replace(
        record, measurement=dataclasses.replace(record.measurement, output_text=None)
    )


@dataclass(slots=True)
class Pending:
    """One pair to score: where it was sent (``pair_id``, ``experiment_id``, ``block``,
    ``sent_at_unix_s``: a scores.jsonl line's identity), the request body and each side's
    output text and completion tokens."""

    identity: dict[str, Any]
    body: dict[str, Any]
    route: Route
    texts: dict[Role, str] = field(default_factory=dict)
    tokens: dict[Role, int] = field(default_factory=dict)


def identity_of(record: RequestRecord) -> dict[str, Any]:
    """A pair's identity in scores.jsonl, from one of its records."""
    return {
        "pair_id": record.pair_id,
        "experiment_id": record.experiment_id,
        "block": block_of(record.labels),
        "sent_at_unix_s": record.sent_at_unix_s,
    }


class ScoringCollector:
    """Keeps the first ``limit // 2`` complete pairs' prompts and output texts in memory."""

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self.limit = limit
        self._pairs: dict[str, Pending] = {}
        self.complete: list[Pending] = []
        self.beyond_limit = 0  # outputs that came after the limit's pairs were complete

    def observe(self, record: RequestRecord, request: UpstreamRequest) -> None:
        m = record.measurement
        if record.warmup or record.pair_id is None:
            return
        if len(self.complete) >= self.limit // 2:
            self.beyond_limit += 1
            return
        if m.error_kind is not None or m.output_text is None:
            self._pairs.pop(record.pair_id, None)
            return
        pending = self._pairs.get(record.pair_id)
        if pending is None:
            body = _answer(200, request.body)
            obj = body if isinstance(body, dict) else {}
            pending = Pending(identity_of(record), obj, request.route)
            self._pairs[record.pair_id] = pending
        pending.texts[record.side] = m.output_text
        pending.tokens[record.side] = m.completion_tokens or 0
        if len(pending.texts) == 2:
            self.complete.append(self._pairs.pop(record.pair_id))


@dataclass(slots=True)
class _Counts:
    limit: int
    scoring_requests: int = 0
    tokenize_requests: int = 0
    failed: int = 0
    pairs_scored: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    sampling_params: list[dict[str, Any]] = field(default_factory=list)  # as sent, distinct

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def _answer(status: int, raw: bytes) -> Any:
    """The JSON of a 200 answer; None for any other status or a body that is not JSON."""
    if status != 200:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


async def _tokenize(reader: InfoReader, text: str, special: bool, counts: _Counts) -> list[int]:
    counts.tokenize_requests += 1
    status, body = await reader.post_json(
        "/tokenize", {"prompt": text, "add_special_tokens": special}
    )
    data = _answer(status, body)
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise SpecproxyError(f"/tokenize answered {status}")
    return tokens


def _prompt_source(pending: Pending) -> list[int] | str | None:
    body = pending.body
    if pending.route is Route.GENERATE:
        ids = body.get("input_ids")
        if isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids):
            return [int(i) for i in ids]
        text = body.get("text")
        return text if isinstance(text, str) else None
    if pending.route is Route.COMPLETIONS:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
            return [int(i) for i in prompt]
        return prompt if isinstance(prompt, str) else None
    return None


def sampling_of(body: Mapping[str, Any], route: Route) -> dict[str, Any]:
    """The sampling parameters a request was sent with (temperature, top_p, top_k, min_p)."""
    source = body.get("sampling_params") if route is Route.GENERATE else body
    if not isinstance(source, Mapping):
        return {}
    return {k: source[k] for k in _SAMPLING_KEYS if isinstance(source.get(k), int | float)}


def mean_logprob(meta: Any, output_ids: list[int]) -> float | None:
    """The mean of the output's trailing ``input_token_logprobs`` (None when the entries are
    missing or their token ids are not the output's)."""
    entries = meta.get("input_token_logprobs") if isinstance(meta, Mapping) else None
    n = len(output_ids)
    if not isinstance(entries, list) or n == 0 or len(entries) < n:
        return None
    total = 0.0
    for entry, token in zip(entries[-n:], output_ids, strict=True):
        if not isinstance(entry, list) or len(entry) < 2 or entry[1] != token:
            return None
        if not isinstance(entry[0], int | float) or not math.isfinite(entry[0]):
            return None
        total += float(entry[0])
    return total / n


async def _score_output(
    reader: InfoReader,
    prompt: list[int],
    text: str,
    sampling: Mapping[str, Any],
    counts: _Counts,
) -> dict[str, Any]:
    output = await _tokenize(reader, text, False, counts)
    if not output:
        return {"error": "empty output"}
    body = {
        "input_ids": prompt + output,
        "sampling_params": {**sampling, "max_new_tokens": 0},
        "return_logprob": True,
        "logprob_start_len": max(0, len(prompt) - 1),
        "stream": False,
    }
    counts.scoring_requests += 1
    status, raw = await reader.post_json("/generate", body)
    answer = _answer(status, raw)
    meta = answer.get("meta_info") if isinstance(answer, dict) else None
    value = mean_logprob(meta, output)
    if value is None:
        return {"error": f"/generate answered {status} without the output's logprobs"}
    return {"mean_logprob": value, "tokens": len(output)}


async def _score_pair(reader: InfoReader, pending: Pending, counts: _Counts) -> dict[str, Any]:
    source = _prompt_source(pending)
    line: dict[str, Any] = dict(pending.identity)
    prompt = await _tokenize(reader, source, True, counts) if isinstance(source, str) else source
    assert prompt is not None  # the caller skips pairs without a prompt
    sampling = sampling_of(pending.body, pending.route)
    if sampling not in counts.sampling_params and len(counts.sampling_params) < 8:
        counts.sampling_params.append(sampling)
    for role in Role:
        scored = await _score_output(reader, prompt, pending.texts[role], sampling, counts)
        scored["completion_tokens"] = pending.tokens[role]
        counts.failed += "error" in scored
        line[role.value] = scored
    counts.pairs_scored += all("error" not in line[r.value] for r in Role)
    return line


def block_of(labels: Mapping[str, Any] | None) -> int:
    """A record's alternate-mode block number from its labels (-1: none)."""
    value = labels.get("block") if labels else None
    return int(value) if value is not None and str(value).isdigit() else -1


async def score_pairs(
    reader: InfoReader, pairs: Sequence[Pending], limit: int, run_dir: Path
) -> dict[str, Any]:
    """Score ``pairs`` on ``reader`` (the baseline), at most ``limit`` scoring requests, and
    write ``scores.jsonl`` and ``scoring.json``; returns the counts (module docstring)."""
    counts = _Counts(limit)
    with (run_dir / SCORES_FILE).open("wb") as fh:
        for pending in pairs:
            if counts.scoring_requests + 2 > limit:
                counts.skip("--score-requests reached")
                continue
            if _prompt_source(pending) is None:
                counts.skip("chat prompt: the chat template is the server's")
                continue
            try:
                line = await _score_pair(reader, pending, counts)
            except SpecproxyError as exc:
                counts.failed += 1
                counts.skip(f"scoring failed: {exc}")
                continue
            fh.write(orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
    summary = {
        **dataclasses.asdict(counts),
        "after_timed_blocks": True,
        "recorded_as_traffic": False,
        "logprobs": LOGPROBS_APPLIED,
        "pairs_collected": len(pairs),
    }
    (run_dir / SCORING_FILE).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return summary
