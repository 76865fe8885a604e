"""The output-distribution check's statistics, verdict wording, A/A widening and its place
among the recommendation's conditions."""

from __future__ import annotations

import math
import random

import pytest

from specproxy.core.compare import conditions as cc
from specproxy.core.compare.agreement import agreement_of
from specproxy.core.compare.distribution import (
    DistributionLabel,
    ScoredPair,
    check,
    cluster_mean_interval,
    describe_lossy,
    lossy_settings,
    not_checked,
    scored_pairs,
)
from specproxy.core.compare.pairing import Metric
from specproxy.core.compare.verdict import Verdict, VerdictLabel, recommend
from specproxy.core.statistics.stats import Interval


def _pairs(shift: float, n: int = 200, noise: float = 0.1, seed: int = 1) -> list[ScoredPair]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        level = rng.gauss(-2.5, 0.3)  # the prompt's own level, shared by both sides
        base = level + rng.gauss(0, noise)
        cand = level + shift + rng.gauss(0, noise)
        out.append(ScoredPair(i // 10, base, cand, 100, 100))
    return out


def test_cluster_interval_equals_the_t_interval_of_unit_means_for_equal_units() -> None:
    """With equal-sized units the cluster-robust interval is Student's t on the unit means."""
    values = [1.0, 2.0, 3.0, 4.0, 2.0, 2.0]
    iv = cluster_mean_interval(values, [0, 0, 1, 1, 2, 2])
    means = [1.5, 3.5, 2.0]
    centre = sum(means) / 3
    sd = math.sqrt(sum((m - centre) ** 2 for m in means) / 2)
    assert iv.point == pytest.approx(sum(values) / 6) == pytest.approx(centre)
    half = 4.302652729911275 * sd / math.sqrt(3)  # t(0.975, 2)
    assert iv.high - iv.point == pytest.approx(half, rel=1e-6)
    assert iv.units == 3


def test_one_unit_gives_an_unbounded_interval() -> None:
    """Pairs from a single unit carry no between-unit spread: the interval is infinite."""
    iv = cluster_mean_interval([0.1, 0.2, 0.3], [0, 0, 0])
    assert iv.low == -math.inf and iv.high == math.inf


def test_no_shift_is_same_distribution_and_a_large_shift_is_shifted() -> None:
    """Equal sides land inside ±0.05; a -0.2 nats/token candidate is called shifted with its interval."""
    same = check(_pairs(0.0))
    assert same.label is DistributionLabel.SAME and same.same
    assert same.text.startswith("same distribution within ±0.050 nats/token")
    shifted = check(_pairs(-0.2))
    assert shifted.label is DistributionLabel.SHIFTED
    assert shifted.logprob is not None and shifted.logprob.contains(-0.2)
    lp = shifted.logprob
    assert shifted.text.startswith(
        f"shifted by {lp.point:+.3f} [{lp.low:+.3f}, {lp.high:+.3f}] nats/token"
    )


def test_an_interval_straddling_the_margin_is_not_settled() -> None:
    """A shift near the margin with wide noise is neither same nor shifted."""
    found = check(_pairs(-0.05, n=60, noise=0.3))
    assert found.label is DistributionLabel.NOT_SETTLED
    assert found.text.startswith("not settled")


def test_too_few_pairs_are_not_settled_however_large_the_shift() -> None:
    """Under 30 scored pairs the check does not decide."""
    found = check(_pairs(-1.0, n=20))
    assert found.label is DistributionLabel.NOT_SETTLED
    assert "needs 30 scored pairs" in found.text


def test_a_length_shift_alone_is_shifted() -> None:
    """Same log-probabilities but candidate outputs 30% longer: shifted, naming the length."""
    pairs = [ScoredPair(p.unit, p.base_logprob, p.base_logprob, 100, 130) for p in _pairs(0.0)]
    found = check(pairs)
    assert found.label is DistributionLabel.SHIFTED
    assert found.text.startswith("shifted: output length +30.0%")


def test_an_aa_run_widens_the_margin() -> None:
    """An A/A check reaching 0.12 from 0 widens the margin to 0.12: a -0.08 shift is then not shifted."""
    aa = check(_pairs(0.0))
    wide = aa.__class__(
        aa.label, aa.text, Interval(0.0, -0.12, 0.1, 200, units=20), aa.length, pairs=200
    )
    found = check(_pairs(-0.08), aa=wide)
    assert found.margin == pytest.approx(0.12)
    assert found.label is not DistributionLabel.SHIFTED
    assert check(_pairs(-0.08)).label is DistributionLabel.SHIFTED


def test_scored_pairs_skip_failed_outputs_and_assign_segments() -> None:
    """Lines with a failed side are left out; the rest are cut into segments of consecutive pairs."""
    lines = [
        {"experiment_id": "e", "block": -1, "sent_at_unix_s": float(i),
         "baseline": {"mean_logprob": -2.0, "completion_tokens": 10},
         "candidate": {"mean_logprob": -2.1, "completion_tokens": 10}}
        for i in range(40)
    ]  # fmt: skip
    lines.append({"experiment_id": "e", "baseline": {"error": "x"}, "candidate": {}})
    pairs, unit = scored_pairs(lines)
    assert len(pairs) == 40 and unit == "segment"
    assert len({p.unit for p in pairs}) == 4


def test_lossy_settings_are_the_thresholds_below_one() -> None:
    """Only accept thresholds below 1.0 count as lossy, written as SGLang flags."""
    args = {"speculative_accept_threshold_single": 0.3, "speculative_accept_threshold_acc": 1.0}
    found = lossy_settings(args)
    assert found == (("speculative_accept_threshold_single", 0.3),)
    assert describe_lossy(found) == "--speculative-accept-threshold-single 0.3"
    assert lossy_settings({"speculative_accept_threshold_acc": 1.0}) == ()


def test_under_sampling_the_recommendation_requires_same_distribution() -> None:
    """A shifted candidate fails same_output_distribution, so a real (not simulated) faster
    verdict gets no recommendation; "same distribution" meets it."""
    sampled = agreement_of(100, 3, [], {"temperature": 0.7})
    iv = Interval(0.8, 0.75, 0.85, 100, units=10, unit="segment")
    verdict = Verdict(VerdictLabel.FASTER, Metric.E2E, iv, 0.02, 100, "below")
    for pairs, met in ((_pairs(-0.2), False), (_pairs(0.0), True)):
        found = check(pairs)
        conds = [
            cc.outputs_compared(sampled, found),
            cc.same_distribution(found),
            cc.Condition("other", True, "fine"),
        ]
        rec = recommend(verdict, conds, simulated=False, aa=False, algorithm="EAGLE", scope={})
        assert conds[0].met  # exact match is not asked for under sampling
        assert conds[1].met is met
        assert (rec.text is not None) is met
        if not met:
            assert cc.SAME_DISTRIBUTION in rec.reason


def test_not_checked_says_why() -> None:
    """ "not checked" carries its reason and fails the condition."""
    found = not_checked("no scoring requests were sent")
    assert found.text == "not checked: no scoring requests were sent"
    assert not cc.same_distribution(found).met
