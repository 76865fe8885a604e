"""Coverage of specproxy's intervals and false-verdict rate of A/A runs, measured.

Fabricates many experiments whose true effect is known and counts how often the 95%
interval covers it, and how often an A/A experiment (true ratio 1) is called faster or
slower. Run from the repository root:

    .venv/bin/python bench/stats_coverage.py [--experiments 1000] [--seed 1]

Paired: per-pair E2E ratio = true ratio x noise of median 1 (lognormal, or lognormal
with 5% of pairs hit by a 3x outlier on either side), the median-ratio interval
(order statistics, exact) and the verdict rule with its default margin (2%) and minimum
pairs (30). One more paired row measures the seeded percentile bootstrap of the per-pair
ratios that the order-statistic interval replaced (``core.stats.bootstrap_quantile``, the
default seed shared by every report), whose coverage the README and
``core.stats.quantile_interval`` quote. Unpaired (split): independent lognormal sides of different spread, the
seeded bootstrap p50/p90/p99 ratio intervals (default seed, as a report uses) against the
ratios the lognormal quantile formula gives; rows where n x (1 - q) < 10 are ones the
report shows without an interval.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path
from statistics import NormalDist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specproxy.core.compare import Metric, PairedRatio, find_pairs, paired_ratio
from specproxy.core.compare_verdict import VerdictLabel, decide
from specproxy.core.model import SendMode
from specproxy.core.stats import bootstrap_quantile, bootstrap_quantile_ratio, quantile_interval
from tests.report.fabricate import make_records


def _noise(rng: random.Random, sigma: float, outliers: bool) -> float:
    value = math.exp(rng.gauss(0.0, sigma))
    if outliers and rng.random() < 0.05:
        value *= 3.0 if rng.random() < 0.5 else 1 / 3.0
    return value


def paired_row(
    n: int,
    true_ratio: float,
    sigma: float,
    outliers: bool,
    experiments: int,
    seed: int,
    *,
    bootstrap: bool = False,
) -> str:
    """Coverage and verdict shares for one setting, via fabricated records when no outliers;
    ``bootstrap`` swaps the order-statistic interval for the replaced seeded bootstrap."""
    covered = faster = slower = 0
    for i in range(experiments):
        s = seed * 1_000_003 + n * 10_007 + round(true_ratio * 1000) * 100_003 + i
        if outliers:
            rng = random.Random(s)
            ratios = [true_ratio * _noise(rng, sigma, True) for _ in range(n)]
            iv = quantile_interval(ratios)
            ratio = PairedRatio(Metric.E2E, iv, n, None)
        else:
            recs = make_records(n_pairs=n, true_ratio=true_ratio, sigma=sigma, seed=s, lean=True)
            pairs = find_pairs(recs).pairs
            ratio = paired_ratio(pairs, Metric.E2E)
            if bootstrap:
                ratios = [r for p in pairs if (r := p.ratio(Metric.E2E)) is not None]
                ratio = PairedRatio(Metric.E2E, bootstrap_quantile(ratios), len(ratios), None)
        assert ratio.interval is not None
        covered += ratio.interval.contains(true_ratio)
        label = decide(ratio, mode=SendMode.ALTERNATE).label
        faster += label is VerdictLabel.FASTER
        slower += label is VerdictLabel.SLOWER
    noise = f"lognormal s={sigma}" + (" +5% 3x outliers" if outliers else "")
    noise += ", seeded bootstrap" if bootstrap else ""
    return (
        f"| {n:>5} | {true_ratio:.2f} | {noise:<30} | {covered / experiments:6.1%} "
        f"| {faster / experiments:6.1%} | {slower / experiments:6.1%} |"
    )


def unpaired_row(n: int, q: float, experiments: int, seed: int) -> str:
    base_sigma, cand_sigma, shift = 0.5, 0.6, math.log(0.8)
    z = NormalDist().inv_cdf(q)
    truth = math.exp(shift + z * cand_sigma - z * base_sigma)
    covered = 0
    for i in range(experiments):
        rng = random.Random(seed * 7_000_003 + i)
        base = [rng.lognormvariate(0.0, base_sigma) for _ in range(n)]
        cand = [rng.lognormvariate(shift, cand_sigma) for _ in range(n)]
        covered += bootstrap_quantile_ratio(cand, base, q).contains(truth)
    return f"| {n:>5} per side | p{q * 100:g} | {truth:.3f} | {covered / experiments:6.1%} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    k, seed = args.experiments, args.seed
    start = time.perf_counter()
    print(f"{k} experiments per row; unpaired: 2000 resamples; verdict margin 2%, min 30 pairs\n")
    print("| pairs | true  | per-pair noise                 | covered | faster | slower |")
    print("|------:|------:|--------------------------------|--------:|-------:|-------:|")
    for n in (30, 50, 200, 1000):
        for truth in (1.0, 0.9):
            print(paired_row(n, truth, 0.3, False, k, seed))
    for n in (50, 200):
        print(paired_row(n, 1.0, 0.3, True, k, seed))
    print(paired_row(30, 1.0, 0.3, False, k, seed, bootstrap=True))
    print("\n| unpaired           | q    | true ratio | covered |")
    print("|--------------------|------|-----------:|--------:|")
    for n in (100, 1000):
        for q in (0.5, 0.9, 0.99):
            print(unpaired_row(n, q, max(k // 2, 1), seed))
    print(f"\nelapsed {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
