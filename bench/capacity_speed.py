"""How long the capacity estimate (``core.load.capacity.estimate_capacity``) takes on a ladder.

Not a test: prints figures. Builds a seeded ladder of ``--levels`` concurrency levels
(1, 2, 4, ...), each with ``--units`` block pairs of ``--requests`` requests a side, TPOT
rising with load, and times the estimate with its 1000 resamples under one p90 bound
crossed inside the ladder. Each resample's percentile is a bisection over the level's
merged values (``UnitPools``), not a merge and a sort per resample. On the shared 2-core
development machine: 0.33 s at the defaults (9.42 s when each resample merged and sorted
the pooled values), 0.14 s at ``--units 20 --requests 50`` (0.96 s), the same estimates.
Usage (repository root): ``nice python bench/capacity_speed.py [--levels 7] [--units 40]
[--requests 200]``.
"""

from __future__ import annotations

import argparse
import random
import time

from specproxy.core.load.capacity import METRICS, SIDES, Bound, LevelSample, estimate_capacity


def ladder(levels: int, units: int, requests: int, seed: int) -> list[LevelSample]:
    rng = random.Random(seed)
    out = []
    for i in range(levels):
        load = 2.0**i
        groups = [[10 + load + rng.gauss(0, 1) for _ in range(requests)] for _ in range(units)]
        values = {side: dict.fromkeys(METRICS, groups) for side in SIDES}
        out.append(LevelSample(load, units, values, dict.fromkeys(SIDES, load)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", type=int, default=7)
    parser.add_argument("--units", type=int, default=40)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    levels = ladder(args.levels, args.units, args.requests, args.seed)
    bound = Bound("tpot", 90.0, 10 + 1.5 * 2.0 ** (args.levels - 2))
    started = time.perf_counter()
    got = estimate_capacity(levels, [bound])
    elapsed = time.perf_counter() - started
    est = None if got is None else got.load["baseline"]
    print(f"{args.levels} levels x {args.units} block pairs x {args.requests} requests a side,"
          f" {bound.text()}: baseline capacity {est}; {elapsed:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
