"""Capacity at an SLO (``core.load.capacity``): parsing, the monotone fit and its crossing, open
ends, failures as violations, and the bootstrap interval, on constructed ladders whose
answer is known."""

from __future__ import annotations

import math
import random

import pytest

from specproxy.core.load.capacity import (
    Bound,
    LevelSample,
    estimate_capacity,
    first_crossing,
    parse_bound,
    pooled_percentile,
    side_capacity,
    small_sample_factor,
)
from specproxy.core.statistics.distributions import student_t_quantile
from specproxy.core.statistics.stats import DEFAULT_SEED, quantile_sorted


def _level(
    load: float, base: list[list[float]], cand: list[list[float]], **rates: float
) -> LevelSample:
    return LevelSample(
        load, len(base),
        {"baseline": {"tpot": base, "ttft": base, "e2e": base},
         "candidate": {"tpot": cand, "ttft": cand, "e2e": cand}},
        {"baseline": rates.get("baseline"), "candidate": rates.get("candidate")},
    )  # fmt: skip


def _affine_ladder(loads: list[float], units: int = 8) -> list[LevelSample]:
    """TPOT (ms) affine in load: baseline 10 + 1 * load, candidate 5 + 2 * load, each unit
    a spread of +-0.2 ms around it (the percentile's truth is exact at every level)."""
    out = []
    for load in loads:
        spread = [-0.2, -0.1, 0.0, 0.1, 0.2]
        base = [[10 + load + d for d in spread] for _ in range(units)]
        cand = [[5 + 2 * load + d for d in spread] for _ in range(units)]
        out.append(_level(load, base, cand, baseline=load * 10, candidate=load * 12))
    return out


def test_parse_bound_reads_metric_percentile_and_limit() -> None:
    assert parse_bound("ttft_p99_ms", "500") == Bound("ttft", 99.0, 500.0)
    assert parse_bound("e2e_p99.9_ms", "2000") == Bound("e2e", 99.9, 2000.0)
    assert parse_bound("tpot_ms", "40") is None  # the goodput form is not a bound
    with pytest.raises(ValueError, match="tpot_p99_ms: not a number"):
        parse_bound("tpot_p99_ms", "fast")
    with pytest.raises(ValueError, match="e2e_p95_ms must be > 0"):
        parse_bound("e2e_p95_ms", "0")
    with pytest.raises(ValueError, match="strictly between 0 and 100"):
        Bound("ttft", 0.0, 10.0)
    assert Bound("tpot", 99.5, 40.0).key == "tpot_p99.5_ms"


def test_crossing_interpolates_the_monotone_fit_and_reports_open_ends() -> None:
    loads = [1.0, 2.0, 4.0, 8.0]
    assert first_crossing(loads, [10, 12, 16, 24], 20.0) == pytest.approx(6.0)
    # a dip at 4 is pooled with 2 (mean 14): the crossing moves onto the pooled segment
    assert first_crossing(loads, [10, 16, 12, 24], 19.0) == pytest.approx(4 + 5 / 10 * 4)
    assert first_crossing(loads, [25, 30, 40, 50], 20.0) == 0.0  # below the lowest level
    assert math.isinf(first_crossing(loads, [1, 2, 3, 4], 20.0))  # at least the top level
    # into an infinite level (failures): the geometric midpoint of the two loads
    assert first_crossing(loads, [10, 12, math.inf, math.inf], 20.0) == pytest.approx(math.sqrt(8))


def test_failures_count_as_violations() -> None:
    ok = [[10.0] * 10 for _ in range(4)]
    failing = [[10.0] * 8 + [math.inf] * 2 for _ in range(4)]  # 20% failed
    levels = [_level(1.0, ok, ok), _level(2.0, ok, failing)]
    ones = [[1] * 4, [1] * 4]
    p90 = [Bound("tpot", 90.0, 50.0)]
    p50 = [Bound("tpot", 50.0, 50.0)]
    assert math.isinf(pooled_percentile(failing, [1] * 4, 0.9) or 0.0)
    assert math.isinf(side_capacity(levels, "baseline", p90, ones) or 0.0)
    assert side_capacity(levels, "candidate", p90, ones) == pytest.approx(math.sqrt(2))
    assert math.isinf(side_capacity(levels, "candidate", p50, ones) or 0.0)  # 80% ok


def test_affine_ladder_gives_the_known_capacities_with_intervals_around_them() -> None:
    levels = _affine_ladder([2.0, 4.0, 8.0, 16.0])
    bound = [Bound("tpot", 50.0, 20.0)]  # baseline: 10 + n = 20 -> 10; candidate 5 + 2n -> 7.5
    got = estimate_capacity(levels, bound, resamples=200)
    assert got is not None
    base, cand = got.load["baseline"], got.load["candidate"]
    assert base.point == pytest.approx(10.0) and cand.point == pytest.approx(7.5)
    assert base.status == cand.status == "within"
    for est, truth in ((base, 10.0), (cand, 7.5)):
        assert est.low is not None and est.high is not None
        assert est.low <= truth <= est.high and est.high - est.low < 1.0
    assert got.load_ratio.point == pytest.approx(0.75)
    # served requests/s interpolated at the capacity: 10/s per stream and 12/s per stream
    assert got.served["baseline"].point == pytest.approx(100.0)
    assert got.served["candidate"].point == pytest.approx(90.0)
    assert got.served_ratio.point == pytest.approx(0.9)


def test_several_bounds_take_the_lowest_capacity_and_open_ends_stay_open() -> None:
    levels = _affine_ladder([2.0, 4.0, 8.0])
    both = [Bound("tpot", 50.0, 20.0), Bound("e2e", 99.0, 15.0)]
    got = estimate_capacity(levels, both, resamples=100)
    # p99 of e2e is the top of the spread, 10 + n + 0.2 = 15 -> n = 4.8 (tpot alone: 10)
    assert got is not None and got.load["baseline"].point == pytest.approx(4.8)
    loose = estimate_capacity(levels, [Bound("tpot", 50.0, 1000.0)], resamples=100)
    assert loose is not None
    assert loose.load["baseline"].status == "above_top"
    assert loose.load_ratio.point is None  # inf / inf has no value
    tight = estimate_capacity(levels, [Bound("tpot", 50.0, 1.0)], resamples=100)
    assert tight is not None and tight.load["candidate"].status == "below_lowest"


def test_interval_widens_with_unit_to_unit_spread() -> None:
    """Units that disagree (a block at +-3 ms) give a wider interval than units that agree."""
    calm = _affine_ladder([2.0, 4.0, 8.0, 16.0])
    noisy = []
    for lv in calm:
        shift = [(-3.0 if i % 2 else 3.0) for i in range(lv.units)]
        base = [
            [v + s for v in g] for g, s in zip(lv.values["baseline"]["tpot"], shift, strict=True)
        ]
        noisy.append(_level(lv.load, base, base, baseline=1.0, candidate=1.0))
    bound = [Bound("tpot", 50.0, 20.0)]
    a = estimate_capacity(calm, bound, resamples=300)
    b = estimate_capacity(noisy, bound, resamples=300)
    assert a is not None and b is not None
    wa = (a.load["baseline"].high or 0) - (a.load["baseline"].low or 0)
    wb = (b.load["baseline"].high or 0) - (b.load["baseline"].low or 0)
    assert wb > 3 * wa


def test_few_units_stretch_the_interval_as_the_ratio_intervals_do() -> None:
    """The small-sample factor: Student's t on B - 1 df over z, times sqrt(B / (B - 1)),
    falling towards 1 with more units (it stretches the percentile interval used where
    resamples leave the ladder; inside it the same t and sqrt(B / (B - 1)) scale the
    resamples' spread)."""
    assert small_sample_factor(6) == pytest.approx(2.5706 / 1.95996 * math.sqrt(6 / 5), rel=1e-3)
    assert small_sample_factor(6) > small_sample_factor(18) > 1.0
    assert math.isinf(small_sample_factor(1))
    levels = _affine_ladder([2.0, 4.0, 8.0, 16.0], units=6)
    for lv in levels:  # every unit a little different, so the bootstrap has a spread
        for i, group in enumerate(lv.values["baseline"]["tpot"]):
            group[:] = [v + 0.3 * (i - 2.5) for v in group]  # type: ignore[index]
    got = estimate_capacity(levels, [Bound("tpot", 50.0, 20.0)], resamples=400)
    assert got is not None
    est = got.load["baseline"]
    assert est.low is not None and est.high is not None and est.point is not None
    assert est.low < est.point < est.high


def _lumpy_ladder() -> list[LevelSample]:
    """Concurrency 2, 4, 8 with TPOT 7, about 9 and 13 ms (bound 10 at p85 -> 5 streams):
    at 4 streams each of 8 units has ten requests at 9.0 ms and two at ``9.0 + 0.05 u``, so
    the level's p85 sits on a run of ties and a resample can only move it up."""
    flat = {2.0: 7.0, 8.0: 13.0}
    levels = []
    for load in (2.0, 4.0, 8.0):
        if load in flat:
            groups = [[flat[load]] * 12 for _ in range(8)]
        else:
            groups = [[9.0] * 10 + [9.0 + 0.05 * u] * 2 for u in range(8)]
        levels.append(_level(load, groups, groups))
    return levels


def _naive_draws(levels: list[LevelSample], bound: Bound, resamples: int) -> list[float]:
    """The resamples' capacities by the plain loop: each level's units drawn with
    replacement (the seeded order ``estimate_capacity`` uses), pooled, sorted, the
    percentile taken and crossed."""
    rng = random.Random(DEFAULT_SEED)
    out = []
    for _ in range(resamples):
        points = []
        for lv in levels:
            picks = rng.choices(range(lv.units), k=lv.units)
            pooled = sorted(v for k in picks for v in lv.values["baseline"]["tpot"][k])
            points.append(quantile_sorted(pooled, bound.percentile / 100))
        out.append(first_crossing([lv.load for lv in levels], points, bound.limit_ms))
    return out


def test_lumpy_percentile_gets_a_two_sided_interval_from_the_resamples_spread() -> None:
    """A level's percentile that takes few values (ties, few units) made the resamples'
    percentile interval one-sided: here their 97.5th percentile is the point itself, so
    the interval said the capacity could not be higher. The interval is now the ratio
    intervals' own: ``point * exp(±t * sd * sqrt(B / (B - 1)))`` over the resamples' log
    capacities, recomputed here by the plain resampling loop."""
    levels, bound = _lumpy_ladder(), Bound("tpot", 85.0, 10.0)
    got = estimate_capacity(levels, [bound], resamples=400)
    assert got is not None
    est = got.load["baseline"]
    assert est.point == pytest.approx(5.0)
    draws = sorted(_naive_draws(levels, bound, 400))
    assert draws[int(0.975 * 400) - 1] == pytest.approx(5.0)  # the old upper end: the point
    assert len(set(draws)) > 1 and max(draws) <= 5.0 + 1e-9  # resamples only move it down
    logs = [math.log(d) for d in draws]
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((y - mean) ** 2 for y in logs) / (len(logs) - 1))
    half = student_t_quantile(0.975, 7) * sd * math.sqrt(8 / 7)
    assert est.low == pytest.approx(5.0 * math.exp(-half), rel=1e-9)
    assert est.high == pytest.approx(5.0 * math.exp(half), rel=1e-9)
    assert est.high > 5.0 + 0.01  # two-sided


def test_resamples_that_leave_the_ladder_keep_the_open_end() -> None:
    """When some resamples cross beyond the top level the interval is their stretched
    percentile interval with an open upper end, not a spread of logs of infinity."""
    levels = _affine_ladder([2.0, 4.0, 8.0], units=6)
    top = levels[-1].values["baseline"]["tpot"]
    for i, group in enumerate(top):  # two of six units far faster at 8 streams: a resample
        # with three or more of them holds the bound there (p50 17.9 ms -> 7.08 streams)
        group[:] = [v - (9.0 if i < 2 else 0.0) for v in group]  # type: ignore[index]
    got = estimate_capacity(levels, [Bound("tpot", 50.0, 17.0)], resamples=300)
    assert got is not None
    est = got.load["baseline"]
    assert est.point == pytest.approx(4 + 3 / 3.9 * 4)
    assert est.high is not None and math.isinf(est.high)
    assert est.low is not None and 0.0 < est.low <= est.point


def test_unit_pools_give_the_sorted_pooled_percentile() -> None:
    """``UnitPools`` (a bisection over each level's merged values) gives the percentile of
    the pooled, sorted multiset for any weights, zero weights and failures included."""
    rng = random.Random(7)
    groups = [sorted(rng.uniform(5, 15) for _ in range(rng.randint(0, 9))) for _ in range(7)]
    groups[3] = [*groups[3], math.inf]
    for _ in range(200):
        weights = [rng.randint(0, 3) for _ in groups]
        pooled = sorted(
            v for g, w in zip(groups, weights, strict=True) for _ in range(w) for v in g
        )
        q = rng.choice([0.5, 0.85, 0.9, 0.99])
        want = quantile_sorted(pooled, q) if pooled else None
        assert pooled_percentile(groups, weights, q) == want
