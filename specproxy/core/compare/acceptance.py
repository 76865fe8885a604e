"""Speculative acceptance over a run: per-request figures summarised per side, and acceptance
joined to each pair's speed ratio (where does acceptance stop paying?). The server's own
window figure is ``core.measurement.acceptance_window``'s.

Pure. Accept length is tokens emitted per target verify step, bonus token included
(``core.records.model.Acceptance``). Two means are reported because they answer different
questions: **request-weighted** (mean over requests of each request's accept length:
the typical request) and **token-weighted** (Σ output tokens / Σ verify steps: what the
GPU saw, comparable with the server's ``generation_tokens_total /
spec_verify_calls_total`` over the same window). A request's verify steps are its
``verify_ct`` when the server reported it, else ``tokens / accept_length``.

Per-request figures are exact unless their ``source`` is ``chunk_estimate`` (tokens per
stream chunk); the summary says which (``exactness``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from specproxy.core.measurement.acceptance import accept_length_of
from specproxy.core.measurement.histogram import nearest_rank
from specproxy.core.records.model import Measurement, RequestRecord, Role
from specproxy.core.statistics.stats import Interval

ACCEPT_BIN_EDGES = (1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0)
DISTRIBUTION_WIDTH = 0.25


@dataclass(frozen=True, slots=True)
class AcceptanceSummary:
    """Per-request acceptance on one side (warm-up excluded, completed requests only).

    ``distribution`` holds ``(bin_low, count)`` for bins ``DISTRIBUTION_WIDTH`` wide;
    ``step_histogram`` sums the servers' per-request step histograms when they sent them.
    ``exactness`` is ``exact``, ``estimated``, ``mixed`` or ``none``; ``quantiles`` are
    p10/p50/p90 (nearest rank, ``core.measurement.histogram.PERCENTILE_RULE``).
    """

    side: Role
    n_requests: int
    request_weighted_mean: float | None
    token_weighted_mean: float | None
    quantiles: tuple[float, float, float] | None
    sources: tuple[tuple[str, int], ...]
    exactness: str
    distribution: tuple[tuple[float, int], ...]
    step_histogram: tuple[int, ...] | None


def acceptance_metrics(
    a: AcceptanceSummary, *, synthetic_prompts: bool | None
) -> dict[str, Any] | None:
    """The ``acceptance_metrics`` section (``experiment.json``, a sweep's
    ``experiments.jsonl``) from the candidate's per-request acceptance; None when no
    request had an accept length. ``synthetic_prompts`` says whether the prompts were
    synthesised from token lengths; None when it is not known (a proxy sees its clients'
    prompts only)."""
    if a.request_weighted_mean is None:
        return None
    return {
        "mean_accept_length": a.request_weighted_mean,
        "mean_accept_length_token_weighted": a.token_weighted_mean,
        "requests_with_acceptance": a.n_requests,
        "exactness": a.exactness,
        "sources": dict(a.sources),
        "synthetic_prompts": synthetic_prompts,
    }


def _accept_length(rec: RequestRecord) -> float | None:
    acc = rec.measurement.acceptance
    if acc is None or acc.accept_length is None or not math.isfinite(acc.accept_length):
        return None
    return acc.accept_length


def verify_steps(m: Measurement, length: float) -> float | None:
    """A request's verify steps: the server's ``verify_ct`` when it reported one, else its
    completion tokens over the accept length ``length`` (None when neither is known)."""
    acc = m.acceptance
    if acc is not None and acc.verify_ct is not None and acc.verify_ct > 0:
        return float(acc.verify_ct)
    tokens = m.completion_tokens
    if tokens is None or length <= 0:
        return None
    return tokens / length


class AcceptanceTally:
    """Running acceptance figures of one side (mutable, one writer), fed record by record:
    the one definition behind ``summarise_acceptance`` and the replay's experiment.json.

    Counts completed, non-warm-up records of ``side`` with a finite accept length; others
    are ignored. Keeps one float per such request, up to ``limit`` requests (None: no
    limit); past it, the count, means, sources and distribution stay exact (kept as
    running figures) and the quantiles are None, so a proxy running for days holds a
    bounded amount (the report recomputes every figure from the records).
    """

    __slots__ = (
        "_bins", "_count", "_flags", "_hist", "_lengths", "_limit", "_sources", "_steps",
        "_sum", "_tokens", "side",
    )  # fmt: skip

    def __init__(self, side: Role, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"acceptance limit must be >= 1, got {limit}")
        self.side = side
        self._limit = limit
        self._lengths: list[float] = []
        self._count = 0
        self._sum = 0.0
        self._bins: dict[float, int] = {}
        self._sources: dict[str, int] = {}
        self._flags: set[bool] = set()
        self._steps = 0.0
        self._tokens = 0.0
        self._hist: list[int] | None = None

    def add(self, rec: RequestRecord) -> None:
        if rec.side is not self.side or not rec.ok or rec.warmup:
            return
        length = _accept_length(rec)
        acc = rec.measurement.acceptance
        if length is None or acc is None:
            return
        self._count += 1
        self._sum += length
        low = math.floor(length / DISTRIBUTION_WIDTH) * DISTRIBUTION_WIDTH
        self._bins[low] = self._bins.get(low, 0) + 1
        if self._limit is None or self._count <= self._limit:
            self._lengths.append(length)
        self._sources[acc.source.value] = self._sources.get(acc.source.value, 0) + 1
        self._flags.add(acc.estimated)
        steps = verify_steps(rec.measurement, length)
        if steps is not None and rec.measurement.completion_tokens is not None:
            self._steps += steps
            self._tokens += rec.measurement.completion_tokens
        if acc.histogram:
            self._hist = add_histograms(self._hist, acc.histogram)

    @property
    def exact(self) -> bool:
        """True while every accept length is kept (the quantiles can be given)."""
        return self._count == len(self._lengths)

    def summary(self) -> AcceptanceSummary:
        lengths = sorted(self._lengths)
        n = self._count
        exact_sum = math.fsum(lengths) if self.exact else self._sum
        mean = exact_sum / n if n else None
        quantiles = None
        if lengths and self.exact:
            quantiles = (
                nearest_rank(lengths, 10.0),
                nearest_rank(lengths, 50.0),
                nearest_rank(lengths, 90.0),
            )
        return AcceptanceSummary(
            side=self.side,
            n_requests=n,
            request_weighted_mean=mean,
            token_weighted_mean=accept_length_of(self._tokens, self._steps),
            quantiles=quantiles,
            sources=tuple(sorted(self._sources.items())),
            exactness=exactness(self._flags),
            distribution=tuple(sorted(self._bins.items())),
            step_histogram=tuple(self._hist) if self._hist is not None else None,
        )


def summarise_acceptance(records: Iterable[RequestRecord], side: Role) -> AcceptanceSummary:
    """Acceptance figures of ``side``'s completed, non-warm-up records."""
    tally = AcceptanceTally(side)
    for rec in records:
        tally.add(rec)
    return tally.summary()


def add_histograms(total: list[int] | None, more: Sequence[int]) -> list[int]:
    out = list(total or [])
    out.extend([0] * (len(more) - len(out)))
    for i, n in enumerate(more):
        out[i] += n
    return out


def exactness(flags: set[bool]) -> str:
    """``none``, ``estimated``, ``exact`` or ``mixed`` from the ``estimated`` flags seen."""
    if not flags:
        return "none"
    if flags == {True}:
        return "estimated"
    return "exact" if flags == {False} else "mixed"


def distribution(lengths: list[float]) -> tuple[tuple[float, int], ...]:
    counts: dict[float, int] = {}
    for length in lengths:
        low = math.floor(length / DISTRIBUTION_WIDTH) * DISTRIBUTION_WIDTH
        counts[low] = counts.get(low, 0) + 1
    return tuple(sorted(counts.items()))


@dataclass(frozen=True, slots=True)
class GroupRatio:
    """Pairs sharing an acceptance bin, category or load bin, and their median E2E and TPOT
    ratios (intervals from the spread between the group's units of replication, None below
    2 of them; ``units`` is how many the E2E interval rests on); ``mean_accept_length`` is
    the candidate's."""

    label: str
    low: float | None
    n: int
    e2e: Interval | None
    tpot: Interval | None
    mean_accept_length: float | None
    units: int = 0


def break_even_accept_length(groups: Sequence[GroupRatio], min_pairs: int = 5) -> float | None:
    """Lowest acceptance bin edge from which every bin (with ``min_pairs``) has a median E2E
    ratio below 1: the acceptance above which speculation paid. None if it never did."""
    usable = [g for g in groups if g.e2e is not None and g.n >= min_pairs and g.low is not None]
    edge: float | None = None
    for group in reversed(usable):
        assert group.e2e is not None
        if group.e2e.point >= 1.0:
            break
        edge = group.low
    return edge


def load_bin(in_flight: int) -> tuple[str, int]:
    """Power-of-two load bins: 0, 1, 2-3, 4-7, ...; returns (label, low)."""
    if in_flight <= 1:
        return str(in_flight), in_flight
    low = 1 << (in_flight.bit_length() - 1)
    return f"{low}–{2 * low - 1}", low
