"""Output agreement across pairs, and recognising an A/A run (the noise floor).

Pure. Under greedy decoding speculative decoding is lossless, so both sides should
return the same text; batch-level nondeterminism on a real GPU can still make them
differ, which is why an A/A run (both sides the baseline) measures how often outputs
disagree and how far apart ratios fall when nothing differs. Agreement is the exact
match of ``output_sha256``; where both texts were recorded (operator opt-in), the first
divergence is the 0-based character index where they first differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specproxy.core.statistics.stats import Interval, quantile_sorted, wilson_interval


@dataclass(frozen=True, slots=True)
class OutputAgreement:
    """Exact-match rate of outputs over completed pairs whose two records both carry a hash.

    ``greedy`` is True/False from the recorded sampling conditions, None when unknown.
    ``first_divergence`` is (min, median, max) character index over mismatched pairs
    with both texts recorded.
    """

    compared: int
    matched: int
    rate: Interval | None
    greedy: bool | None
    mismatched_with_text: int
    first_divergence: tuple[float, float, float] | None

    def __post_init__(self) -> None:
        if not 0 <= self.matched <= self.compared:
            raise ValueError("need 0 <= matched <= compared")

    @property
    def mismatched(self) -> int:
        return self.compared - self.matched


def first_divergence(a: str, b: str) -> int:
    """Index of the first differing character (the shorter length when one is a prefix)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def is_greedy(sampling: Mapping[str, Any] | None) -> bool | None:
    """True when the recorded sampling is greedy (temperature 0 or ``greedy: true``)."""
    if not sampling:
        return None
    if isinstance(sampling.get("greedy"), bool):
        return bool(sampling["greedy"])
    temperature = sampling.get("temperature")
    if isinstance(temperature, int | float):
        return float(temperature) == 0.0
    return None


def launch_fingerprint(side: Any) -> str | None:
    """The launch fingerprint of one side's experiment.json entry (top level or under
    ``launch``); None when the entry has none."""
    if not isinstance(side, Mapping):
        return None
    value = side.get("fingerprint")
    if value is None and isinstance(side.get("launch"), Mapping):
        value = side["launch"].get("fingerprint")
    return str(value) if value else None


def aa_reason(experiment: Mapping[str, Any]) -> str | None:
    """Why this experiment is an A/A run (both sides the baseline), or None if it is not.

    Said explicitly by ``aa: true`` or a mode of ``aa``/``a/a``, or implied by two equal
    launch fingerprints.
    """
    if experiment.get("aa") is True:
        return "experiment.json says aa: true"
    mode = str(experiment.get("mode") or "").lower()
    if mode in ("aa", "a/a"):
        return f"experiment.json mode is {experiment.get('mode')!r}"
    base = launch_fingerprint(experiment.get("baseline"))
    cand = launch_fingerprint(experiment.get("candidate"))
    if base is not None and base == cand:
        return f"both sides have launch fingerprint {base}"
    return None


def judge_against_noise(ab: OutputAgreement, aa: OutputAgreement) -> str | None:
    """How the comparison's exact-match rate stands against the A/A run's (None if either
    has no rate): below it beyond both intervals means speculation changed outputs more
    than the servers' own nondeterminism does."""
    if ab.rate is None or aa.rate is None:
        return None
    if ab.rate.high < aa.rate.low:
        return (
            "outputs disagree more than in the A/A run: the candidate changed outputs beyond "
            "the servers' own nondeterminism"
        )
    if ab.rate.low > aa.rate.high:
        return "outputs agree more than in the A/A run"
    return "output agreement is within the A/A noise floor"


def agreement_of(
    compared: int, matched: int, positions: list[float], sampling: Mapping[str, Any] | None
) -> OutputAgreement:
    """The ``OutputAgreement`` of ``matched`` identical outputs out of ``compared``, with the
    first-divergence ``positions`` of the mismatched pairs whose texts were kept."""
    positions.sort()
    spread = (positions[0], quantile_sorted(positions, 0.5), positions[-1]) if positions else None
    return OutputAgreement(
        compared=compared,
        matched=matched,
        rate=wilson_interval(matched, compared) if compared else None,
        greedy=is_greedy(sampling),
        mismatched_with_text=len(positions),
        first_divergence=spread,
    )
