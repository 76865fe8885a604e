"""The latency glossary: TTFT, chunk gaps, per-token latency, TPOT, token spreading."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specproxy.core.timing import (
    chunk_gaps_us,
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
