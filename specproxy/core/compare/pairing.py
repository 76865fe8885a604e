"""Pairing and the paired / unpaired latency comparison of the two sides (``docs/contract.md``).

Pure. Owns the definitions every report uses and the primitives that compute them
(``summarise_ratios``, ``quantile_ratios``); the report applies them over record columns
(``core.compare.column_figures``), and ``tests/oracles/pairing.py`` keeps the
record-by-record versions the tests hold it equal to:

* a **pair** is the baseline and candidate record of one request (same ``pair_id``
  inside one experiment; mirror and alternate modes). Warm-up records never pair. A
  ``shadow_dropped`` record (the proxy had too many shadow copies in flight, i.e. the
  shadow server was not keeping up) carries its primary's ``pair_id`` and is a failure
  of the side it was dropped on: in mirror mode with the baseline as primary, a
  candidate failure.
* the **failure-aware ratio** of one metric on one pair is candidate / baseline when both
  records completed with a value (below 1 the candidate was faster); ``+inf`` when only
  the candidate failed (the worst outcome for the candidate); ``0`` when only the
  baseline failed (the worst outcome for the baseline). A pair where both failed has no
  ratio: it is counted (``PairedRatio.both_failed``) and not ranked. A completed pair
  missing the metric on a side (e.g. TPOT of a one-token answer) leaves that metric only.
* the **paired** statistic is the median of the failure-aware ratios; its interval comes
  from the spread *between units of replication* (block pairs in alternate mode, segments
  in mirror mode: ``core.compare.blocks``), never from the spread of pairs inside one
  block, which share the server's state. Beside it, the **ratio of the sides' medians**
  (each side's median over its completed values in the pairs: bench_serving's figure),
  with an interval from the same units. A median that lands on a failure is ``inf`` /
  ``0`` and is shown as such (``inf`` is ``null`` in JSON); a unit whose own median is a
  failure opens the interval on that side.
* the **unpaired** comparison (split mode, or any mode as a cross-check) is the ratio of
  one side's quantile to the other's, each side resampled on its own, completed
  requests only.

The failure rates themselves are compared in ``core.compare.failures``. Metrics are E2E,
TTFT and TPOT in integer microseconds as recorded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from specproxy.core.compare.blocks import (
    replicate_medians,
    replicate_ratio,
)
from specproxy.core.compare.units import Units, assign_units
from specproxy.core.records.model import RequestRecord, Role, SendMode
from specproxy.core.statistics.stats import (
    Interval,
    bootstrap_quantile_ratio,
    quantile_sorted,
)

UNPAIRED_QUANTILES = (0.5, 0.9, 0.99)


class Metric(StrEnum):
    """A per-request latency metric; the value names the Measurement field (microseconds)."""

    E2E = "e2e_us"
    TTFT = "ttft_us"
    TPOT = "tpot_us"

    @property
    def label(self) -> str:
        return self.name


def metric_value(record: RequestRecord, metric: Metric) -> int | None:
    value: int | None = getattr(record.measurement, metric._value_)  # .value is slow (hot)
    return value


@dataclass(frozen=True, slots=True)
class Pair:
    """The two records of one request; ``key`` is ``(experiment_id, pair_id)``."""

    key: tuple[str, str]
    baseline: RequestRecord
    candidate: RequestRecord

    def __post_init__(self) -> None:
        if self.baseline.side is not Role.BASELINE or self.candidate.side is not Role.CANDIDATE:
            raise ValueError("a pair needs one baseline and one candidate record")

    @property
    def both_ok(self) -> bool:
        return self.baseline.ok and self.candidate.ok

    def ratio(self, metric: Metric) -> float | None:
        """candidate / baseline of ``metric``; None unless both completed with a value > 0."""
        if not self.both_ok:
            return None
        base, cand = metric_value(self.baseline, metric), metric_value(self.candidate, metric)
        if base is None or cand is None or base <= 0:
            return None
        return cand / base

    def failure_aware_ratio(self, metric: Metric) -> float | None:
        """``ratio`` when both completed; ``inf`` when only the candidate failed, ``0`` when
        only the baseline failed; None when both failed or a completed pair lacks ``metric``."""
        if self.baseline.ok and not self.candidate.ok:
            return math.inf
        if self.candidate.ok and not self.baseline.ok:
            return 0.0
        return self.ratio(metric)


@dataclass(frozen=True, slots=True)
class PairingCounts:
    """How the records paired, and what kept records out of pairs (warm-up excluded)."""

    pairs: int
    both_ok: int
    baseline_failed_only: int
    candidate_failed_only: int
    both_failed: int
    missing_candidate: int
    missing_baseline: int
    duplicates: int
    without_pair_id: int

    @property
    def incomplete(self) -> int:
        """Pair ids with a record on one side only: a request whose other record is lost."""
        return self.missing_candidate + self.missing_baseline


@dataclass(frozen=True, slots=True)
class Pairing:
    """The pairs found and their counts."""

    pairs: tuple[Pair, ...]
    counts: PairingCounts


def find_pairs(records: Iterable[RequestRecord]) -> Pairing:
    """Group non-warm-up records by ``(experiment_id, pair_id)`` into pairs.

    A pair id seen twice on one side is a duplicate: the first record is kept and the
    extra counted, never silently paired twice.
    """
    sides: dict[tuple[str, str], dict[Role, RequestRecord]] = {}
    duplicates = without = 0
    for rec in records:
        if rec.warmup:
            continue
        if rec.pair_id is None:
            without += 1
            continue
        slot = sides.setdefault((rec.experiment_id, rec.pair_id), {})
        if rec.side in slot:
            duplicates += 1
            continue
        slot[rec.side] = rec
    pairs: list[Pair] = []
    missing_b = missing_c = 0
    for key, slot in sides.items():
        if Role.BASELINE not in slot:
            missing_b += 1
        elif Role.CANDIDATE not in slot:
            missing_c += 1
        else:
            pairs.append(Pair(key, slot[Role.BASELINE], slot[Role.CANDIDATE]))
    counts = PairingCounts(
        pairs=len(pairs),
        both_ok=sum(p.both_ok for p in pairs),
        baseline_failed_only=sum(not p.baseline.ok and p.candidate.ok for p in pairs),
        candidate_failed_only=sum(p.baseline.ok and not p.candidate.ok for p in pairs),
        both_failed=sum(not p.baseline.ok and not p.candidate.ok for p in pairs),
        missing_candidate=missing_c,
        missing_baseline=missing_b,
        duplicates=duplicates,
        without_pair_id=without,
    )
    return Pairing(tuple(pairs), counts)


@dataclass(frozen=True, slots=True)
class PairedRatio:
    """Median failure-aware per-pair ratio of one metric (module docstring).

    ``n`` ratios were ranked: ``candidate_failed`` of them are ``inf`` (only the candidate
    failed) and ``baseline_failed`` are ``0`` (only the baseline failed); ``both_failed``
    pairs were counted and not ranked. ``interval`` (from the spread between units) is None
    under 2 units with a ratio; ``units`` is how many units it rests on and ``unit`` what a
    unit is ("block pair", "segment"); ``clean_units`` how many lie outside every drift
    episode, and ``widened`` says when the interval was widened for one. ``medians`` is the
    ratio of the sides' medians with its own interval between units.
    ``candidate_faster_share`` is the share of ranked ratios below 1.
    """

    metric: Metric
    interval: Interval | None
    n: int
    candidate_faster_share: float | None
    candidate_failed: int = 0
    baseline_failed: int = 0
    both_failed: int = 0
    units: int = 0
    unit: str = "block pair"
    clean_units: int = 0
    widened: str | None = None
    medians: Interval | None = None

    def __post_init__(self) -> None:
        counts = (self.n, self.candidate_failed, self.baseline_failed, self.both_failed)
        if min(*counts, self.units, self.clean_units) < 0:
            raise ValueError("counts must be >= 0")
        if self.candidate_failed + self.baseline_failed > self.n:
            raise ValueError("more one-sided failures than ranked ratios")

    @property
    def completed(self) -> int:
        """Ranked pairs where both records completed (finite, positive ratios)."""
        return self.n - self.candidate_failed - self.baseline_failed

    def units_text(self) -> str:
        """``"over 8 block pairs"`` (with the drift widening when there was one)."""
        plural = "" if self.units == 1 else "s"
        text = f"over {self.units} {self.unit}{plural}"
        if self.widened:
            text += f" ({self.clean_units} outside drift; interval widened to hold both)"
        return text


def summarise_ratios(
    metric: Metric,
    ratios: Sequence[float | None],
    values: tuple[Sequence[float | None], Sequence[float | None]],
    units: Units,
    *,
    both_failed: int = 0,
    flagged: frozenset[int] = frozenset(),
    medians: bool = True,
) -> PairedRatio:
    """One metric's paired statistic: per pair (in ``units``' pair order) its failure-aware
    ratio and the (baseline, candidate) completed ``values`` (None: failed or missing).
    ``flagged``: units in a drift episode (``core.compare.blocks``); ``medians=False``: none."""
    ranked = [r for r in ratios if r is not None]
    cand_failed = sum(map(math.isinf, ranked))  # map: no Python frame per pair
    base_failed = ranked.count(0.0)
    if len(ranked) < 2:
        return PairedRatio(
            metric, None, len(ranked), None, cand_failed, base_failed, both_failed, unit=units.kind
        )
    paired = replicate_ratio(ratios, units, flagged)
    of_medians = replicate_medians(values[0], values[1], units, flagged) if medians else None
    faster = sum(map((1.0).__gt__, ranked)) / len(ranked)
    return PairedRatio(
        metric,
        paired.interval,
        len(ranked),
        faster,
        cand_failed,
        base_failed,
        both_failed,
        units=paired.units,
        unit=units.kind,
        clean_units=paired.clean_units,
        widened=paired.widened,
        medians=of_medians.interval if of_medians is not None else None,
    )


def _block_label(record: RequestRecord) -> int:
    block = record.labels.get("block") if record.labels else None
    return int(block) if block is not None and block.isdigit() else -1


def pair_units(pairs: Sequence[Pair]) -> Units:
    """The unit of replication of each pair (``core.compare.units.assign_units``)."""
    return assign_units(
        [p.key[0] for p in pairs],
        [_block_label(p.baseline) for p in pairs],
        [min(p.baseline.sent_at_unix_s, p.candidate.sent_at_unix_s) for p in pairs],
    )


def _completed(record: RequestRecord, metric: Metric) -> float | None:
    value = metric_value(record, metric) if record.ok else None
    return None if value is None else float(value)


def paired_ratio(
    pairs: Sequence[Pair],
    metric: Metric,
    *,
    units: Units | None = None,
    flagged: frozenset[int] = frozenset(),
) -> PairedRatio:
    """The paired statistic for one metric over the failure-aware ratios of ``pairs``
    (units from the pairs themselves unless given)."""
    units = units if units is not None else pair_units(pairs)
    return summarise_ratios(
        metric,
        [p.failure_aware_ratio(metric) for p in pairs],
        ([_completed(p.baseline, metric) for p in pairs],
         [_completed(p.candidate, metric) for p in pairs]),
        units,
        both_failed=sum(not p.baseline.ok and not p.candidate.ok for p in pairs),
        flagged=flagged,
    )  # fmt: skip


TAIL_OBSERVATIONS = 10
"""An unpaired quantile gets an interval only when each side has at least this many values
beyond it (n x (1 - q) >= 10: p99 needs 1,000 per side); below that the percentile
bootstrap of a tail quantile under-covers (``bench/stats_coverage.py`` measures it)."""


@dataclass(frozen=True, slots=True)
class QuantileRatio:
    """candidate / baseline of one quantile of one metric, unpaired; values in microseconds.

    ``interval`` is None when a side has too few values beyond the quantile for an honest
    interval (``TAIL_OBSERVATIONS``); ``n`` is the smaller side's count.
    """

    metric: Metric
    q: float
    baseline_value: float
    candidate_value: float
    ratio: float
    interval: Interval | None
    n: int


def quantile_ratios(
    metric: Metric,
    base: Sequence[float],
    cand: Sequence[float],
    *,
    quantiles: Sequence[float],
    min_per_side: int,
    resamples: int,
    seed: int,
) -> list[QuantileRatio]:
    """``metric``'s quantile ratios from each side's sorted values (none when a side has
    fewer than ``min_per_side`` or a value is not positive); the bootstrap interval where a
    quantile has ``TAIL_OBSERVATIONS`` beyond it, and always at the median."""
    n = min(len(base), len(cand))
    if n < min_per_side or base[0] <= 0:
        return []
    out = []
    for q in quantiles:
        b_val, c_val = quantile_sorted(base, q), quantile_sorted(cand, q)
        iv = None
        if n * (1.0 - q) >= TAIL_OBSERVATIONS or q == 0.5:
            iv = bootstrap_quantile_ratio(cand, base, q, resamples=resamples, seed=seed)
        out.append(QuantileRatio(metric, q, b_val, c_val, c_val / b_val, iv, n))
    return out


MODE_CAVEATS: dict[SendMode, str] = {
    SendMode.MIRROR: (
        "mirror mode: every request went to both servers at the same moment; on one GPU "
        "the two servers contend, so each side ran slower than it would alone and the "
        "ratios include that contention"
    ),
    SendMode.SPLIT: (
        "split mode: each request went to one side only, so the comparison is unpaired "
        "(different requests on each side) and no verdict is drawn from it"
    ),
    SendMode.ALTERNATE: (
        "alternate mode: one side at a time in alternating blocks, so the servers never "
        "contended and slow drift cancels; this is the clean comparison"
    ),
    SendMode.PASSTHROUGH: "passthrough mode: one side only; there is nothing to compare",
}
