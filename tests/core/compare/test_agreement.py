"""Output agreement across pairs and recognising an A/A run."""

from __future__ import annotations

import pytest

from specproxy.core.compare.agreement import (
    OutputAgreement,
    aa_reason,
    first_divergence,
    is_greedy,
    judge_against_noise,
)
from specproxy.core.compare.pairing import find_pairs
from specproxy.core.records.model import ErrorKind, Role
from specproxy.core.statistics.stats import wilson_interval
from specproxy.testing.fabricate import experiment, make_records, record
from tests.oracles.agreement import output_agreement

B, C = Role.BASELINE, Role.CANDIDATE


def test_first_divergence() -> None:
    """The first differing character index; a prefix diverges at the shorter length."""
    assert first_divergence("abcdef", "abXdef") == 2
    assert first_divergence("abc", "abcdef") == 3
    assert first_divergence("same", "same") == 4


@pytest.mark.parametrize(
    ("sampling", "greedy"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.7}, False),
        ({"greedy": True}, True),
        ({}, None),
        (None, None),
    ],
)
def test_greedy_detection(sampling: dict[str, object] | None, greedy: bool | None) -> None:
    """Temperature 0 or an explicit greedy flag is greedy; no record of sampling is unknown."""
    assert is_greedy(sampling) is greedy


def test_exact_match_rate_and_divergence_positions() -> None:
    """Matches by hash over completed pairs with hashes; divergence positions from texts."""
    recs = [
        record(B, "1", sha="h1"), record(C, "1", sha="h1"),
        record(B, "2", sha="h2", text="hello world"), record(C, "2", sha="zz", text="hello there"),
        record(B, "3", sha="h3", text="abc"), record(C, "3", sha="h3x", text="abd"),
        record(B, "4", sha="h4"), record(C, "4", sha="other"),
        record(B, "5", sha="h5"), record(C, "5", error=ErrorKind.TIMEOUT),
        record(B, "6"), record(C, "6"),
    ]  # fmt: skip
    a = output_agreement(find_pairs(recs).pairs, {"temperature": 0})
    assert (a.compared, a.matched, a.mismatched) == (4, 1, 3)
    assert a.rate is not None and a.rate.point == 0.25
    assert a.mismatched_with_text == 2
    assert a.first_divergence == (2.0, 4.0, 6.0)
    assert a.greedy is True


def test_agreement_rate_of_fabricated_disagreement() -> None:
    """With 10% of candidate outputs altered, the exact-match interval covers 0.9."""
    recs = make_records(n_pairs=1000, disagree=0.1, seed=5)
    a = output_agreement(find_pairs(recs).pairs, {"temperature": 0})
    assert a.rate is not None and a.rate.contains(0.9)
    assert a.first_divergence == (7.0, 7.0, 7.0)


def test_aa_recognised_from_flag_mode_or_fingerprints() -> None:
    """An A/A run is declared (aa flag or mode) or implied by equal launch fingerprints."""
    assert aa_reason({"aa": True}) is not None
    assert aa_reason({"mode": "A/A"}) is not None
    same = experiment(aa=False, cand_extra={"speculative_algorithm": None,
        "speculative_draft_model_path": None, "speculative_draft_model_revision": None,
        "speculative_num_steps": None, "port": 30000})  # fmt: skip
    reason = aa_reason(same)
    assert reason is not None and "fingerprint" in reason
    assert aa_reason(experiment()) is None


def _rate(matched: int, compared: int) -> OutputAgreement:
    return OutputAgreement(compared, matched, wilson_interval(matched, compared), True, 0, None)


def test_agreement_judged_against_the_aa_noise_floor() -> None:
    """A/B agreement clearly below A/A's is flagged; overlapping rates are within the floor."""
    flagged = judge_against_noise(_rate(800, 1000), _rate(990, 1000))
    assert flagged is not None and "beyond" in flagged
    assert judge_against_noise(_rate(985, 1000), _rate(990, 1000)) == (
        "output agreement is within the A/A noise floor"
    )
    assert judge_against_noise(_rate(5, 10), OutputAgreement(0, 0, None, True, 0, None)) is None
