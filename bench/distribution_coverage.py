"""How often the output-distribution check calls a lossless candidate shifted, and how often
it finds the simulator's lossy mode, over seeded experiments. Run from the repository root:

    .venv/bin/python bench/distribution_coverage.py [--experiments 200] [--prompts 200]
        [--temperature 0.7] [--relax 0.05,0.03] [--seed 1] [--json bench/out/dist.json]

Pure in-process simulation of what a scored replay produces; the HTTP path (the simulator's
sampling and scoring routes, ``replay --score-requests``, the report) is covered by
``tests/replay/test_distribution_check.py`` over loopback. Each experiment: ``--prompts``
prompts, each with a previous token drawn from the simulator's vocabulary and an output
length uniform in [64, 192]; each side *independently* samples its output from
``sim.target``'s model at ``--temperature`` (as two real servers sampling without a shared
seed do; the simulator's HTTP server seeds its draws by prompt), the candidate with the lossy
mode's relaxation (0 for a lossless candidate); every output is scored with the model's raw
log-probabilities, and the pairs, sent one after another as in a mirror run (segments of
consecutive pairs: ``core.compare.blocks``), go through ``core.compare.distribution.check``
with its default margins. The "with A/A" rows give each check an A/A run of its own (two
lossless sides, fresh samples), which widens the margins as the report does.

Effect sizes are ``sim.target.expected_shift`` (the lossy mode's exact shift of the mean raw
log-probability per token, averaged over the vocabulary), printed beside each row.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specproxy.core.compare.distribution import (
    DistributionCheck,
    DistributionLabel,
    ScoredPair,
    check,
)
from specproxy.core.compare.units import assign_units
from specproxy.sim.target import TARGET_IDS, expected_shift, sample_tokens, token_logprob


def _score(prev: int, tokens: list[int]) -> float:
    total = 0.0
    for token in tokens:
        lp = token_logprob(prev, token)
        assert lp is not None  # every sampled token is in the vocabulary
        total += lp
        prev = token
    return total / len(tokens)


def _experiment(
    rng: random.Random, prompts: int, temperature: float, relax: float
) -> list[ScoredPair]:
    """One run's scored pairs; units are segments of consecutive pairs (a mirror run's)."""
    rows: list[tuple[float, float, int]] = []
    for _ in range(prompts):
        prev = rng.choice(TARGET_IDS)
        length = rng.randint(64, 192)
        base = sample_tokens(prev, length, temperature, 0.0, rng)
        cand = sample_tokens(prev, length, temperature, relax, rng)
        rows.append((_score(prev, base), _score(prev, cand), length))
    units = assign_units(["e"] * prompts, [-1] * prompts, [float(i) for i in range(prompts)])
    return [ScoredPair(u, b, c, n, n) for (b, c, n), u in zip(rows, units.of, strict=True)]


def _row(
    name: str, relax: float, args: argparse.Namespace, *, with_aa: bool, seed: int
) -> dict[str, object]:
    counts = dict.fromkeys(DistributionLabel, 0)
    widths: list[float] = []
    points: list[float] = []
    for i in range(args.experiments):
        rng = random.Random(f"{seed}-{name}-{i}")
        aa: DistributionCheck | None = None
        if with_aa:
            aa = check(_experiment(rng, args.prompts, args.temperature, 0.0))
        found = check(_experiment(rng, args.prompts, args.temperature, relax), aa=aa)
        counts[found.label] += 1
        if found.logprob is not None:
            widths.append(found.logprob.high - found.logprob.low)
            points.append(found.logprob.point)
    n = args.experiments
    return {
        "row": name,
        "relax": relax,
        "with_aa": with_aa,
        "expected_shift": expected_shift(args.temperature, relax),
        "mean_measured_shift": sum(points) / len(points) if points else None,
        "mean_interval_width": sum(widths) / len(widths) if widths else None,
        "experiments": n,
        **{label.value: counts[label] for label in DistributionLabel},
        "shifted_rate": counts[DistributionLabel.SHIFTED] / n,
        "same_rate": counts[DistributionLabel.SAME] / n,
    }


def _table(rows: list[dict[str, object]]) -> str:
    head = (
        "| candidate | A/A floor | true shift (nats/token) | mean measured | mean 95% width "
        "| called shifted | same distribution | not settled |\n|---|---|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for r in rows:
        n = int(str(r["experiments"]))
        lines.append(
            f"| {r['row']} | {'yes' if r['with_aa'] else 'no'} | {float(str(r['expected_shift'])):+.3f} "
            f"| {float(str(r['mean_measured_shift'])):+.3f} | {float(str(r['mean_interval_width'])):.3f} "
            f"| {r['shifted']} of {n} ({float(str(r['shifted_rate'])):.1%}) "
            f"| {r['same_distribution']} ({float(str(r['same_rate'])):.1%}) | {r['not_settled']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--relax", default="0.05,0.03", help="lossy relaxations, comma-separated")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    started = time.monotonic()
    relaxes = [float(x) for x in args.relax.split(",") if x]
    plan = [("lossless", 0.0, False), ("lossless", 0.0, True)]
    plan += [(f"lossy relax {r:g}", r, False) for r in relaxes]
    plan += [(f"lossy relax {r:g}", r, True) for r in relaxes[:1]]
    rows = []
    for name, relax, with_aa in plan:
        rows.append(_row(name, relax, args, with_aa=with_aa, seed=args.seed))
        print(f"# {name} (A/A {with_aa}) done at {time.monotonic() - started:.0f} s", flush=True)
    print(
        f"distribution coverage: {args.experiments} experiments per row, {args.prompts} prompts, "
        f"T = {args.temperature}, seed {args.seed}, {time.monotonic() - started:.0f} s"
    )
    print(_table(rows))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"args": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=2)
        )


if __name__ == "__main__":
    main()
