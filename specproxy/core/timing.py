"""Arrival offsets -> the latency glossary, in integer microseconds.

Pure arithmetic on offsets measured from the moment the request was sent:

- **TTFT**: arrival of the first event that carried output tokens (a chat role chunk
  or a finish-only chunk does not).
- **chunk gap** (``chunk_gap_us``): time between two consecutive output events. With
  speculative decoding one event can carry several tokens, so a chunk gap is *not* a
  per-token latency.
- **per-token latency** (``token_latency_us``): a chunk gap divided over the k tokens
  that the later chunk carried, counted k times (what SGLang's own
  ``inter_token_latency_seconds`` does). This is the ITL that histograms record.
- **TPOT**: (E2E - TTFT) / (completion_tokens - 1), only when completion_tokens > 1.
- **E2E**: arrival of the end of the response.

Tokens per chunk are exact when the server reports running counts; otherwise
``spread_tokens`` apportions the server's total over the chunks and the caller flags
the result as estimated.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise


def ttft_us(output_offsets_us: Sequence[int]) -> int | None:
    """Offset of the first output event; None when no event carried output."""
    return output_offsets_us[0] if output_offsets_us else None


def chunk_gaps_us(output_offsets_us: Sequence[int]) -> list[int]:
    """Gaps between consecutive output events (one fewer than the events)."""
    return [b - a for a, b in pairwise(output_offsets_us)]


def token_latencies_us(
    output_offsets_us: Sequence[int], chunk_tokens: Sequence[int]
) -> list[tuple[int, int]]:
    """``(per-token latency, token count)`` for every output event after the first.

    The gap before an event is divided (integer division) over the tokens it carried;
    events that carried no tokens (possible only with estimated counts) are skipped.
    Record each pair into a histogram as ``record(latency, count)``.
    """
    if len(output_offsets_us) != len(chunk_tokens):
        raise ValueError("offsets and token counts must have the same length")
    out: list[tuple[int, int]] = []
    prev = output_offsets_us[0] if output_offsets_us else 0
    for offset, tokens in zip(output_offsets_us[1:], chunk_tokens[1:], strict=True):
        if tokens > 0:
            out.append(((offset - prev) // tokens, tokens))
        prev = offset
    return out


def tpot_us(e2e_us: int | None, ttft: int | None, completion_tokens: int | None) -> int | None:
    """(E2E - TTFT) / (completion_tokens - 1), rounded down; None when undefined."""
    if e2e_us is None or ttft is None or completion_tokens is None or completion_tokens < 2:
        return None
    return max(e2e_us - ttft, 0) // (completion_tokens - 1)


def spread_tokens(total: int, chunks: int) -> tuple[int, ...]:
    """Apportion ``total`` tokens over ``chunks`` equal-weight chunks, integers summing to total.

    Largest-remainder apportionment with equal weights: every chunk gets
    ``total // chunks`` and the remainder goes one each to chunks spread evenly over
    the stream (chunk i gets ``(i+1)*total//chunks - i*total//chunks``),
    not bunched at either end.
    """
    if total < 0 or chunks < 0:
        raise ValueError("total and chunks must be >= 0")
    if chunks == 0:
        return ()
    return tuple((i + 1) * total // chunks - i * total // chunks for i in range(chunks))
