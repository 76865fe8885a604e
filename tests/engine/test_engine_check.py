"""`specproxy check --kind openai` (preflight, docs/contract.md) against the real llama.cpp pair."""

from __future__ import annotations

import json
from typing import Any

import pytest

from specproxy import cli
from tools.engine.llamacpp import PairUrls

pytestmark = pytest.mark.engine


def _check(pair: PairUrls, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    argv = ["check", "--baseline", pair.baseline, "--candidate", pair.spec_same]
    with pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--kind", "openai", "--json"])
    code = exited.value.code
    return (code if isinstance(code, int) else 1), json.loads(capsys.readouterr().out)


def test_check_passes_health_decode_and_agreement(
    llama_pair: PairUrls, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both real servers are healthy, decode greedily and agree, so check exits 0."""
    code, outcome = _check(llama_pair, capsys)
    assert code == 0
    assert outcome["ok"] is True
    status = {(c["name"], c["side"]): c["status"] for c in outcome["checks"]}
    for side in ("baseline", "candidate"):
        assert status[("health", side)] == "PASS"
        assert status[("decode", side)] == "PASS"
    assert status[("greedy_agreement", None)] == "PASS"


def test_check_confirms_speculation_from_the_server(
    llama_pair: PairUrls, capsys: pytest.CaptureFixture[str]
) -> None:
    """Check passes speculation_off on the baseline and speculation_on on the candidate, from drafting."""
    _code, outcome = _check(llama_pair, capsys)
    for name, side, seen in (
        ("speculation_off", "baseline", "server reports no drafting"),
        ("speculation_on", "candidate", "server reports drafting"),
    ):
        rows = [c for c in outcome["checks"] if (c["name"], c["side"]) == (name, side)]
        assert rows, f"no {name} check on the {side}"
        assert all(c["status"] == "PASS" for c in rows), rows
        assert any(c["detail"].startswith(seen) for c in rows), rows
