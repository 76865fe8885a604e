"""The report's output-distribution check: scored runs -> ``core.compare.distribution``.

Pure (reads no file: ``report.load`` read ``scores.jsonl`` and ``scoring.json``). Several run
directories' scored pairs are pooled (units stay inside their own experiment) and their
scoring counts summed. When nothing was scored the check is ``not checked`` and says why:
no pairs (split, passthrough), a ``serve`` run without stored text (``--record-text`` off),
a ``serve`` run not yet scored (``specproxy score``), or a replay sent without
``--score-requests``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from specproxy.core.compare.distribution import (
    DistributionCheck,
    check,
    not_checked,
    scored_pairs,
)
from specproxy.core.records.columns import RecordColumns
from specproxy.core.records.model import SendMode
from specproxy.report.load import RunData

_COUNTED = ("limit", "scoring_requests", "tokenize_requests", "failed", "pairs_scored")


def merged_scoring(runs: Sequence[RunData]) -> dict[str, Any] | None:
    """The runs' ``scoring.json`` counts summed (None when no run sent scoring requests)."""
    found = [r.scoring for r in runs if r.scoring is not None]
    if not found:
        return None
    merged: dict[str, Any] = {k: sum(int(f.get(k) or 0) for f in found) for k in _COUNTED}
    skipped: dict[str, int] = {}
    for f in found:
        for why, n in (f.get("skipped") or {}).items():
            skipped[why] = skipped.get(why, 0) + int(n)
    merged["skipped"] = skipped
    merged["logprobs"] = found[0].get("logprobs")
    params = [p for f in found for p in f.get("sampling_params") or ()]
    merged["sampling_params"] = [p for i, p in enumerate(params) if p not in params[:i]]
    merged["after_timed_blocks"] = all(f.get("after_timed_blocks") for f in found)
    merged["recorded_as_traffic"] = any(f.get("recorded_as_traffic") for f in found)
    return merged


def _why_not(experiment: Mapping[str, Any], cols: RecordColumns, mode: SendMode | None) -> str:
    if mode in (SendMode.SPLIT, SendMode.PASSTHROUGH):
        return f"{mode.value} mode has no pairs: each prompt's two outputs are needed"
    sampling = experiment.get("sampling")
    serve = isinstance(sampling, Mapping) and sampling.get("source") == "clients"
    if serve and not cols.texts:
        return (
            "this serve run kept no output text (start serve with --record-text to keep it); "
            "without the outputs there is nothing to score"
        )
    if serve:
        return (
            "this serve run's outputs were not scored yet: run `specproxy score RUN_DIR "
            "--baseline URL` (it needs --record --record-text in mirror mode)"
        )
    return "no scoring requests were sent (replay --score-requests N scores outputs after the run)"


def distribution_check(
    runs: Sequence[RunData],
    experiment: Mapping[str, Any],
    cols: RecordColumns,
    mode: SendMode | None,
    *,
    aa: DistributionCheck | None = None,
    lossy: tuple[tuple[str, float], ...] = (),
) -> DistributionCheck:
    """The check over the runs' scored pairs, against the A/A run's check ``aa`` when given,
    carrying the candidate's ``lossy`` settings (``core.compare.distribution.lossy_settings``)."""
    return dataclasses.replace(_checked(runs, experiment, cols, mode, aa), lossy=lossy)


def _checked(
    runs: Sequence[RunData],
    experiment: Mapping[str, Any],
    cols: RecordColumns,
    mode: SendMode | None,
    aa: DistributionCheck | None,
) -> DistributionCheck:
    scoring = merged_scoring(runs)
    if scoring is None:
        return not_checked(_why_not(experiment, cols, mode))
    lines = [line for run in runs for line in run.scores]
    if not lines:
        skipped = "; ".join(f"{why}: {n}" for why, n in scoring["skipped"].items())
        return not_checked(f"no output could be scored ({skipped or 'no complete pairs'})", scoring)
    pairs, unit = scored_pairs(lines)
    return check(pairs, aa=aa, scoring=scoring, unit=unit)
