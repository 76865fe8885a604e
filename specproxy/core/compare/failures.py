"""The two sides' failure rates over the same pairs, compared with an interval (``docs/contract.md``).

Pure. Over the ``n`` pairs of a paired run (mirror or alternate), each side's failure
rate is its failed records over ``n``; a ``shadow_dropped`` record is a failure of the
side it was dropped on (``core.compare.pairing``). The difference ``candidate - baseline`` rests
on the **discordant** pairs alone: ``x`` pairs where only the candidate failed and ``y``
where only the baseline failed (pairs where both or neither failed say nothing about
which side fails more), so it is ``(x - y) / n``.

**Interval**: Tango's asymptotic score interval for a paired difference of proportions
(``core.statistics.stats.paired_difference_interval``), 95%. Why this one: the pairs are not two
independent samples, so an unpaired interval (Wilson-Newcombe for independent
proportions) would ignore the pairing and be too wide or too narrow depending on how
the two sides' failures correlate; the Wald interval for the paired difference collapses
to a point when no pair is discordant (a common case: the baseline rarely fails) and
under-covers with few discordant pairs; an exact interval conditional on ``x + y``
bounds the share ``x / (x + y)``, not the difference of rates the report should name.
Tango's interval inverts the score test (its sign test is McNemar's), stays within
[-1, 1], is wide rather than empty at zero discordant pairs, and keeps close to 95%
coverage down to a handful of discordant pairs (Tango 1998, Stat. Med. 17:891;
Fagerland, Lydersen and Laake 2014 recommend it).

**Rule**: the candidate *fails measurably more often* when the whole interval lies above
0. Then no verdict of ``faster`` and no recommendation can stand
(``core.compare.verdict``).
"""

from __future__ import annotations

from dataclasses import dataclass

from specproxy.core.compare.pairing import PairingCounts
from specproxy.core.statistics.stats import Interval, paired_difference_interval

METHOD = "Tango score interval, paired"


@dataclass(frozen=True, slots=True)
class FailureComparison:
    """Failure rates of both sides over ``pairs`` pairs and their difference.

    ``difference`` is candidate minus baseline failure rate (a fraction) with its
    interval; None when there are no pairs.
    """

    pairs: int
    candidate_only: int
    baseline_only: int
    both: int
    difference: Interval | None

    def __post_init__(self) -> None:
        if min(self.pairs, self.candidate_only, self.baseline_only, self.both) < 0:
            raise ValueError("counts must be >= 0")
        if self.candidate_only + self.baseline_only + self.both > self.pairs:
            raise ValueError("more failed pairs than pairs")

    @property
    def candidate_rate(self) -> float | None:
        return (self.candidate_only + self.both) / self.pairs if self.pairs else None

    @property
    def baseline_rate(self) -> float | None:
        return (self.baseline_only + self.both) / self.pairs if self.pairs else None

    @property
    def candidate_fails_more(self) -> bool:
        """The whole failure-rate difference interval lies above 0."""
        return self.difference is not None and self.difference.low > 0.0

    def describe(self) -> str:
        """One line naming both rates and the difference with its interval."""
        if self.difference is None:
            return "no pairs: failure rates not compared"
        d = self.difference
        cand_n = self.candidate_only + self.both
        base_n = self.baseline_only + self.both
        return (
            f"failure-rate difference candidate - baseline {d.point:+.1%} "
            f"[{d.confidence:.0%} CI {d.low:+.1%}, {d.high:+.1%}] ({METHOD}): candidate "
            f"{cand_n} of {self.pairs} pairs failed ({self.candidate_rate:.1%}), baseline "
            f"{base_n} ({self.baseline_rate:.1%}); {self.candidate_only} failed on the "
            f"candidate only, {self.baseline_only} on the baseline only, {self.both} on both"
        )


def compare_failures(counts: PairingCounts) -> FailureComparison:
    """The failure comparison over the pairs ``counts`` describes."""
    x, y = counts.candidate_failed_only, counts.baseline_failed_only
    diff = paired_difference_interval(x, y, counts.pairs) if counts.pairs else None
    return FailureComparison(counts.pairs, x, y, counts.both_failed, diff)
