"""Per-request acceptance from every source, checked against the captures."""

from __future__ import annotations

import json

import pytest

from specproxy.core.measurement.acceptance import (
    accept_length_of,
    combine_choices,
    estimate_from_chunks,
    from_llamacpp_timings,
    from_meta_info,
    from_sglext,
)
from specproxy.core.records.model import AcceptanceSource
from specproxy.testing.captures import LLAMACPP, sglang_exchange


def _meta(server: str) -> dict[str, object]:
    _, cap = sglang_exchange(server, "generate")
    meta: dict[str, object] = json.loads(cap.body)["meta_info"]
    return meta


def test_sa_copy_generate_meta_info() -> None:
    """sa_copy 11_generate: accept length 64/44, 19 of 132 drafts, histogram [30, 10, 3, 1]."""
    a = from_meta_info(_meta("run_a_init0.1/sa_copy"))
    assert a is not None
    assert a.source is AcceptanceSource.META_INFO
    assert a.accept_length == pytest.approx(64 / 44)
    assert (a.verify_ct, a.correct_drafts, a.proposed_drafts) == (44, 19, 132)
    assert a.accept_rate == pytest.approx(19 / 132)
    assert a.histogram == (30, 10, 3, 1)


def test_run_b_copy_draft_reaches_full_acceptance() -> None:
    """sa_copy_b: accept length 4.0, rate 1.0, 16 verifies, histogram [0, 0, 0, 16] (README)."""
    a = from_meta_info(_meta("run_b_attn_off/sa_copy_b"))
    assert a is not None
    assert (a.accept_length, a.accept_rate, a.verify_ct) == (4.0, 1.0, 16)
    assert a.histogram == (0, 0, 0, 16)


@pytest.mark.parametrize("server", ["run_a_init0.1/base", "run_b_attn_off/base_b"])
def test_baseline_meta_info_has_no_acceptance(server: str) -> None:
    """A baseline's meta_info has no spec keys, so there is no reported acceptance."""
    assert from_meta_info(_meta(server)) is None


def test_legacy_and_current_names_are_both_read() -> None:
    """Legacy-only (<= 0.5.20) and current-only (>= 0.5.21) meta_info give the same figures."""
    legacy = {
        "spec_verify_ct": 44,
        "spec_accept_length": 64 / 44,
        "spec_accepted_drafts": 19,
        "spec_proposed_drafts": 132,
        "spec_accept_histogram": [30, 10, 3, 1],
    }
    current = {
        "spec_verify_ct": 44,
        "spec_accept_length": 64 / 44,
        "spec_num_correct_drafts": 19,
        "spec_num_proposed_drafts": 132,
        "spec_correct_drafts_histogram": [30, 10, 3, 1],
        "spec_accept_rate": 19 / 132,
    }
    a, b = from_meta_info(legacy), from_meta_info(current)
    assert a is not None
    assert a == b
    assert (a.correct_drafts, a.proposed_drafts, a.histogram) == (19, 132, (30, 10, 3, 1))


def test_sglext_spec_tokens_details_object_and_list() -> None:
    """sglext.spec_tokens_details is read as an object, and a list (n > 1) is folded."""
    one = {
        "spec_accept_rate": 0.5,
        "spec_accept_length": 2.0,
        "spec_cap_length": 0.0,
        "spec_block_accept_length": 0.0,
        "spec_num_correct_drafts": 10,
        "spec_num_proposed_drafts": 20,
        "spec_verify_ct": 10,
        "spec_correct_drafts_histogram": [5, 0, 5],
        "spec_cap_lens_histogram": [],
    }
    two = {**one, "spec_accept_length": 4.0, "spec_verify_ct": 5, "spec_num_correct_drafts": 15}
    a = from_sglext({"spec_tokens_details": one})
    assert a is not None
    assert a.source is AcceptanceSource.SGLEXT
    assert a.accept_length == 2.0
    both = from_sglext({"spec_tokens_details": [one, two]})
    assert both is not None
    assert both.source is AcceptanceSource.SGLEXT
    assert both.verify_ct == 15
    assert both.accept_length == pytest.approx((2.0 * 10 + 4.0 * 5) / 15)
    assert both.correct_drafts == 25
    assert both.histogram == (10, 0, 10)
    assert from_sglext({"cached_tokens_details": {}}) is None


def test_llamacpp_timings_give_an_sglang_comparable_accept_length() -> None:
    """spec-noisy chat: 64 tokens, 53 of 80 drafts accepted -> 10 verifies, 6.4 tokens each."""
    body = json.loads((LLAMACPP / "tiny/spec-noisy/chat_nonstream.json").read_text())
    a = from_llamacpp_timings(body["timings"])
    assert a is not None
    assert a.source is AcceptanceSource.LLAMACPP_TIMINGS
    assert (a.verify_ct, a.correct_drafts, a.proposed_drafts) == (64 - 53 - 1, 53, 80)
    assert a.accept_length == pytest.approx(6.4)
    assert a.accept_rate == pytest.approx(53 / 80)


def test_llamacpp_identical_draft_matches_the_step_arithmetic() -> None:
    """spec-same: 56 of 56 drafts with n-max 8 is 7 steps of 8 drafts + 1, plus the prefill token."""
    body = json.loads((LLAMACPP / "tiny/spec-same/chat_nonstream.json").read_text())
    a = from_llamacpp_timings(body["timings"])
    assert a is not None
    assert a.verify_ct == 7
    assert body["usage"]["completion_tokens"] == 7 * (8 + 1) + 1
    assert a.accept_length == pytest.approx(64 / 7)


def test_llamacpp_baseline_timings_report_no_acceptance() -> None:
    """Without a draft, llama.cpp leaves out draft_n, so there is no acceptance."""
    body = json.loads((LLAMACPP / "tiny/baseline/chat_nonstream.json").read_text())
    assert "draft_n" not in body["timings"]
    assert from_llamacpp_timings(body["timings"]) is None


def test_chunk_estimate_matches_sglang_definition() -> None:
    """45 chunks for 64 tokens estimates 64/44, sa_copy's reported spec_accept_length."""
    a = estimate_from_chunks(64, 45)
    assert a is not None
    assert a.estimated
    assert a.accept_length == pytest.approx(_meta_len("run_a_init0.1/sa_copy"))
    assert estimate_from_chunks(1, 1) is None
    assert estimate_from_chunks(3, 5) is None


def _meta_len(server: str) -> float:
    value = _meta(server)["spec_accept_length"]
    assert isinstance(value, float)
    return value


def test_combine_of_one_is_itself_and_of_none_is_none() -> None:
    """combine_choices() passes a single acceptance through and returns None for an empty list."""
    a = from_meta_info(_meta("run_a_init0.1/sa_copy"))
    assert a is not None
    assert combine_choices([a]) is a
    assert combine_choices([]) is None


def test_accept_length_of_is_tokens_per_verify_step_or_none() -> None:
    """accept_length_of: tokens / verify steps; None without tokens or a verify step."""
    assert accept_length_of(64, 24) == pytest.approx(64 / 24)
    assert accept_length_of(10.0, 4.0) == 2.5
    assert accept_length_of(None, 4) is None
    assert accept_length_of(10, None) is None
    assert accept_length_of(10, 0) is None
    assert accept_length_of(10, -1) is None


def test_meta_info_without_length_uses_accept_length_of() -> None:
    """A meta_info with counts but no reported length gets completion / verify."""
    a = from_meta_info({"spec_verify_ct": 8, "completion_tokens": 20})
    assert a is not None
    assert a.accept_length == accept_length_of(20, 8) == 2.5
    assert a.accept_length_from == "completion_tokens/spec_verify_ct"
