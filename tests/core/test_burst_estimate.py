"""The stream-burst estimate of the step histogram against the server's own counters, on
the real SGLang 0.5.16 ``/generate`` stream captures (chunks and the final meta_info in
one response)."""

from __future__ import annotations

import pytest

from specproxy.core.compare.breakdown import ESTIMATED, EXACT, step_histogram
from specproxy.core.measurement.acceptance import burst_histogram, estimate_from_chunks
from specproxy.core.measurement.measure import ResponseMeter
from specproxy.core.records.model import AcceptanceSource, Role, Route
from specproxy.testing.captures import replay_sglang, sglang_exchange

SPECULATIVE = [
    "run_a_init0.1/sa_copy",
    "run_a_init0.1/sa_small",
    "run_a_init0.1/ngram",
    "run_b_attn_off/sa_copy_b",
    "run_b_attn_off/ngram_b",
    "run_c_nextn/nextn_c",
]


def _minus_one(hist: tuple[int, ...], index: int) -> tuple[int, ...]:
    out = list(hist)
    out[index] -= 1
    while out and out[-1] == 0:
        out.pop()
    return tuple(out)


def _trimmed(hist: tuple[int, ...]) -> tuple[int, ...]:
    return _minus_one((*hist, 1), len(hist))


@pytest.mark.parametrize("server", SPECULATIVE)
def test_burst_estimate_equals_the_servers_histogram_but_the_last_step(server: str) -> None:
    """Every verify step but each request's last reads the same from the bursts as from
    spec_correct_drafts_histogram; the last one the server counts at least as long as its
    (cut) burst, and the step counts agree."""
    entry, cap = sglang_exchange(server, "generate_stream")
    m, _ = replay_sglang(ResponseMeter(Route.GENERATE, True), entry, cap)
    exact = m.acceptance
    assert exact is not None and exact.source is AcceptanceSource.META_INFO
    assert exact.histogram is not None and exact.verify_ct is not None
    assert not m.chunk_tokens_estimated
    estimate = burst_histogram(m.chunk_tokens)
    assert estimate is not None
    assert sum(estimate) + 1 == exact.verify_ct == len(m.chunk_tokens) - 1
    last_burst = m.chunk_tokens[-1] - 1
    left = [
        k
        for k in range(last_burst, len(exact.histogram))
        if exact.histogram[k] and _minus_one(exact.histogram, k) == _trimmed(estimate)
    ]
    assert left, (exact.histogram, estimate)
    # The per-position rates differ by at most one step in verify_ct - 1.
    est = step_histogram(Role.CANDIDATE, ESTIMATED, "bursts", 1, estimate).position_rates
    srv = step_histogram(Role.CANDIDATE, EXACT, "server", 1, exact.histogram).position_rates
    width = max(len(est), len(srv))
    pad_est, pad_srv = (*est, *[0.0] * (width - len(est))), (*srv, *[0.0] * (width - len(srv)))
    gaps = [abs(a - b) for a, b in zip(pad_est, pad_srv, strict=True)]
    assert max(gaps, default=0.0) <= 1.0 / (exact.verify_ct - 1)


def test_the_last_step_is_where_estimate_and_counters_part_in_the_nextn_capture() -> None:
    """nextn_c: the server counts 9 steps of 3 drafts, the bursts 8 (and one cut to 0)."""
    entry, cap = sglang_exchange("run_c_nextn/nextn_c", "generate_stream")
    m, _ = replay_sglang(ResponseMeter(Route.GENERATE, True), entry, cap)
    assert m.acceptance is not None and m.acceptance.histogram == (9, 6, 3, 9)
    assert burst_histogram(m.chunk_tokens) == (9, 6, 3, 8)
    assert m.chunk_tokens[-1] == 1  # the last step: 1 token out, 3 drafts verified


def test_a_stream_without_server_figures_carries_the_estimated_histogram() -> None:
    """With no spec field, the meter's chunk estimate carries the burst histogram (the
    baseline capture: every step one token, so every step kept 0 drafts)."""
    entry, cap = sglang_exchange("run_c_nextn/base_c", "generate_stream")
    m, _ = replay_sglang(ResponseMeter(Route.GENERATE, True), entry, cap)
    a = m.acceptance
    assert a is not None and a.source is AcceptanceSource.CHUNK_ESTIMATE
    assert a.histogram == (len(m.chunk_tokens) - 2,)


def test_estimated_tokens_per_chunk_give_no_histogram() -> None:
    """A chat stream without per-chunk counts: tokens per chunk are apportioned, so no
    step histogram is claimed from them."""
    entry, cap = sglang_exchange("run_c_nextn/nextn_c", "chat_stream_usage")
    m, _ = replay_sglang(ResponseMeter(Route.CHAT, True), entry, cap)
    assert m.chunk_tokens_estimated
    assert m.acceptance is not None and m.acceptance.histogram is None


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [((1, 4, 2, 1, 3), (1, 1, 0, 1)), ((1, 5), None), ((1, 0, 2, 1), None), ((), None)],
)
def test_burst_histogram_rule(tokens: tuple[int, ...], expected: tuple[int, ...] | None) -> None:
    """First chunk (prefill) and last (cut) left out; k + 1 tokens is k drafts."""
    assert burst_histogram(tokens) == expected


def test_estimate_from_chunks_attaches_the_histogram_only_when_given_tokens() -> None:
    with_tokens = estimate_from_chunks(11, 5, chunk_tokens=(1, 4, 2, 1, 3))
    assert with_tokens is not None and with_tokens.histogram == (1, 1, 0, 1)
    without = estimate_from_chunks(11, 5)
    assert without is not None and without.histogram is None
