"""Coverage of specproxy's intervals and false-verdict rate of A/A runs, measured.

Fabricates many experiments whose true effect is known and counts how often the 95%
interval covers it, and how often an A/A experiment (true ratio 1) is called faster or
slower. Run from the repository root:

    .venv/bin/python bench/stats_coverage.py [--experiments 1000] [--seed 1]
        [--failure-experiments 100] [--tables paired,unpaired,failures]

Paired: per-pair E2E ratio = true ratio x noise of median 1 (lognormal, or lognormal
with 5% of pairs hit by a 3x outlier on either side), independent pairs sent one after
another as a mirror run's are, so the report's interval rests on segments of consecutive
pairs (``core.compare.blocks``: at least 10 pairs each, at most 20), and the verdict rule
with its default margin (2%), minimum pairs (30) and minimum units (6). One more paired row
measures the seeded percentile bootstrap of the per-pair ratios that an earlier interval
replaced (``core.statistics.stats.bootstrap_quantile``), whose coverage the README quotes. Unpaired (split): independent lognormal sides of different spread, the
seeded bootstrap p50/p90/p99 ratio intervals (default seed, as a report uses) against the
ratios the lognormal quantile formula gives; rows where n x (1 - q) < 10 are ones the
report shows without an interval.

Failures (mirror pairs, records fabricated and run through pairing, the failure-aware
median ratio, the failure-rate comparison and ``decide``): request size ``z ~ N(0, 1)``
(baseline E2E 1 s x e^(0.5 z)); the candidate is ``r x e^(0.05 z + 0.2 e)`` times the
baseline when both complete (faster on short requests, slower on long ones); it fails
with probability ``2 f Phi(z)``, so its failure rate is ``f`` and its failures fall on
slow requests; the baseline fails 1% of requests at random (or, in the last rows, like
the candidate: rate ``f`` on slow requests, independently). The true failure-aware
median (candidate-only failure = +inf, baseline-only = 0, both = not ranked) is measured
on 400,000 simulated pairs and ``r`` is set so that it is the row's target. "old rule"
is the verdict the completed pairs alone gave (failures dropped, no failure check).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from statistics import NormalDist

from specproxy.core.compare.failures import compare_failures
from specproxy.core.compare.pairing import (
    Metric,
    PairedRatio,
    find_pairs,
    paired_ratio,
    summarise_ratios,
)
from specproxy.core.compare.units import assign_units
from specproxy.core.compare.verdict import VerdictLabel, decide
from specproxy.core.records.model import ErrorKind, RequestRecord, Role, SendMode
from specproxy.core.statistics.stats import (
    bootstrap_quantile,
    bootstrap_quantile_ratio,
    quantile,
    quantile_interval,
)
from specproxy.testing.fabricate import make_records, record

BASE_FAIL = 0.01
SIZE_EFFECT = 0.05
RATIO_SIGMA = 0.2


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
    ``bootstrap`` swaps the report's interval for the replaced seeded per-pair bootstrap
    (which rests on the pairs, not on units: its verdict ignores the minimum of units)."""
    covered = faster = slower = 0
    for i in range(experiments):
        s = seed * 1_000_003 + n * 10_007 + round(true_ratio * 1000) * 100_003 + i
        if outliers:  # ratios only: segments of consecutive pairs, as a mirror run's
            rng = random.Random(s)
            drawn: list[float | None] = [true_ratio * _noise(rng, sigma, True) for _ in range(n)]
            units = assign_units(["e"] * n, [-1] * n, [float(j) for j in range(n)])
            ratio = summarise_ratios(Metric.E2E, drawn, (drawn, drawn), units)
        else:
            recs = make_records(n_pairs=n, true_ratio=true_ratio, sigma=sigma, seed=s, lean=True)
            pairs = find_pairs(recs).pairs
            ratio = paired_ratio(pairs, Metric.E2E)
            if bootstrap:
                ratios = [r for p in pairs if (r := p.ratio(Metric.E2E)) is not None]
                iv = bootstrap_quantile(ratios)
                ratio = PairedRatio(Metric.E2E, iv, len(ratios), None, units=n, clean_units=n)
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


def _failure_pair(
    rng: random.Random, r: float, f: float, both: bool
) -> tuple[bool, bool, float, float]:
    """(baseline failed, candidate failed, baseline E2E us, candidate E2E us) of one pair;
    ``both``: the baseline fails like the candidate (on slow requests, rate f)."""
    z = rng.gauss(0.0, 1.0)
    base = 1e6 * math.exp(0.5 * z)
    cand = base * r * math.exp(SIZE_EFFECT * z + RATIO_SIGMA * rng.gauss(0.0, 1.0))
    slow = 2.0 * f * _PHI(z)
    base_failed = rng.random() < (slow if both else BASE_FAIL)
    return base_failed, rng.random() < slow, base, cand


_PHI = NormalDist().cdf


def true_failure_aware_median(f: float, both: bool, seed: int, draws: int = 400_000) -> float:
    """The population failure-aware median at r = 1 (it scales with r), by simulation."""
    rng = random.Random(seed)
    values: list[float] = []
    for _ in range(draws):
        b_fail, c_fail, base, cand = _failure_pair(rng, 1.0, f, both)
        if b_fail != c_fail:
            values.append(math.inf if c_fail else 0.0)
        elif not b_fail:
            values.append(cand / base)
    return quantile(values, 0.5)


def _failure_records(n: int, r: float, f: float, both: bool, seed: int) -> list[RequestRecord]:
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    for i in range(n):
        b_fail, c_fail, base, cand = _failure_pair(rng, r, f, both)
        pid = f"p{i}"
        out.append(record(Role.BASELINE, pid, e2e_us=int(base), error=_err(b_fail)))
        out.append(record(Role.CANDIDATE, pid, e2e_us=max(1, int(cand)), error=_err(c_fail)))
    return out


def _err(failed: bool) -> ErrorKind | None:
    return ErrorKind.TIMEOUT if failed else None


def failure_row(
    n: int, f: float, both: bool, target: float, m1: float, experiments: int, seed: int
) -> str:
    """Verdict shares over ``experiments`` mirror runs with true failure-aware median ``target``."""
    r = target / m1
    faster = old_faster = blocked = 0
    for i in range(experiments):
        pairing = find_pairs(_failure_records(n, r, f, both, seed * 9_000_011 + n * 131 + i))
        failures = compare_failures(pairing.counts)
        v = decide(paired_ratio(pairing.pairs, Metric.E2E), mode=SendMode.MIRROR, failures=failures)
        faster += v.label is VerdictLabel.FASTER
        blocked += failures.candidate_fails_more
        done = [x for p in pairing.pairs if (x := p.ratio(Metric.E2E)) is not None]
        old = PairedRatio(Metric.E2E, quantile_interval(done), len(done), None)
        old_faster += decide(old, mode=SendMode.MIRROR).label is VerdictLabel.FASTER
    k = experiments
    base = f"{f:.0%} slow" if both else f"{BASE_FAIL:.0%} random"
    return (
        f"| {n:>5} | {f:4.0%} | {base:<9} | {target:.2f} | {r:.3f} | {faster / k:6.1%} "
        f"| {old_faster / k:6.1%} | {blocked / k:6.1%} |"
    )


def failure_table(experiments: int, seed: int) -> None:
    print(
        f"\nFailures: {experiments} mirror experiments per row; the candidate fails f of its "
        "requests, on slow ones; the baseline as its column says"
    )
    print("| pairs | cand f | baseline fails | true | r | faster | old rule faster | fails more |")
    print("|------:|-------:|----------------|-----:|--:|-------:|----------------:|-----------:|")
    settings = [(f, False) for f in (0.0, 0.05, 0.10, 0.20)] + [(0.05, True), (0.20, True)]
    for f, both in settings:
        m1 = true_failure_aware_median(f, both, seed)
        for n in (100, 1000):
            for target in (1.0, 0.9):
                print(failure_row(n, f, both, target, m1, experiments, seed), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=1000)
    parser.add_argument("--failure-experiments", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tables", default="paired,unpaired,failures")
    args = parser.parse_args()
    k, seed = args.experiments, args.seed
    tables = set(args.tables.split(","))
    start = time.perf_counter()
    if "paired" in tables:
        paired_table(k, seed)
    if "unpaired" in tables:
        unpaired_table(k, seed)
    if "failures" in tables:
        failure_table(args.failure_experiments, seed)
    print(f"\nelapsed {time.perf_counter() - start:.0f} s")


def paired_table(k: int, seed: int) -> None:
    print(f"{k} experiments per row; verdict margin 2%, min 30 pairs\n")
    print("| pairs | true  | per-pair noise                 | covered | faster | slower |")
    print("|------:|------:|--------------------------------|--------:|-------:|-------:|")
    for n in (30, 50, 200, 1000):
        for truth in (1.0, 0.9):
            print(paired_row(n, truth, 0.3, False, k, seed))
    for n in (50, 200):
        print(paired_row(n, 1.0, 0.3, True, k, seed))
    print(paired_row(30, 1.0, 0.3, False, k, seed, bootstrap=True))


def unpaired_table(k: int, seed: int) -> None:
    print(f"\nunpaired: {max(k // 2, 1)} experiments per row, 2000 resamples")
    print("| unpaired           | q    | true ratio | covered |")
    print("|--------------------|------|-----------:|--------:|")
    for n in (100, 1000):
        for q in (0.5, 0.9, 0.99):
            print(unpaired_row(n, q, max(k // 2, 1), seed))


if __name__ == "__main__":
    main()
