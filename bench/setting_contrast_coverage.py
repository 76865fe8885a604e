"""Coverage of the contrast between two setting values (best / runner-up, adaptive / best).

Each value's figure at a level is the report's: the pooled median per-pair ratio of its
block pairs and its cluster interval (``core.statistics.cluster.cluster_interval``). Per-pair log ratios
are ``log r + block effect (sd s_b) + pair noise (sd s_e)``, so the population's median
per-pair ratio is ``r``; the two values run on their own block pairs, as a setting sweep's
values do. ``core.load.setting_choice.contrast`` combines the two intervals (Welch); the table
counts how often its 95% interval holds ``r_a / r_b``. Run from the repository root:

    .venv/bin/python bench/setting_contrast_coverage.py [--reps 1000] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import random

from specproxy.core.load.setting_choice import RatioEstimate, contrast
from specproxy.core.statistics.cluster import cluster_interval

ROWS = (  # (units a, units b, r_a, r_b, block sd, pair sd, pairs per block)
    (6, 6, 0.8, 0.8, 0.05, 0.12, 12),
    (6, 12, 0.7, 0.9, 0.05, 0.12, 12),
    (6, 6, 0.6, 0.75, 0.10, 0.30, 16),
    (8, 8, 0.9, 1.0, 0.02, 0.20, 32),
)


def _estimate(
    rng: random.Random, r: float, units: int, sb: float, se: float, m: int
) -> RatioEstimate:
    groups = []
    for _ in range(units):
        shift = rng.gauss(0.0, sb)
        groups.append(sorted(math.exp(math.log(r) + shift + rng.gauss(0.0, se)) for _ in range(m)))
    iv = cluster_interval(groups, unit="block pair")
    assert iv is not None
    return RatioEstimate(iv.point, iv.low, iv.high, iv.units or 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    print("units a/b  r_a/r_b    block sd  pair sd  pairs  coverage  median width (log)")
    for ua, ub, ra, rb, sb, se, m in ROWS:
        hits, widths = 0, []
        for _ in range(args.reps):
            c = contrast(_estimate(rng, ra, ua, sb, se, m), _estimate(rng, rb, ub, sb, se, m))
            assert c is not None
            hits += c.low <= ra / rb <= c.high
            widths.append(math.log(c.high / c.low))
        widths.sort()
        print(f"{ua:>4}/{ub:<4}  {ra:.2f}/{rb:.2f}  {sb:8.2f}  {se:7.2f}  {m:5d}"
              f"  {hits / args.reps:8.3f}  {widths[len(widths) // 2]:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
