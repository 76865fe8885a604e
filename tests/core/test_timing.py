"""The latency glossary: TTFT, chunk gaps, per-token latency, TPOT, token spreading."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specproxy.core.measurement.timing import (
    chunk_gaps_us,
    estimate_chunk_tokens,
    spread_tokens,
    token_latencies_us,
    tpot_us,
    ttft_us,
)


def test_ttft_is_the_first_output_event() -> None:
    """TTFT is the offset of the first output event, None without any."""
    assert ttft_us([1500, 2000]) == 1500
    assert ttft_us([]) is None


def test_chunk_gap_is_not_a_per_token_latency() -> None:
    """A 4-token chunk after a 40 ms gap is one 40 ms chunk gap but four 10 ms token latencies."""
    offsets, tokens = [10_000, 20_000, 60_000], [1, 1, 4]
    assert chunk_gaps_us(offsets) == [10_000, 40_000]
    assert token_latencies_us(offsets, tokens) == [(10_000, 1), (10_000, 4)]


def test_token_latency_skips_chunks_without_tokens() -> None:
    """A chunk credited with zero tokens adds no latency sample (but its gap is consumed)."""
    assert token_latencies_us([0, 5, 9], [1, 0, 2]) == [(2, 2)]
    with pytest.raises(ValueError, match="same length"):
        token_latencies_us([0, 1], [1])


def test_tpot_definition() -> None:
    """TPOT = (E2E - TTFT) / (completion_tokens - 1), undefined for fewer than two tokens."""
    assert tpot_us(953_167, 39_986, 64) == (953_167 - 39_986) // 63
    assert tpot_us(1000, 100, 1) is None
    assert tpot_us(1000, None, 10) is None
    assert tpot_us(1000, 100, None) is None


@given(total=st.integers(0, 10_000), chunks=st.integers(1, 500))
def test_spread_tokens_sums_to_total_and_is_even(total: int, chunks: int) -> None:
    """Spread counts are integers that sum to the total, each floor or ceil of the mean."""
    spread = spread_tokens(total, chunks)
    assert len(spread) == chunks
    assert sum(spread) == total
    assert set(spread) <= {total // chunks, -(-total // chunks)}


def test_spread_tokens_places_the_remainder_evenly() -> None:
    """The remainder is spread over the stream, not bunched at one end."""
    assert spread_tokens(6, 4) == (1, 2, 1, 2)
    assert spread_tokens(0, 3) == (0, 0, 0)
    assert spread_tokens(5, 0) == ()


def test_token_latency_gaps_stay_within_a_choice() -> None:
    """With choice indexes, each gap runs from the previous event of the same choice."""
    offsets, tokens, choices = [0, 3, 10, 20], [1, 1, 2, 1], [0, 1, 0, 1]
    assert token_latencies_us(offsets, tokens, choices) == [(5, 2), (17, 1)]
    assert token_latencies_us(offsets, tokens, [0, 0, 0, 0]) == token_latencies_us(offsets, tokens)
    with pytest.raises(ValueError, match="same length"):
        token_latencies_us([0, 1], [1, 1], [0])


def test_estimate_gives_the_prefill_one_token_and_the_rest_by_text() -> None:
    """The first event is the one prefill token; later events share the rest by text length."""
    # 64 tokens: 1 for the prefill, 1 for each later event, 60 shared 30:10:20 by text
    assert estimate_chunk_tokens(64, [3, 30, 10, 20], [True, False, False, False]) == (
        1,
        31,
        11,
        21,
    )
    assert estimate_chunk_tokens(7, [1, 0, 0], [True, False, False]) == (1, 3, 3)  # no text: even
    assert estimate_chunk_tokens(5, [4], [True]) == (5,)  # one event holds everything
    assert estimate_chunk_tokens(2, [1, 1, 1], [True, False, False]) == spread_tokens(2, 3)


@given(
    total=st.integers(0, 5_000),
    events=st.lists(st.tuples(st.integers(0, 200), st.booleans()), min_size=1, max_size=80),
)
def test_estimate_sums_to_the_total_with_openers_at_one(
    total: int, events: list[tuple[int, bool]]
) -> None:
    """Estimated counts sum to the total; with enough tokens, openers get 1 and others >= 1."""
    chars = [c for c, _ in events]
    opens = [True] + [o for _, o in events[1:]]
    out = estimate_chunk_tokens(total, chars, opens)
    assert len(out) == len(events)
    assert sum(out) == total
    if total >= len(events) and not all(opens):
        assert all(n == 1 for n, o in zip(out, opens, strict=True) if o)
        assert min(out) >= 1
