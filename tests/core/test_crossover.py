"""The crossover estimator on synthetic level sets with known answers, and the closed form."""

from __future__ import annotations

import math
import random

import pytest

from specproxy.core.load.crossover import (
    LevelRatio,
    SideCost,
    closed_form_crossover,
    estimate_crossover,
    expected_tokens_per_step,
    isotonic,
)

LADDER = (1, 2, 4, 8, 16, 32, 64, 128)

# The issue's setup: baseline 5 ms + 100 us/token; STANDALONE 3 steps, topk 1, 4 draft tokens.
BASELINE = SideCost.baseline(decode_step_ms=5, per_token_us=100)
CANDIDATE = SideCost.speculative(
    verify_step_ms=5,
    num_steps=3,
    num_draft_tokens=4,
    accept_prob=0.7,
    max_accepted=3,
    draft_step_ms=0.5,
    per_token_us=100,
)


def true_ratio(load: float) -> float:
    return CANDIDATE.per_token_time_us(load) / BASELINE.per_token_time_us(load)


def banded(ratio: float, load: float, sigma: float) -> LevelRatio:
    """A level whose interval is the point times exp(+-1.96 sigma)."""
    half = math.exp(1.96 * sigma)
    return LevelRatio(load=load, point=ratio, low=ratio / half, high=ratio * half)


def log_linear(crossing: float, slope: float) -> list[LevelRatio]:
    """Points on 1 + slope * log(load / crossing), each with a +-0.05 band."""
    out = []
    for load in LADDER:
        point = 1 + slope * math.log(load / crossing)
        out.append(LevelRatio(load, point, point - 0.05, point + 0.05))
    return out


def test_a_ratio_linear_in_log_load_crosses_exactly_where_it_reaches_one() -> None:
    """On a ratio linear in log(load) the estimate is the true crossing and the band brackets it."""
    result = estimate_crossover(log_linear(crossing=23.0, slope=0.1), "e2e")
    assert result.status == "crossed"
    assert result.estimate == pytest.approx(23.0)
    # the band's edges are the line shifted by +-0.05, so they cross at 23 * exp(-+0.5)
    assert result.ci == pytest.approx((23.0 * math.exp(-0.5), 23.0 * math.exp(0.5)))
    assert "23" in result.detail


def test_the_simulator_curve_is_found_near_its_closed_form_crossing() -> None:
    """On the issue's step-cost curve, the estimate is within 1% of the closed form, inside the CI."""
    truth = closed_form_crossover(BASELINE, CANDIDATE)
    assert truth is not None
    levels = [banded(true_ratio(load), load, 0.02) for load in LADDER]
    result = estimate_crossover(levels, "tpot")
    assert result.status == "crossed"
    assert result.estimate == pytest.approx(truth, rel=0.01)
    assert result.ci is not None
    assert result.ci[0] < truth < result.ci[1]


def test_the_order_of_the_levels_does_not_matter() -> None:
    """Levels given in any order give the same crossover."""
    levels = log_linear(crossing=40.0, slope=0.2)
    shuffled = list(levels)
    random.Random(3).shuffle(shuffled)
    assert estimate_crossover(shuffled, "tpot") == estimate_crossover(levels, "tpot")


def test_a_ratio_below_one_everywhere_pays_everywhere_with_an_open_interval() -> None:
    """All points below 1: no estimate; the interval starts where the upper edge reaches 1."""
    levels = [
        LevelRatio(1, 0.5, 0.4, 0.6),
        LevelRatio(2, 0.7, 0.6, 0.8),
        LevelRatio(4, 0.9, 0.8, 1.1),
    ]
    result = estimate_crossover(levels, "e2e")
    assert result.status == "pays_everywhere"
    assert result.estimate is None
    assert result.ci is not None
    # the upper edge goes 0.8 at load 2 -> 1.1 at load 4: reaches 1 two thirds of the way in log
    assert result.ci[0] == pytest.approx(2 * 2 ** (2 / 3))
    assert math.isinf(result.ci[1])
    assert "above" in result.detail


def test_surely_faster_everywhere_puts_the_interval_beyond_the_highest_level() -> None:
    """When every interval lies below 1, a crossing can only lie above the highest load."""
    levels = [LevelRatio(load, 0.5, 0.4, 0.6) for load in (1, 8, 64)]
    result = estimate_crossover(levels, "tpot")
    assert result.status == "pays_everywhere"
    assert result.ci == (64.0, math.inf)


def test_a_ratio_above_one_everywhere_pays_nowhere() -> None:
    """All points at or above 1: no estimate, the interval is open at the bottom."""
    levels = [LevelRatio(1, 1.0, 0.9, 1.1), LevelRatio(4, 1.3, 1.1, 1.5)]
    result = estimate_crossover(levels, "tpot")
    assert result.status == "pays_nowhere"
    assert result.estimate is None
    assert result.ci is not None
    assert result.ci[0] == 0.0
    # the lower edge goes 0.9 at load 1 -> 1.1 at load 4: reaches 1 half way in log
    assert result.ci[1] == pytest.approx(2.0)


def test_a_crossing_below_the_lowest_level_leaves_the_interval_open_at_zero() -> None:
    """An upper edge already at 1 on the first level makes the interval's lower bound 0."""
    levels = [LevelRatio(1, 0.95, 0.8, 1.1), LevelRatio(2, 1.2, 1.1, 1.3)]
    result = estimate_crossover(levels, "e2e")
    assert result.status == "crossed"
    assert result.ci is not None
    assert result.ci[0] == 0.0
    assert result.estimate is not None and 1 < result.estimate < 2
    assert "below the lowest level" in result.detail


def test_a_non_monotone_curve_is_pooled_into_one_upward_crossing() -> None:
    """A dip back below 1 is pooled: one estimate, and the interval spans every band crossing."""
    points = [0.6, 0.8, 1.05, 0.95, 1.3, 1.5]
    levels = [
        LevelRatio(load, p, p - 0.04, p + 0.04) for load, p in zip(LADDER, points, strict=False)
    ]
    result = estimate_crossover(levels, "tpot")
    assert result.status == "crossed"
    # loads 4 and 8 pool to 1.0: the fit reaches 1 exactly at load 4
    assert result.estimate == pytest.approx(4.0)
    assert result.ci is not None
    # upper edge first reaches 1 between loads 2 (0.84) and 4 (1.09); lower edge last rises
    # through 1 between loads 8 (0.91) and 16 (1.26)
    assert 2 < result.ci[0] < 4
    assert 8 < result.ci[1] < 16
    assert "pooled" in result.detail


def test_a_ratio_falling_with_load_is_undetermined() -> None:
    """Points on both sides of 1 that fall with load have no upward crossing."""
    levels = [LevelRatio(load, p, None, None) for load, p in ((1, 1.3), (2, 1.1), (4, 0.8))]
    result = estimate_crossover(levels, "e2e")
    assert result.status == "undetermined"
    assert result.estimate is None


def test_a_crossing_into_an_infinite_ratio_sits_at_the_geometric_midpoint() -> None:
    """When the next level's ratio is infinite the estimate is the geometric mean of the loads."""
    levels = [
        LevelRatio(4, 0.7, 0.6, 0.8),
        LevelRatio(16, math.inf, math.inf, math.inf),
    ]
    result = estimate_crossover(levels, "e2e")
    assert result.status == "crossed"
    assert result.estimate == pytest.approx(8.0)
    assert result.ci == (4.0, 16.0)


def test_levels_without_intervals_give_an_estimate_and_no_interval() -> None:
    """Without any per-level interval the estimate stands alone."""
    levels = [LevelRatio(load, 1 + 0.1 * math.log(load / 10), None, None) for load in LADDER]
    result = estimate_crossover(levels, "tpot")
    assert result.status == "crossed"
    assert result.estimate == pytest.approx(10.0)
    assert result.ci is None


def test_no_levels_are_undetermined() -> None:
    """An empty sweep has no crossover to report."""
    result = estimate_crossover([], "e2e")
    assert (result.status, result.estimate, result.ci) == ("undetermined", None, None)


@pytest.mark.parametrize(
    ("levels", "metric", "field"),
    [
        ([LevelRatio(1, 0.9, 0.8, 1.0)], "ttft", "metric"),
        ([LevelRatio(0, 0.9, 0.8, 1.0)], "e2e", "load"),
        ([LevelRatio(1, math.nan, None, None)], "e2e", "point"),
        ([LevelRatio(1, 0.9, 1.0, 0.8)], "e2e", "low"),
        ([LevelRatio(1, 0.9, 0.8, None)], "e2e", "low/high"),
        ([LevelRatio(2, 0.9, None, None), LevelRatio(2, 1.1, None, None)], "e2e", "appears twice"),
    ],
)
def test_bad_levels_are_refused_naming_the_problem(
    levels: list[LevelRatio], metric: str, field: str
) -> None:
    """Malformed input raises ValueError naming the field at fault."""
    with pytest.raises(ValueError, match=field):
        estimate_crossover(levels, metric)


def test_isotonic_regression_pools_adjacent_violators() -> None:
    """Pool-adjacent-violators returns the least-squares non-decreasing fit."""
    assert isotonic([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic([3.0, 2.0, 1.0]) == [2.0, 2.0, 2.0]
    assert isotonic([1.0, math.inf, 2.0]) == [1.0, math.inf, math.inf]


@pytest.mark.parametrize("ladder", [LADDER, (4, 8, 16, 32, 64), (1, 4, 16, 64, 256)])
@pytest.mark.parametrize("sigma", [0.02, 0.06])
def test_the_interval_covers_the_true_crossing_in_at_least_90_percent_of_seeded_sweeps(
    ladder: tuple[int, ...], sigma: float
) -> None:
    """With 95% per-level intervals around noisy points, the interval covers the truth >= 90%."""
    truth = closed_form_crossover(BASELINE, CANDIDATE)
    assert truth is not None
    covered = 0
    for seed in range(300):
        rng = random.Random(seed)
        levels = [
            banded(true_ratio(load) * math.exp(rng.gauss(0, sigma)), load, sigma) for load in ladder
        ]
        ci = estimate_crossover(levels, "tpot").ci
        covered += ci is not None and ci[0] <= truth <= ci[1]
    assert covered / 300 >= 0.90


def test_the_issue_setup_crosses_near_40_streams() -> None:
    """The closed form of the issue's setup sits near 40 streams, faster below it, slower above."""
    crossing = closed_form_crossover(BASELINE, CANDIDATE)
    assert crossing is not None
    assert 30 < crossing < 50
    assert CANDIDATE.per_token_time_us(crossing) == pytest.approx(
        BASELINE.per_token_time_us(crossing)
    )
    assert CANDIDATE.per_token_time_us(8) < BASELINE.per_token_time_us(8)
    assert CANDIDATE.per_token_time_us(64) > BASELINE.per_token_time_us(64)


def test_the_closed_form_with_contention_matches_a_numeric_root() -> None:
    """With contention on both sides the closed form equals the bisected root of the time gap."""
    base = SideCost.baseline(decode_step_ms=5, per_token_us=100, contention=0.01)
    cand = SideCost.speculative(
        verify_step_ms=5,
        num_steps=3,
        num_draft_tokens=4,
        accept_prob=0.7,
        max_accepted=3,
        draft_step_ms=0.5,
        per_token_us=100,
        contention=0.01,
    )
    low, high = 1.0, 10_000.0
    for _ in range(200):
        mid = (low + high) / 2
        if cand.per_token_time_us(mid) < base.per_token_time_us(mid):
            low = mid
        else:
            high = mid
    assert closed_form_crossover(base, cand) == pytest.approx(low)


def test_no_crossing_when_the_candidate_is_slower_at_every_load() -> None:
    """A candidate with a higher fixed cost, more compute per request and no accepted drafts."""
    base = SideCost.baseline(decode_step_ms=5, per_token_us=100)
    slow = SideCost.speculative(
        verify_step_ms=20,
        num_steps=3,
        num_draft_tokens=4,
        accept_prob=0.0,
        max_accepted=3,
        per_token_us=100,
    )
    assert closed_form_crossover(base, slow) is None
    assert closed_form_crossover(base, base) is None


def test_expected_tokens_per_step_is_the_truncated_geometric_sum() -> None:
    """1 + p + ... + p^m; m drafts all accepted with p = 1; only the bonus token with p = 0."""
    assert expected_tokens_per_step(0.5, 2) == 1.75
    assert expected_tokens_per_step(1.0, 3) == 4.0
    assert expected_tokens_per_step(0.0, 5) == 1.0
    with pytest.raises(ValueError, match="accept_prob"):
        expected_tokens_per_step(1.5, 3)
