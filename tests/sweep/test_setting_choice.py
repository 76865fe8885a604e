"""The choice at one level and the contrast of two values (``core.load.setting_choice``)."""

from __future__ import annotations

import math
import random

import pytest

from specproxy.core.load.setting_choice import (
    Contrast,
    Option,
    RatioEstimate,
    adaptive_text,
    apart_text,
    choose,
    contrast,
)
from specproxy.core.statistics.cluster import cluster_interval


def blocks(rng: random.Random, log_ratio: float, units: int, pairs: int) -> list[list[float]]:
    """Per-pair ratios in ``units`` block pairs: a block effect (sd 0.05) and pair noise
    (sd 0.12) around ``log_ratio``; the population's median per-pair ratio is its exp."""
    out = []
    for _ in range(units):
        shift = rng.gauss(0.0, 0.05)
        out.append(sorted(math.exp(log_ratio + shift + rng.gauss(0.0, 0.12)) for _ in range(pairs)))
    return out


def estimate(groups: list[list[float]]) -> RatioEstimate:
    """A value's figure at a level, as the report's cluster interval gives it."""
    iv = cluster_interval(groups, unit="block pair", resamples=120)
    assert iv is not None
    return RatioEstimate(iv.point, iv.low, iv.high, iv.units or 0)


def coverage(reps: int, units: tuple[int, int], truth: tuple[float, float], seed: int) -> float:
    rng = random.Random(seed)
    hits = 0
    for _ in range(reps):
        a = estimate(blocks(rng, math.log(truth[0]), units[0], 12))
        b = estimate(blocks(rng, math.log(truth[1]), units[1], 12))
        c = contrast(a, b)
        assert c is not None
        hits += c.low <= truth[0] / truth[1] <= c.high
    return hits / reps


@pytest.mark.parametrize(("units", "truth"), [((6, 6), (0.8, 0.8)), ((6, 12), (0.7, 0.9))])
def test_the_contrast_covers_the_true_ratio_of_two_values(
    units: tuple[int, int], truth: tuple[float, float]
) -> None:
    """Over 200 constructed pairs of values, the a/b interval holds a/b's truth 90-99.5%."""
    found = coverage(200, units, truth, seed=7)
    assert 0.90 <= found <= 0.995, found


def test_the_contrast_is_the_ratio_with_a_welch_interval() -> None:
    """Equal, symmetric intervals on 6 block pairs: the point is a/b, df 10, and the half
    width is t(10) x sqrt(2) x se, se read back from each interval."""
    t5, t10 = 2.570582, 2.228139
    a = RatioEstimate(0.6, 0.6 * math.exp(-0.1 * t5), 0.6 * math.exp(0.1 * t5), 6)
    b = RatioEstimate(0.8, 0.8 * math.exp(-0.1 * t5), 0.8 * math.exp(0.1 * t5), 6)
    c = contrast(a, b)
    assert c is not None
    assert c.point == pytest.approx(0.75)
    assert c.df == pytest.approx(10.0)
    assert math.log(c.high / c.point) == pytest.approx(t10 * math.sqrt(2) * 0.1, rel=1e-4)


def test_an_open_interval_gives_no_contrast() -> None:
    """A value on one block pair, or with an infinite bound, cannot be contrasted."""
    good = RatioEstimate(0.8, 0.7, 0.9, 6)
    assert contrast(good, RatioEstimate(0.8, 0.0, math.inf, 1)) is None
    assert contrast(RatioEstimate(0.8, 0.7, math.inf, 6), good) is None


def _opt(label: str, verdict: str, point: float, half: float = 0.02, **kw: bool) -> Option:
    return Option(label, verdict, RatioEstimate(point, point - half, point + half, 8), **kw)


def test_the_best_is_the_smallest_faster_value_and_off_when_none_is() -> None:
    """Only a value whose verdict is faster can be chosen; the smallest ratio among those."""
    options = [_opt("k=1", "faster", 0.80), _opt("k=3", "faster", 0.60),
               _opt("k=5", "inconclusive", 0.55, half=0.5)]  # fmt: skip
    found = choose(4, options)
    assert found.chosen == "k=3"
    assert found.runner_up is not None
    assert found.runner_up.label == "k=5"  # the next ratio, eligible or not
    off = choose(64, [_opt("k=1", "inconclusive", 0.99), _opt("k=3", "slower", 1.2)])
    assert off.chosen == "off"
    assert off.best is None
    assert off.nearest is not None
    assert off.nearest.label == "k=1"
    assert off.vs_runner_up is None


def test_told_apart_or_not() -> None:
    """Well-separated values are told apart; two within each other's noise are not."""
    apart = choose(1, [_opt("a", "faster", 0.6), _opt("b", "faster", 0.8)])
    assert apart.vs_runner_up is not None
    assert apart.vs_runner_up.label() == "faster"
    assert apart_text(apart.vs_runner_up) == "the best is faster"
    close = choose(1, [_opt("a", "faster", 0.79, half=0.05), _opt("b", "faster", 0.80, half=0.05)])
    assert apart_text(close.vs_runner_up) == "cannot be told apart"


def test_adaptive_is_compared_with_the_best_and_never_chosen() -> None:
    """The adaptive value is left out of the ranking and contrasted with the best fixed one."""
    options = [_opt("k=1", "faster", 0.80), _opt("k=3", "faster", 0.60),
               _opt("adaptive", "faster", 0.50, adaptive=True)]  # fmt: skip
    found = choose(1, options)
    assert found.chosen == "k=3"
    assert found.adaptive is not None
    assert found.adaptive_vs_best is not None
    assert found.adaptive_vs_best.point == pytest.approx(0.5 / 0.6)
    assert adaptive_text(found.adaptive_vs_best) == "adaptive is faster"
    same = choose(1, [_opt("k=3", "faster", 0.60, half=0.004),
                      _opt("adaptive", "faster", 0.60, half=0.004, adaptive=True)])  # fmt: skip
    assert adaptive_text(same.adaptive_vs_best) == "matches (within the margin)"


def test_contrast_labels_follow_the_margin() -> None:
    assert Contrast(0.9, 0.85, 0.95, 10).label() == "faster"
    assert Contrast(1.1, 1.05, 1.15, 10).label() == "slower"
    assert Contrast(1.0, 0.99, 1.01, 10).label() == "no_difference"
    assert Contrast(1.0, 0.9, 1.1, 10).label() == "inconclusive"
