"""`specproxy check` against servers replaying real captures over loopback, exit statuses included."""

from __future__ import annotations

import json
from contextlib import ExitStack
from typing import Any

import pytest

from specproxy.backends.base import BackendKind, BackendSpec
from specproxy.cli import main
from specproxy.core.records.model import Role
from specproxy.launch.checks import CheckStatus
from specproxy.launch.preflight import run_preflight
from tests.launch.capture_server import CaptureServer, closed_port_url, in_thread, running
from tests.launch.captures import RUN_B

KEY = "sk-check-key-777"
CAP_48 = {"max_running_requests": 48}
EFFECTIVE_48 = {"effective_max_running_requests_per_dp": 48}


def _matched_baseline(**overrides: Any) -> CaptureServer:
    """Run B's baseline with the explicit 48-request cap a matched pair needs."""
    return CaptureServer(
        "base_b", RUN_B, overrides={**CAP_48, **overrides}, internal_overrides=EFFECTIVE_48
    )


def _check(
    capsys: pytest.CaptureFixture[str],
    base: CaptureServer | str,
    cand: CaptureServer | str,
    *extra: str,
) -> tuple[int, str, str]:
    """Run `specproxy check` against the two servers; returns (exit status, stdout, stderr)."""
    with ExitStack() as stack:
        urls = [
            s if isinstance(s, str) else stack.enter_context(in_thread(s)) for s in (base, cand)
        ]
        with pytest.raises(SystemExit) as exit_info:
            main(["check", "--baseline", urls[0], "--candidate", urls[1], *extra])
    out, err = capsys.readouterr()
    return int(exit_info.value.code or 0), out, err


def _rows(out: str) -> dict[tuple[str, str], str]:
    """(check, side) -> status from the --json output."""
    doc = json.loads(out)
    return {(c["name"], c["side"] or "both"): c["status"] for c in doc["checks"]}


def test_a_matched_pair_passes_with_exit_zero(capsys: pytest.CaptureFixture[str]) -> None:
    """Run B base (48 cap) vs STANDALONE: every check passes or warns, exit 0, a readable table."""
    code, out, _ = _check(capsys, _matched_baseline(), CaptureServer("sa_copy_b", RUN_B))
    assert code == 0, out
    assert "speculation_on" in out
    assert "STANDALONE" in out
    assert "greedy_agreement" in out
    assert " FAIL " not in out
    assert out.strip().endswith("0 failed")


def test_json_output_lists_every_check_and_both_configs(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints ok, each check's status and both fingerprinted launch configs."""
    code, out, _ = _check(capsys, _matched_baseline(), CaptureServer("sa_copy_b", RUN_B), "--json")
    doc = json.loads(out)
    rows = _rows(out)
    assert code == 0
    assert doc["ok"] is True
    assert rows[("speculation_off", "baseline")] == "PASS"
    assert rows[("speculation_on", "candidate")] == "PASS"
    assert rows[("greedy_agreement", "both")] == "PASS"
    assert rows[("diff:max_total_num_tokens", "both")] == "WARN"
    assert doc["candidate"]["fingerprint"] != doc["baseline"]["fingerprint"]


def test_a_candidate_without_speculation_fails_with_exit_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two baselines: speculation_on fails on the candidate and the exit status is 1."""
    code, out, err = _check(capsys, _matched_baseline(), _matched_baseline(), "--json")
    assert code == 1
    assert _rows(out)[("speculation_on", "candidate")] == "FAIL"
    assert "speculation_on" in err


def test_a_baseline_serving_another_model_is_not_matched(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A baseline whose model path differs fails diff:model_path and matched_baseline."""
    base = _matched_baseline(model_path="/tmp/models/other")
    code, out, _ = _check(capsys, base, CaptureServer("sa_copy_b", RUN_B), "--json")
    rows = _rows(out)
    assert code == 1
    assert rows[("diff:model_path", "both")] == "FAIL"
    assert rows[("matched_baseline", "both")] == "FAIL"


def test_the_implicit_48_request_cap_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    """Without an explicit cap on the baseline, the 48-request default is a named failure."""
    code, out, _ = _check(capsys, CaptureServer("base_b", RUN_B), CaptureServer("sa_copy_b", RUN_B))
    assert code == 1
    assert "diff:max_running_requests" in out
    assert "48" in out


def test_an_unreachable_candidate_exits_three(capsys: pytest.CaptureFixture[str]) -> None:
    """A candidate URL with nothing listening gives exit status 3 and names the side."""
    code, out, err = _check(capsys, _matched_baseline(), closed_port_url())
    assert code == 3
    assert "candidate" in err
    assert "reachable" in out


def test_nextn_on_a_model_without_mtp_layers_is_incompatible(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--expect-algorithm NEXTN against a Llama target fails as an incompatibility."""
    code, out, _ = _check(
        capsys, _matched_baseline(), CaptureServer("sa_copy_b", RUN_B),
        "--expect-algorithm", "NEXTN", "--json",
    )  # fmt: skip
    doc = json.loads(out)
    row = next(c for c in doc["checks"] if c["name"] == "expected_algorithm")
    assert code == 1
    assert row["status"] == "FAIL"
    assert "incompatible" in row["detail"]
    assert "LlamaForCausalLM" in row["detail"]


@pytest.mark.parametrize(
    ("label", "status", "words"),
    [
        ("standalone", "PASS", "STANDALONE"),
        ("EAGLE3", "FAIL", "server reports STANDALONE"),
        ("MEDUSA", "FAIL", "not an algorithm SGLang 0.5.16 knows"),
        ("UNO", "FAIL", "not an algorithm SGLang 0.5.16 knows"),
    ],
)
async def test_expected_algorithm_labels(label: str, status: str, words: str) -> None:
    """A label matches, names another algorithm, or names one this version does not know."""
    async with running(_matched_baseline()) as b, running(CaptureServer("sa_copy_b", RUN_B)) as c:
        outcome = await run_preflight(
            BackendSpec(b, Role.BASELINE), BackendSpec(c, Role.CANDIDATE), expect_algorithm=label
        )
    row = next(r for r in outcome.checks if r.name == "expected_algorithm")
    assert (str(row.status), words in row.detail) == (status, True)


async def test_an_algorithm_the_version_does_not_know_fails() -> None:
    """A server reporting UNO while claiming 0.5.16 fails algorithm_known."""
    cand = CaptureServer("sa_copy_b", RUN_B, overrides={"speculative_algorithm": "UNO"})
    async with running(_matched_baseline()) as b, running(cand) as c:
        outcome = await run_preflight(BackendSpec(b, Role.BASELINE), BackendSpec(c, Role.CANDIDATE))
    row = next(r for r in outcome.checks if r.name == "algorithm_known")
    assert row.status is CheckStatus.FAIL
    assert not outcome.ok


async def test_a_speculative_baseline_fails_speculation_off() -> None:
    """A baseline that reports a speculative algorithm fails speculation_off."""
    async with (
        running(CaptureServer("ngram_b", RUN_B)) as b,
        running(CaptureServer("sa_copy_b", RUN_B)) as c,
    ):
        outcome = await run_preflight(BackendSpec(b, Role.BASELINE), BackendSpec(c, Role.CANDIDATE))
    row = next(r for r in outcome.checks if r.name == "speculation_off")
    assert row.status is CheckStatus.FAIL
    assert "NGRAM" in row.detail


def test_api_keys_are_sent_but_never_printed(capsys: pytest.CaptureFixture[str]) -> None:
    """With --api-key the protected routes answer, and the key appears in no output."""
    base = _matched_baseline()
    base.api_key = KEY
    cand = CaptureServer("sa_copy_b", RUN_B, api_key=KEY)
    code, out, err = _check(capsys, base, cand, "--api-key", KEY, "--json")
    assert code == 0, out
    assert KEY not in out + err
    assert f"Bearer {KEY}" in cand.seen_auth


def test_a_missing_api_key_fails_the_protected_checks(capsys: pytest.CaptureFixture[str]) -> None:
    """Without the key, server info and decode fail (exit 1) with a hint about the key."""
    cand = CaptureServer("sa_copy_b", RUN_B, api_key=KEY)
    code, out, _ = _check(capsys, _matched_baseline(), cand, "--json")
    rows = _rows(out)
    assert code == 1
    assert rows[("server_info", "candidate")] == "FAIL"
    assert rows[("decode", "candidate")] == "FAIL"
    assert "API key" in out


async def test_simulated_servers_are_labelled() -> None:
    """Simulated servers pass but get a SIMULATED warning row."""
    cand = CaptureServer("sa_copy_b", RUN_B, overrides={"simulated": True})
    async with running(_matched_baseline(simulated=True)) as b, running(cand) as c:
        outcome = await run_preflight(BackendSpec(b, Role.BASELINE), BackendSpec(c, Role.CANDIDATE))
    row = next(r for r in outcome.checks if r.name == "real_servers")
    assert row.status is CheckStatus.WARN
    assert "SIMULATED" in row.detail
    assert outcome.ok


async def test_kind_openai_decodes_over_chat_and_warns_on_server_info() -> None:
    """For OpenAI-compatible servers a chat decode (served model id) is checked; no server info."""
    candidate = CaptureServer("sa_copy_b", RUN_B)
    async with running(_matched_baseline()) as b, running(candidate) as c:
        outcome = await run_preflight(
            BackendSpec(b, Role.BASELINE, kind=BackendKind.OPENAI),
            BackendSpec(c, Role.CANDIDATE, kind=BackendKind.OPENAI),
        )
    rows = {(r.name, r.side): r.status for r in outcome.checks}
    assert candidate.seen_models == ["/tmp/models_attnoff/target"]  # the id from /v1/models
    assert rows[("decode", "candidate")] is CheckStatus.PASS
    assert rows[("server_info", "candidate")] is CheckStatus.WARN
    assert outcome.diff is None
