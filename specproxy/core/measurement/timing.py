"""Arrival offsets -> the latency glossary, in integer microseconds.

Pure arithmetic on offsets measured from the moment the request was sent:

- **TTFT**: arrival of the first event that carried output tokens (a chat role chunk
  or a finish-only chunk does not).
- **chunk gap** (``chunk_gap_us``): time between two consecutive output events. With
  speculative decoding one event can carry several tokens, so a chunk gap is *not* a
  per-token latency.
- **per-token latency** (``token_latency_us``): a chunk gap divided over the k tokens
  that the later chunk carried, counted k times (what SGLang's own
  ``inter_token_latency_seconds`` does). This is the ITL that histograms record. With
  several choices (n > 1) gaps are taken within each choice, never across choices;
  the first event of each choice has no gap (it is that choice's first token).
- **TPOT**: (E2E - TTFT) / (completion_tokens - 1), only when completion_tokens > 1.
- **E2E**: arrival of the end of the response.

Tokens per chunk are exact when the server reports running counts; otherwise
``estimate_chunk_tokens`` apportions the server's total over the chunks (the first
event of a choice is its prefill token, the rest by text length) and the caller flags
the result as estimated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import accumulate, pairwise, repeat
from operator import add, sub


def ttft_us(output_offsets_us: Sequence[int]) -> int | None:
    """Offset of the first output event; None when no event carried output."""
    return output_offsets_us[0] if output_offsets_us else None


def chunk_gaps_us(output_offsets_us: Sequence[int]) -> list[int]:
    """Gaps between consecutive output events (one fewer than the events)."""
    return [b - a for a, b in pairwise(output_offsets_us)]


def token_latencies_us(
    output_offsets_us: Sequence[int],
    chunk_tokens: Sequence[int],
    chunk_choices: Sequence[int] = (),
) -> list[tuple[int, int]]:
    """``(per-token latency, token count)`` for every output event after the first of its choice.

    The gap before an event (since the previous event of the same choice) is divided
    (integer division) over the tokens it carried; events that carried no tokens
    (possible only with estimated counts) are skipped. ``chunk_choices`` gives the choice
    index of each event; empty means one choice. Record each pair into a histogram as
    ``record(latency, count)``.
    """
    if len(output_offsets_us) != len(chunk_tokens):
        raise ValueError("offsets and token counts must have the same length")
    if chunk_choices and len(chunk_choices) != len(chunk_tokens):
        raise ValueError("choice indexes and token counts must have the same length")
    out: list[tuple[int, int]] = []
    if chunk_choices and any(chunk_choices):
        last: dict[int, int] = {}
        for offset, tokens, choice in zip(
            output_offsets_us, chunk_tokens, chunk_choices, strict=True
        ):
            prev = last.get(choice)
            last[choice] = offset
            if prev is not None and tokens > 0:
                out.append(((offset - prev) // tokens, tokens))
        return out
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


def opens_choice(choices: list[int]) -> list[bool]:
    """For each output event, whether it is the first of its choice."""
    seen: set[int] = set()
    out: list[bool] = []
    for index in choices:
        out.append(index not in seen)
        seen.add(index)
    return out


def estimate_chunk_tokens(
    total: int, text_chars: Sequence[int], opens_choice: Sequence[bool]
) -> tuple[int, ...]:
    """Tokens per output event when the server reported only ``total``; integers summing to it.

    - An event that opens a choice is credited one token: the prefill produces exactly
      one (SGLang sends the first token as soon as prefill ends, and llama.cpp sends
      one event per token).
    - Every other event gets at least one token (an event is sent only when new tokens
      exist), and the rest in proportion to the length of its text (``text_chars``,
      >= 0), by cumulative rounding: a text-length estimate, never exact.
    - Too few tokens for that (``total`` below the number of events): spread evenly.
    """
    n = len(text_chars)
    if len(opens_choice) != n:
        raise ValueError("text lengths and choice openings must have the same length")
    if total < n:
        return spread_tokens(max(total, 0), n)
    out = [1] * n
    rest = [i for i, opens in enumerate(opens_choice) if not opens]
    extra = total - n
    if not rest:
        out[0] += extra  # only choice openers: nothing else can hold the remainder
        return tuple(out)
    weight_sum = sum(text_chars[i] for i in rest)
    if weight_sum <= 0:
        for i, share in zip(rest, spread_tokens(extra, len(rest)), strict=True):
            out[i] += share
        return tuple(out)
    seen = before = 0
    for i in rest:
        seen += text_chars[i]
        upto = seen * extra // weight_sum
        out[i] += upto - before
        before = upto
    return tuple(out)


def estimate_single_choice(total: int, text_chars: Sequence[int]) -> tuple[int, ...]:
    """``estimate_chunk_tokens`` for one choice, whose first event opens it (the fast path:
    the per-event arithmetic runs in C)."""
    n = len(text_chars)
    if total < n or n < 2:
        return estimate_chunk_tokens(total, text_chars, [i == 0 for i in range(n)])
    extra = total - n
    later = text_chars[1:]
    weight_sum = sum(later)
    if weight_sum <= 0:
        return (1, *map(add, spread_tokens(extra, n - 1), repeat(1)))
    bounds = [0, *(seen * extra // weight_sum for seen in accumulate(later))]
    return (1, *map(add, map(sub, bounds[1:], bounds), repeat(1)))


def piece_weights(
    pieces: Mapping[int, Sequence[str]], tokens: Sequence[int | None], choices: Sequence[int]
) -> list[int]:
    """Text length of each output event whose ``tokens`` entry is None, in order, read off
    the text pieces each choice kept, one per output event (the k-th event of a choice is
    its k-th piece): the weights of a text-length estimate. ``choices`` (empty: one choice)
    gives each event's choice; [] when the pieces do not match the events."""
    if choices:
        return _choice_weights(pieces, tokens, choices)
    own = pieces.get(0, [])
    if len(own) != len(tokens):
        return []
    if tokens.count(None) == len(tokens):
        return list(map(len, own))
    return [len(p) for p, n in zip(own, tokens, strict=True) if n is None]


def _choice_weights(
    pieces: Mapping[int, Sequence[str]], tokens: Sequence[int | None], choices: Sequence[int]
) -> list[int]:
    """``piece_weights`` with n > 1."""
    events = Counter(choices)
    if events != Counter({i: len(p) for i, p in pieces.items() if p}):
        return []
    taken = dict.fromkeys(events, 0)
    weights: list[int] = []
    for n, index in zip(tokens, choices, strict=True):
        k = taken[index]
        taken[index] = k + 1
        if n is None:
            weights.append(len(pieces[index][k]))
    return weights
