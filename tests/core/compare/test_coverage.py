"""The statistics are honest: intervals cover the true ratio about 95% of the time, and A/A
runs are rarely called faster or slower (a fast version of bench/stats_coverage.py)."""

from __future__ import annotations

import math
import random
from statistics import NormalDist

from specproxy.core.compare.pairing import Metric, find_pairs, paired_ratio
from specproxy.core.compare.verdict import VerdictLabel, decide
from specproxy.core.records.model import SendMode
from specproxy.core.statistics.stats import bootstrap_quantile_ratio
from specproxy.testing.fabricate import make_records

EXPERIMENTS = 300
PAIRS = 100
RESAMPLES = 1000


def _interval(true_ratio: float, seed: int) -> tuple[bool, VerdictLabel]:
    recs = make_records(n_pairs=PAIRS, true_ratio=true_ratio, sigma=0.3, seed=seed, lean=True)
    ratio = paired_ratio(find_pairs(recs).pairs, Metric.E2E)
    assert ratio.interval is not None
    return ratio.interval.contains(true_ratio), decide(ratio, mode=SendMode.ALTERNATE).label


def test_paired_interval_covers_the_true_ratio_about_95_percent() -> None:
    """Over 300 experiments of 100 pairs (10 segments of 10) with a true median ratio of 0.85, the 95% interval
    covers 0.85 in 90-98.5% of them (binomial noise of 300 trials included)."""
    results = [_interval(0.85, seed) for seed in range(EXPERIMENTS)]
    coverage = sum(covered for covered, _ in results) / EXPERIMENTS
    assert 0.90 <= coverage <= 0.985, coverage
    faster = sum(label is VerdictLabel.FASTER for _, label in results) / EXPERIMENTS
    assert faster > 0.6, faster  # a 15% effect is found in most experiments at this size


def test_aa_runs_are_rarely_called_faster_or_slower() -> None:
    """Over 300 A/A experiments (true ratio 1) at most 5% are called faster or slower."""
    labels = [_interval(1.0, 10_000 + seed)[1] for seed in range(EXPERIMENTS)]
    false = sum(label in (VerdictLabel.FASTER, VerdictLabel.SLOWER) for label in labels)
    assert false / EXPERIMENTS <= 0.05, false


def test_unpaired_quantile_intervals_cover_the_true_ratio() -> None:
    """Split-mode p50 and p90 ratio intervals of independent lognormal sides cover the true
    ratios (from the lognormal quantile formula) in 90-99.5% of 200 experiments (the ratio of
    two independent bootstrap quantiles is slightly conservative, about 97% at p90)."""
    base_sigma, cand_sigma, shift = 0.5, 0.6, math.log(0.8)
    hits = {0.5: 0, 0.9: 0}
    for seed in range(200):
        rng = random.Random(seed)
        base = [rng.lognormvariate(0.0, base_sigma) for _ in range(150)]
        cand = [rng.lognormvariate(shift, cand_sigma) for _ in range(150)]
        for q in hits:
            z = NormalDist().inv_cdf(q)
            truth = math.exp(shift + z * cand_sigma) / math.exp(z * base_sigma)
            iv = bootstrap_quantile_ratio(cand, base, q, resamples=RESAMPLES)
            hits[q] += iv.contains(truth)
    for q, hit in hits.items():
        assert 0.90 <= hit / 200 <= 0.995, (q, hit)
