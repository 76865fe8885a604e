"""The unit of replication: block pairs and segments, intervals from the spread between
them, the minimum for a verdict, heterogeneity and drift episodes."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from specproxy.core.compare.blocks import (
    MIN_UNITS,
    PairFacts,
    replicate_ratio,
    replication,
)
from specproxy.core.compare.pairing import Metric, find_pairs, paired_ratio
from specproxy.core.compare.units import UNIT_BLOCK, UNIT_SEGMENT, assign_units
from specproxy.core.compare.verdict import VerdictLabel, decide
from specproxy.core.records.model import RequestRecord, Role, SendMode
from specproxy.core.statistics.cluster import _Pooled, cluster_interval
from specproxy.core.statistics.stats import quantile_sorted
from specproxy.testing.fabricate import record
from tests.oracles.pairing import paired_ratios

B, C = Role.BASELINE, Role.CANDIDATE


def _alternate(
    ratios_by_block: list[list[float]], *, experiment: str = "exp000000001", start: float = 0.0
) -> list[RequestRecord]:
    """Alternate-mode records: block k's pairs have the given E2E ratios; each block's
    baseline window, then its candidate window, one second each, blocks in time order."""
    out: list[RequestRecord] = []
    for k, ratios in enumerate(ratios_by_block):
        t = start + 2.0 * k
        for i, ratio in enumerate(ratios):
            pid = f"p{k}-{i}"
            labels = {"block": str(k), "phase": "0"}
            base = record(B, pid, e2e_us=1_000_000, sent_at=t, experiment_id=experiment,
                          mode=SendMode.ALTERNATE)  # fmt: skip
            cand = record(C, pid, e2e_us=int(1e6 * ratio), tpot_us=int(1e4 * ratio),
                          sent_at=t + 1.0, experiment_id=experiment,
                          mode=SendMode.ALTERNATE)  # fmt: skip
            out += [
                dataclasses.replace(base, labels=labels),
                dataclasses.replace(cand, labels=labels),
            ]
    return out


def test_block_labels_make_block_pairs_in_time_order() -> None:
    """Pairs with a block label form one unit per (experiment, block), numbered by first send;
    two experiments' block 0 are two units."""
    units = assign_units(["e2", "e2", "e1", "e1"], [0, 0, 0, 1], [5.0, 5.1, 1.0, 3.0])
    assert units.kind == UNIT_BLOCK and units.count == 3
    assert units.of == (2, 2, 0, 1)


def test_unlabelled_pairs_form_segments_of_at_least_ten() -> None:
    """Without block labels, an experiment's pairs in send order form segments of at least 10
    pairs, at most 20 segments."""
    for n, expected in ((9, 1), (60, 6), (65, 6), (1000, 20)):
        sent = [float(n - i) for i in range(n)]  # sent in reverse order of the list
        units = assign_units(["e"] * n, [-1] * n, sent)
        assert units.kind == UNIT_SEGMENT and units.count == expected, n
        assert units.of[-1] == 0 and units.of[0] == expected - 1  # earliest first
        sizes = [units.of.count(u) for u in range(units.count)]
        assert min(sizes) >= min(10, n)


def test_pooled_quantile_equals_the_expanded_sample() -> None:
    """A quantile of units taken with multiplicities equals the ordinary quantile of the
    sample with each unit repeated that many times."""
    rng = random.Random(7)
    groups = [
        sorted(rng.lognormvariate(0, 0.4) for _ in range(rng.randint(1, 15))) for _ in range(9)
    ]
    pooled = _Pooled(groups)
    for weights in ([1] * 9, [0, 3, 1, 0, 0, 2, 1, 1, 1], [9, 0, 0, 0, 0, 0, 0, 0, 0]):
        values = sorted(
            v for g, w in zip(groups, weights, strict=True) for _ in range(w) for v in g
        )
        for q in (0.0, 0.1, 0.5, 0.77, 1.0):
            assert pooled.quantile(q, weights) == quantile_sorted(values, q)


def test_identical_requests_inside_blocks_do_not_narrow_the_interval() -> None:
    """Blocks whose 30 pairs all repeat one ratio (the block's own effect) give an interval
    from the spread between the 8 blocks, not a near-zero one from 240 'independent' pairs."""
    effects = [0.80, 0.95, 0.70, 1.05, 0.85, 0.75, 1.00, 0.90]
    pairs = find_pairs(_alternate([[e] * 30 for e in effects])).pairs
    ratio = paired_ratio(pairs, Metric.E2E)
    assert ratio.interval is not None and ratio.units == 8 and ratio.unit == UNIT_BLOCK
    assert ratio.interval.low < 0.80 and ratio.interval.high > 0.92
    assert decide(ratio, mode=SendMode.ALTERNATE).label is VerdictLabel.INCONCLUSIVE


def test_two_block_pairs_give_no_verdict_however_large_the_effect() -> None:
    """An alternate run of 2 block pairs of 50 pairs each, the candidate 3x slower in every
    pair, is inconclusive, and the reason says why (units, not pairs)."""
    pairs = find_pairs(_alternate([[3.0] * 50, [3.1] * 50])).pairs
    ratio = paired_ratio(pairs, Metric.E2E)
    assert ratio.units == 2 and ratio.n == 100
    verdict = decide(ratio, mode=SendMode.ALTERNATE)
    assert verdict.label is VerdictLabel.INCONCLUSIVE
    assert (
        f"at least {MIN_UNITS} block pairs" in verdict.reason and "2 block pairs" in verdict.reason
    )


def test_six_consistent_block_pairs_give_a_verdict() -> None:
    """Six block pairs that all say 2x slower, with ordinary spread, are called slower."""
    rng = random.Random(3)
    blocks = [[2.0 * math.exp(rng.gauss(0, 0.05)) for _ in range(20)] for _ in range(6)]
    ratio = paired_ratio(find_pairs(_alternate(blocks)).pairs, Metric.E2E)
    assert ratio.units == 6
    assert decide(ratio, mode=SendMode.ALTERNATE).label is VerdictLabel.SLOWER


def test_a_median_between_two_groups_of_blocks_widens_the_interval() -> None:
    """Eleven blocks at 0.96 and nine at 1.06: the pooled median sits in the first group, and
    the interval (which resamples whole blocks) reaches past 1, where a rerun could land."""
    blocks = [[0.96] * 20] * 11 + [[1.06] * 20] * 9
    got = replicate_ratio(
        [r for b in blocks for r in b],
        assign_units(["e"] * 400, [k for k, b in enumerate(blocks) for _ in b], [0.0] * 400),
    )
    assert got.interval is not None and got.interval.point == pytest.approx(0.96)
    assert got.interval.low < 0.96 and got.interval.high > 1.0


def test_ratio_of_medians_is_reported_beside_the_median_of_ratios() -> None:
    """The ratio of the sides' medians is each side's median over the pairs, with its own
    interval between the same units."""
    rng = random.Random(5)
    blocks = [[1.5 * math.exp(rng.gauss(0, 0.1)) for _ in range(12)] for _ in range(8)]
    records = _alternate(blocks)
    ratio = paired_ratio(find_pairs(records).pairs, Metric.E2E)
    cand = sorted(r.measurement.e2e_us or 0 for r in records if r.side is C)
    assert ratio.medians is not None and ratio.medians.units == 8
    assert ratio.medians.point == pytest.approx(
        quantile_sorted([float(v) for v in cand], 0.5) / 1e6
    )


def test_infinite_unit_figures_fall_back_to_order_statistics() -> None:
    """Units whose figure is a failure (inf) are ranked, never averaged: no NaN."""
    iv = cluster_interval([[math.inf] * 3, [math.inf] * 3, [1.0] * 3, [math.inf] * 3])
    assert iv is not None and iv.point == math.inf and iv.high == math.inf
    assert iv.low == 1.0 and not math.isnan(iv.low)


def _facts(
    base_tpot: list[float], cand_tpot: list[float]
) -> tuple[PairFacts, list[float], list[int]]:
    """One pair per unit (12 units, one second apart): E2E = 100 x TPOT on each side."""
    n = len(base_tpot)
    facts = PairFacts(
        base_sent=[2.0 * u for u in range(n)],
        cand_sent=[2.0 * u + 1 for u in range(n)],
        base_end=[2.0 * u + 0.9 for u in range(n)],
        cand_end=[2.0 * u + 1.9 for u in range(n)],
        base_e2e=[100 * t for t in base_tpot],
        cand_e2e=[100 * t for t in cand_tpot],
        base_level=base_tpot,
        cand_level=cand_tpot,
    )
    ratios = [c / b for b, c in zip(base_tpot, cand_tpot, strict=True)]
    return facts, ratios, list(range(n))


def test_a_candidate_slowdown_is_flagged_as_an_episode() -> None:
    """The candidate's level 1.8x in units 5-7 of 12 (others within 5%): one episode on the
    candidate, about 80% slower, units 6-8 in the report's numbering."""
    rng = random.Random(11)
    base = [1000.0 * math.exp(rng.gauss(0, 0.03)) for _ in range(12)]
    cand = [600.0 * math.exp(rng.gauss(0, 0.03)) * (1.8 if 5 <= u <= 7 else 1.0) for u in range(12)]
    facts, ratios, blocks = _facts(base, cand)
    units = assign_units(["e"] * 12, blocks, facts.base_sent)
    rep = replication(units, facts, ratios)
    assert len(rep.episodes) == 1
    episode = rep.episodes[0]
    assert episode.side is C and (episode.first, episode.last) == (5, 7)
    assert episode.change == pytest.approx(0.8, abs=0.1)
    assert (
        "the candidate slowed by" in episode.describe()
        and "block pairs 6–8 of 12" in episode.describe()
    )
    assert rep.flagged == frozenset({5, 6, 7})


def test_a_change_both_sides_share_is_not_drift() -> None:
    """Both sides 1.8x slower in the same units (the ratio unchanged): no episode."""
    rng = random.Random(12)
    slow = [1.8 if 5 <= u <= 7 else 1.0 for u in range(12)]
    base = [1000.0 * math.exp(rng.gauss(0, 0.03)) * s for s in slow]
    cand = [600.0 * math.exp(rng.gauss(0, 0.03)) * s for s in slow]
    facts, ratios, blocks = _facts(base, cand)
    rep = replication(assign_units(["e"] * 12, blocks, facts.base_sent), facts, ratios)
    assert rep.episodes == () and rep.flagged == frozenset()


def test_drift_widens_the_interval_and_can_withhold_the_verdict() -> None:
    """Through the report's path: a drifted block widens the E2E interval to hold the one
    without it, the reason names the episode; with too few clean blocks, no verdict."""
    rng = random.Random(4)
    blocks = [[0.6 * math.exp(rng.gauss(0, 0.02)) for _ in range(10)] for _ in range(8)]
    blocks[3] = [r * 1.9 for r in blocks[3]]
    records = _alternate(blocks)
    pairs = find_pairs(records).pairs
    e2e = paired_ratios(pairs)[0]
    assert e2e.widened == "drift" and e2e.clean_units == 7 and e2e.units == 8
    plain = paired_ratio(pairs, Metric.E2E)
    assert plain.interval is not None and e2e.interval is not None
    assert e2e.interval.low <= plain.interval.low and e2e.interval.high >= plain.interval.high
    verdict = decide(e2e, mode=SendMode.ALTERNATE, drift=["the candidate slowed by 90%"])
    assert verdict.label is VerdictLabel.FASTER and "drift: the candidate slowed" in verdict.reason
    few = paired_ratios(find_pairs(_alternate(blocks[:6])).pairs)[0]
    assert few.clean_units == 5
    assert decide(few, mode=SendMode.ALTERNATE).label is VerdictLabel.INCONCLUSIVE


def test_heterogeneity_separates_block_effects_from_request_noise() -> None:
    """Blocks that differ only by their requests' noise: a large p-value; blocks with their
    own effects far beyond it: a tiny one, and most of the spread is between blocks."""
    rng = random.Random(9)
    same = [[math.exp(rng.gauss(0, 0.1)) for _ in range(20)] for _ in range(10)]
    apart = [[e * math.exp(rng.gauss(0, 0.1)) for _ in range(20)] for e in (0.7, 1.3) * 5]
    for blocks, expect_small in ((same, False), (apart, True)):
        records = _alternate(blocks)
        pairs = find_pairs(records).pairs
        ratios = [p.failure_aware_ratio(Metric.E2E) for p in pairs]
        facts, _, _ = _facts([1.0] * len(pairs), [1.0] * len(pairs))
        units = assign_units([p.key[0] for p in pairs], [int(p.baseline.labels["block"]) for p in pairs],
                             [p.baseline.sent_at_unix_s for p in pairs])  # fmt: skip
        het = replication(units, facts, ratios).heterogeneity
        assert het is not None and het.df == 9
        assert (het.p_value < 1e-6) is expect_small and (het.p_value > 0.01) is not expect_small
        if expect_small:
            assert het.i2 > 0.9
