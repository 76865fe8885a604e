"""The proxy in front of the real llama.cpp pair, driven by the official ``openai`` client.

The baseline is the primary and the exact-copy draft server the candidate. The client
must get the primary's answer unchanged; the run directory must hold exactly one record
per request per side, with the candidate's acceptance taken from llama.cpp's timings.
The client never retries (``max_retries=0``), so a proxy failure cannot be hidden.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from specproxy.core.records.model import Role, SendMode
from specproxy.proxy import config as proxy_config
from specproxy.proxy import server
from tests.engine.llama_http import PROMPTS
from tools.engine.llamacpp import PairUrls

pytestmark = pytest.mark.engine

MAX_TOKENS = 24


def _config(pair: PairUrls, run_dir: Path, mode: SendMode, **extra: Any) -> Any:
    return proxy_config.ProxyConfig(
        baseline=pair.baseline,
        candidate=pair.spec_same,
        mode=mode,
        kind="openai",
        host="127.0.0.1",
        port=0,
        run_dir=run_dir,
        label=f"engine-{mode}",
        **extra,
    )


async def _ask(client: openai.AsyncOpenAI, prompt: str, *, stream: bool) -> str:
    """One greedy chat completion through the proxy; returns the text the client saw."""
    messages: Any = [{"role": "user", "content": prompt}]
    if not stream:
        done = await client.chat.completions.create(
            model="target", messages=messages, max_tokens=MAX_TOKENS, temperature=0, seed=42
        )
        assert done.usage is not None
        assert done.usage.completion_tokens == MAX_TOKENS
        return done.choices[0].message.content or ""
    chunks = await client.chat.completions.create(
        model="target",
        messages=messages,
        max_tokens=MAX_TOKENS,
        temperature=0,
        seed=42,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts = [c.choices[0].delta.content or "" async for c in chunks if c.choices]
    return "".join(parts)


async def _drive(url: str, n: int) -> list[str]:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    try:
        return [await _ask(client, PROMPTS[i % len(PROMPTS)], stream=i % 2 == 0) for i in range(n)]
    finally:
        await client.close()


def _records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


async def test_mirror_gives_the_primary_answer_and_one_record_per_side(
    llama_pair: PairUrls, tmp_path: Path
) -> None:
    """Mirror: the client sees the baseline's text; each request has a baseline and candidate record."""
    n = 6
    async with server.serve_proxy_in_background(
        _config(llama_pair, tmp_path, SendMode.MIRROR)
    ) as url:
        texts = await _drive(url, n)
    records = _records(tmp_path)
    assert len(records) == 2 * n
    by_side = {role: [r for r in records if r["side"] == role.value] for role in Role}
    assert [len(by_side[role]) for role in Role] == [n, n]
    assert all(r["error_kind"] is None and r["status"] == 200 for r in records)
    assert {r["pair_id"] for r in by_side[Role.BASELINE]} == {
        r["pair_id"] for r in by_side[Role.CANDIDATE]
    }
    assert sorted(_sha(t) for t in texts) == sorted(
        r["output_sha256"] for r in by_side[Role.BASELINE]
    )
    assert all(r["acceptance"] is None for r in by_side[Role.BASELINE])
    for record in by_side[Role.CANDIDATE]:
        acceptance = record["acceptance"]
        assert acceptance["source"] == "llamacpp_timings"
        assert acceptance["proposed_drafts"] > 0
        assert acceptance["correct_drafts"] == acceptance["proposed_drafts"]


async def test_split_sends_each_request_to_exactly_one_side(
    llama_pair: PairUrls, tmp_path: Path
) -> None:
    """Split: exactly one record per request, both sides used, the client gets that side's text."""
    n = 8
    config = _config(llama_pair, tmp_path, SendMode.SPLIT, split=0.5, seed=7)
    async with server.serve_proxy_in_background(config) as url:
        texts = await _drive(url, n)
    records = _records(tmp_path)
    assert len(records) == n
    assert {r["side"] for r in records} == {"baseline", "candidate"}
    assert all(r["error_kind"] is None for r in records)
    assert sorted(_sha(t) for t in texts) == sorted(r["output_sha256"] for r in records)
    for record in records:
        drafted = record["acceptance"] is not None
        assert drafted == (record["side"] == "candidate")
