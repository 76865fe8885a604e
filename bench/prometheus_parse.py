"""specproxy's Prometheus text parser against prometheus_client's, on real SGLang scrapes.

Not a test: prints figures. Every ``*metrics*.http`` capture under ``tests/fixtures``
(SGLang 0.5.16's ``/metrics``, before and after runs) is parsed by both:
``core.protocol.prometheus.parse_exposition`` and ``prometheus_client.parser
.text_string_to_metric_families``. Correctness: both must yield the same samples (name,
labels, value; NaN equal to NaN) for every capture. Speed: CPU time
(``time.process_time``) per capture, the best of ``--rounds`` rounds of ``--repeat``
passes over all captures.

Usage: ``python bench/prometheus_parse.py [--repeat 20] [--rounds 10]`` from the
repository root.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from specproxy.core.protocol.prometheus import parse_exposition
from specproxy.testing.captures import parse_http

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
Key = tuple[str, tuple[tuple[str, str], ...], float | str]


def _value(v: float) -> float | str:
    return "NaN" if math.isnan(v) else v


def ours(text: str) -> list[Key]:
    return [(s.name, s.labels, _value(s.value)) for s in parse_exposition(text).samples]


def theirs(text: str) -> list[Key]:
    return [
        (s.name, tuple(sorted(s.labels.items())), _value(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def best_cpu_s(parse: Callable[[str], object], texts: list[str], repeat: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(repeat):
            for text in texts:
                parse(text)
        best = min(best, (time.process_time() - t0) / (repeat * len(texts)))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    paths = sorted(FIXTURES.rglob("*metrics*.http"))
    texts = [parse_http(p.read_bytes()).body.decode() for p in paths]
    differ = [p for p, t in zip(paths, texts, strict=True) if sorted(ours(t)) != sorted(theirs(t))]
    samples = sum(len(ours(t)) for t in texts)
    print(f"{len(texts)} captures, {samples} samples, {sum(map(len, texts)) // 1024} KiB")
    print(f"captures whose samples differ between the parsers: {len(differ)}")
    for path in differ:
        print(f"  {path.relative_to(FIXTURES)}")

    def bare(text: str) -> object:  # the parser alone, no conversion to our sample shape
        return [family.samples for family in text_string_to_metric_families(text)]

    for name, parse in (
        ("core.protocol.prometheus", parse_exposition),
        ("prometheus_client", bare),
    ):
        cpu = best_cpu_s(parse, texts, args.repeat, args.rounds)
        print(f"{name}: {cpu * 1e3:.2f} ms CPU per capture")


if __name__ == "__main__":
    main()
