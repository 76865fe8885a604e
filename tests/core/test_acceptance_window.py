"""Window acceptance (``core.measurement.acceptance_window``) from real SGLang and llama.cpp scrapes, and
the one server-acceptance figure the report shows."""

from __future__ import annotations

import json

import pytest

from specproxy.core.measurement.acceptance_window import (
    llamacpp_window,
    merge_windows,
    server_acceptance,
    sglang_server_info_accept_length,
    sglang_window,
)
from specproxy.core.protocol.prometheus import parse_exposition
from specproxy.core.records.model import Role
from specproxy.testing.captures import LLAMACPP, sglang_exchange


def _sglang_scrapes(server: str) -> tuple[str, str]:
    _, before = sglang_exchange(server, "metrics_before")
    _, after = sglang_exchange(server, "metrics_after")
    return before.body.decode(), after.body.decode()


def test_sglang_window_from_prometheus_counters() -> None:
    """sa_copy window: (520 - 8) generated tokens over (383 - 7) verify calls."""
    before, after = _sglang_scrapes("run_a_init0.1/sa_copy")
    w = sglang_window(parse_exposition(before), parse_exposition(after))
    assert w is not None
    assert (w.generated_tokens, w.verify_steps) == (512, 376)
    assert w.accept_length == pytest.approx(512 / 376)


def test_sglang_window_sums_over_is_streaming_label_sets() -> None:
    """0.5.17+ splits generation_tokens_total by is_streaming; the window sums both."""
    before = parse_exposition(
        'sglang:generation_tokens_total{is_streaming="true"} 10\n'
        'sglang:generation_tokens_total{is_streaming="false"} 20\n'
        "sglang:spec_verify_calls_total 10\n"
    )
    after = parse_exposition(
        'sglang:generation_tokens_total{is_streaming="true"} 110\n'
        'sglang:generation_tokens_total{is_streaming="false"} 120\n'
        "sglang:spec_verify_calls_total 90\n"
    )
    w = sglang_window(before, after)
    assert w is not None
    assert w.accept_length == pytest.approx(200 / 80)


def test_baseline_sglang_window_is_none() -> None:
    """A baseline scrape has no spec_verify_calls_total, so no window acceptance."""
    before, after = _sglang_scrapes("run_a_init0.1/base")
    assert sglang_window(parse_exposition(before), parse_exposition(after)) is None


def test_server_info_average_accept_length() -> None:
    """sa_copy /get_server_info after the fixtures reads avg_spec_accept_length 1.3177 (README)."""
    _, cap = sglang_exchange("run_a_init0.1/sa_copy", "get_server_info_after")
    assert sglang_server_info_accept_length(json.loads(cap.body)) == pytest.approx(1.3177, abs=1e-4)
    _, before = sglang_exchange("run_a_init0.1/sa_copy", "get_server_info_before")
    assert sglang_server_info_accept_length(json.loads(before.body)) is None


def _llama_scrapes(config: str) -> tuple[str, str]:
    base = LLAMACPP / config
    return (base / "metrics_before.prom").read_text(), (base / "metrics_after.prom").read_text()


def test_llamacpp_window_with_request_count_is_exact() -> None:
    """spec-noisy: 2944 tokens, 527 decodes for 26 requests -> 501 steps; 2417 of 3841 accepted."""
    before, after = _llama_scrapes("tiny/spec-noisy")
    w = llamacpp_window(parse_exposition(before), parse_exposition(after), requests=26)
    assert w is not None
    assert w.verify_steps == 527 - 26
    assert w.accept_length == pytest.approx(2944 / 501)
    assert not w.lower_bound
    assert (w.accepted_drafts, w.proposed_drafts) == (2417, 3841)
    assert w.accept_rate == pytest.approx(2417 / 3841)
    # The README's per-request rows: 2107 of 3349 in the bench, plus 310 of 492 in the capture.
    assert w.accepted_drafts == 2107 + 53 + 53 + 4 * 51


def test_llamacpp_window_histogram_from_per_position_counters() -> None:
    """Per-position counters give steps by drafts accepted; they add up to steps and accepted drafts."""
    before, after = _llama_scrapes("tiny/spec-noisy")
    w = llamacpp_window(parse_exposition(before), parse_exposition(after))
    assert w is not None
    assert w.histogram is not None
    assert w.histogram[0] == 497 - 437  # verifications that accepted nothing
    assert sum(w.histogram) == 497
    assert sum(k * n for k, n in enumerate(w.histogram)) == 2417
    assert w.lower_bound
    assert w.accept_length == pytest.approx(2944 / 527)


def test_llamacpp_baseline_window_is_none() -> None:
    """A llama.cpp baseline never drafts, so there is no window acceptance."""
    before, after = _llama_scrapes("tiny/baseline")
    assert llamacpp_window(parse_exposition(before), parse_exposition(after)) is None


def test_server_acceptance_reads_counters_and_the_server_info_average() -> None:
    """Snapshots give the Prometheus window and, beside it, SGLang's server-info average;
    without metrics text only the average is there, and the problem is named."""
    before, after = _sglang_scrapes("run_a_init0.1/sa_copy")
    _, info = sglang_exchange("run_a_init0.1/sa_copy", "get_server_info_after")
    server_info = json.loads(info.body)
    s = server_acceptance(
        Role.CANDIDATE,
        {"metrics_text": before, "server_info": {}},
        {"metrics_text": after, "server_info": server_info},
    )
    assert s.window is not None
    assert s.window.source == "sglang_prometheus"
    assert s.avg_after is not None
    only_info = server_acceptance(Role.CANDIDATE, {}, {"server_info": server_info})
    assert only_info.window is None
    assert only_info.avg_after == s.avg_after
    assert any("metrics text" in p for p in only_info.problems)
    lb, la = _llama_scrapes("tiny/spec-same")
    llama = server_acceptance(
        Role.CANDIDATE, {"metrics_text": lb}, {"metrics_text": la}, requests=26
    )
    assert llama.window is not None
    assert llama.window.source == "llamacpp_prometheus"
    nothing = server_acceptance(Role.CANDIDATE, {}, {})
    assert nothing.window is None and nothing.avg_after is None


def test_llamacpp_window_reaches_the_server_acceptance_the_report_shows() -> None:
    """llama.cpp counters give the report's server figure (exact with the request count)."""
    before, after = _llama_scrapes("tiny/spec-noisy")
    s = server_acceptance(Role.CANDIDATE, {"metrics_text": before}, {"metrics_text": after},
                          requests=26)  # fmt: skip
    assert s.window is not None and s.window.source == "llamacpp_prometheus"
    assert s.window_accept_length == pytest.approx(2944 / 501)
    assert not s.window.lower_bound
    assert s.problems == ()


def test_server_info_average_is_the_mean_over_dp_ranks() -> None:
    """Two DP ranks reporting 2.0 and 4.0 give 3.0, with the rank count kept (not rank 0's 2.0)."""
    info = {"internal_states": [{"avg_spec_accept_length": 2.0}, {"avg_spec_accept_length": 4.0}]}
    s = server_acceptance(Role.CANDIDATE, {}, {"server_info": info})
    assert s.avg_after == pytest.approx(3.0)
    assert s.dp_ranks == 2


def test_merged_windows_sum_their_counters() -> None:
    """Two runs' windows merge into Σ tokens / Σ steps; windows of two sources do not merge."""
    before, after = _sglang_scrapes("run_a_init0.1/sa_copy")
    one = sglang_window(parse_exposition(before), parse_exposition(after))
    lb, la = _llama_scrapes("tiny/spec-noisy")
    llama = llamacpp_window(parse_exposition(lb), parse_exposition(la), requests=26)
    merged = merge_windows([one, one])
    assert merged is not None and (merged.generated_tokens, merged.verify_steps) == (1024, 752)
    assert merged.accept_length == pytest.approx(512 / 376)
    assert merge_windows([one, llama]) is None
    assert merge_windows([one, None]) is None
