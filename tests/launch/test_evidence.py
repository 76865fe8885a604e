"""Speculation evidence from OpenAI-compatible servers (llama.cpp /slots and timings)."""

from __future__ import annotations

from specproxy.core.records.model import Role
from specproxy.launch import evidence
from specproxy.launch.checks import CheckStatus


def test_slots_and_timings_are_read_as_llama_cpp_reports_them() -> None:
    """/slots' `speculative` flags and timings.draft_n give True/False; anything else None."""
    assert evidence.from_slots(200, b'[{"id":0,"speculative":true}]') is True
    assert evidence.from_slots(200, b'[{"id":0,"speculative":false}]') is False
    assert evidence.from_slots(404, b"not found") is None
    assert evidence.from_slots(200, b'{"error":"x"}') is None
    assert evidence.from_slots(200, b"<html>") is None
    assert evidence.from_timings({"timings": {"draft_n": 7, "draft_n_accepted": 7}}) is True
    assert evidence.from_timings({"timings": {"predicted_n": 8}}) is False
    assert evidence.from_timings({"choices": []}) is None
    assert evidence.combine(None, False) is False
    assert evidence.combine(False, True) is True
    assert evidence.combine(None, None) is None


def test_rows_fail_on_contrary_evidence_and_warn_without_any() -> None:
    """A drafting baseline fails, a drafting candidate passes, silence is only a warning."""
    rows = evidence.speculation_rows({Role.BASELINE: True, Role.CANDIDATE: None})
    assert [(r.name, r.status, r.side) for r in rows] == [
        ("speculation_off", CheckStatus.FAIL, "baseline"),
        ("speculation_on", CheckStatus.WARN, "candidate"),
    ]
    rows = evidence.speculation_rows({Role.BASELINE: False, Role.CANDIDATE: True})
    assert all(r.status is CheckStatus.PASS for r in rows)
