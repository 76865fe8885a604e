"""The real llama.cpp engine: speculation on where asked, acceptance as the server counts it.

Against live ``llama-server`` processes on loopback (tests/engine/conftest.py): a baseline,
an exact-copy draft (greedy acceptance exactly 100 %, as in the captured fixtures' 2240/2240)
and an unrelated small draft (captured: 2/19584, i.e. ~0 %; asserted below 1 %).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.engine.llama_http import (
    ACCEPTED,
    DRAFTED,
    PROMPTS,
    STEPS,
    ChatResult,
    chat,
    chat_body,
    counters,
)
from tools.engine.llamacpp import PairUrls, get_json

pytestmark = pytest.mark.engine


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """A fresh connection per request: llama-server closes the socket after every stream."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        yield s


def test_speculation_is_on_exactly_where_a_draft_was_given(llama_pair: PairUrls) -> None:
    """/slots says speculative only on the two draft servers (the flag exists before any request)."""
    assert {slot["speculative"] for slot in get_json(f"{llama_pair.baseline}/slots")} == {False}
    for url in (llama_pair.spec_same, llama_pair.spec_small):
        slots = get_json(f"{url}/slots")
        assert {slot["speculative"] for slot in slots} == {True}


async def test_baseline_reports_no_drafting(
    llama_pair: PairUrls, session: aiohttp.ClientSession
) -> None:
    """A baseline response has no draft counts in timings and its draft counters stay at zero."""
    result = await chat(session, llama_pair.baseline, chat_body(PROMPTS[0]))
    assert result.completion_tokens == 48
    assert "draft_n" not in result.timings
    assert (await counters(session, llama_pair.baseline)).get(DRAFTED, 0.0) == 0.0


@pytest.mark.parametrize("stream", [False, True])
async def test_exact_copy_draft_accepts_every_drafted_token(
    llama_pair: PairUrls, session: aiohttp.ClientSession, stream: bool
) -> None:
    """With the target as its own draft, greedy requests accept every drafted token."""
    for prompt in PROMPTS[:3]:
        result = await chat(session, llama_pair.spec_same, chat_body(prompt, stream=stream))
        assert result.drafted > 0
        assert result.accepted == result.drafted


async def test_small_draft_accepts_almost_nothing(
    llama_pair: PairUrls, session: aiohttp.ClientSession
) -> None:
    """An unrelated small draft drafts plenty and is accepted for under 1 % of its tokens."""
    results = [await chat(session, llama_pair.spec_small, chat_body(p)) for p in PROMPTS[:3]]
    drafted = sum(r.drafted for r in results)
    accepted = sum(r.accepted for r in results)
    assert drafted >= 3 * 48
    assert accepted / drafted < 0.01


async def _window(
    session: aiohttp.ClientSession, url: str
) -> tuple[list[ChatResult], dict[str, float]]:
    """Send a mixed window (streamed and not) and return the results and counter deltas."""
    before = await counters(session, url)
    results = [
        await chat(session, url, chat_body(prompt, max_tokens=32, stream=i % 2 == 1))
        for i, prompt in enumerate(PROMPTS[:4])
    ]
    after = await counters(session, url)
    return results, {k: after[k] - before.get(k, 0.0) for k in (DRAFTED, ACCEPTED, STEPS)}


@pytest.mark.parametrize("server", ["spec_same", "spec_small"])
async def test_per_response_timings_add_up_to_the_counter_deltas(
    llama_pair: PairUrls, session: aiohttp.ClientSession, server: str
) -> None:
    """Summed per-response draft_n / draft_n_accepted equal the window's llamacpp: deltas."""
    results, delta = await _window(session, getattr(llama_pair, server))
    assert delta[DRAFTED] == sum(r.drafted for r in results) > 0
    assert delta[ACCEPTED] == sum(r.accepted for r in results)
    assert delta[STEPS] > 0


async def test_greedy_text_agrees_with_the_baseline(
    llama_pair: PairUrls, session: aiohttp.ClientSession
) -> None:
    """Greedy text with an exact-copy draft equals the baseline's (near-ties may flip one)."""
    same = 0
    for prompt in PROMPTS:
        base = await chat(session, llama_pair.baseline, chat_body(prompt))
        spec = await chat(session, llama_pair.spec_same, chat_body(prompt))
        assert base.text[:8] == spec.text[:8]
        same += base.text == spec.text
    assert same >= len(PROMPTS) - 1
