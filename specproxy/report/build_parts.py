"""Pieces of ``report.build``: merging several runs' experiment files, server counters and
histogram logs, and the experiment.json summary dict (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from specproxy.core.compare.agreement import launch_fingerprint
from specproxy.core.compare.column_acceptance import side_requests
from specproxy.core.measurement.acceptance_window import (
    ServerAcceptance,
    merge_windows,
    server_acceptance,
)
from specproxy.core.measurement.histogram import (
    HISTOGRAM_METRICS,
    SUMMARY_PERCENTILES,
    LatencyHistogram,
)
from specproxy.core.records.model import Role
from specproxy.report.load import RunData
from specproxy.report.model import HistogramView


def merge_experiments(runs: Sequence[RunData]) -> tuple[dict[str, Any], list[str]]:
    """One experiment dict standing for ``runs`` (the first one's, with merged status and
    simulated flag) and notes on where the runs disagree."""
    if not runs:
        return {}, []
    merged = dict(runs[0].experiment)
    notes: list[str] = []
    if not merged:
        notes.append(f"{runs[0].path}: no experiment.json; launch configs unknown")
    if len(runs) == 1:
        return merged, notes
    statuses = [r.experiment.get("status") for r in runs]
    unfinished = [s for s in statuses if s != "completed"]
    merged["status"] = unfinished[0] if unfinished else "completed"
    merged["simulated"] = any(bool(r.experiment.get("simulated")) for r in runs)
    for side in ("baseline", "candidate"):
        prints = {launch_fingerprint(r.experiment.get(side)) for r in runs}
        if len(prints) > 1:
            shown = ", ".join(sorted(str(p) for p in prints))
            notes.append(f"run dirs differ in {side} launch fingerprint ({shown}); merged anyway")
    modes = {str(r.experiment.get("mode")) for r in runs}
    if len(modes) > 1:
        notes.append(f"run dirs used different send modes ({', '.join(sorted(modes))})")
        merged.pop("mode", None)
    return merged, notes


def saturation_notes(runs: Sequence[RunData]) -> list[str]:
    """A note per side whose server did not keep up, or whose closed loop did not hold its
    concurrency, as the replay judged it (experiment.json ``summary.saturation``)."""
    notes: list[str] = []
    for run in runs:
        summary = run.experiment.get("summary")
        found = summary.get("saturation") if isinstance(summary, Mapping) else None
        sides = found if isinstance(found, Mapping) else {}
        for side, s in sides.items():
            if not isinstance(s, Mapping):
                continue
            if s.get("saturated"):
                why = "; ".join(str(r) for r in s.get("reasons") or ())
                notes.append(
                    f"{run.path}: the {side} server did not keep up ({why}): its latencies"
                    " include queueing, while the sender met its load"
                )
            if s.get("held") is False:
                notes.append(
                    f"{run.path}: the {side} closed loop held {s.get('held_in_flight'):.1f} of"
                    f" {s.get('concurrency')} requests in flight: the intended load was not met"
                )
    return notes


def server_acceptance_merged(runs: Sequence[RunData], side: Role) -> ServerAcceptance:
    """Each run's snapshot-window figure (``core.measurement.acceptance_window``), counters summed across
    runs. The server finished every request of ``side`` in the run, warm-up included: that
    count makes a llama.cpp window exact."""
    parts = [
        server_acceptance(
            side,
            r.snapshots.get((side, "before")),
            r.snapshots.get((side, "after")),
            requests=side_requests(r.columns, side),
        )
        for r in runs
    ]
    if len(parts) == 1:
        return parts[0]
    problems = [f"{r.path}: {msg}" for r, p in zip(runs, parts, strict=True) for msg in p.problems]
    return ServerAcceptance(
        side=side,
        window=merge_windows([p.window for p in parts]),
        avg_before=parts[0].avg_before,
        avg_after=parts[-1].avg_after,
        problems=tuple(problems),
        dp_ranks=parts[-1].dp_ranks,
    )


def merged_histograms(runs: Sequence[RunData]) -> dict[tuple[Role, str], LatencyHistogram]:
    """Each side's ``.hlog`` metrics merged across runs (exact HdrHistogram merge)."""
    merged: dict[tuple[Role, str], LatencyHistogram] = {}
    for run in runs:
        for key, hist in run.histograms.items():
            merged.setdefault(key, LatencyHistogram()).merge(hist)
    return merged


def histogram_views(
    merged: Mapping[tuple[Role, str], LatencyHistogram], runs: Sequence[RunData]
) -> tuple[HistogramView, ...]:
    """Percentile views of ``merged_histograms(runs)``, in side and tag order."""
    out: list[HistogramView] = []
    for side in Role:
        for tag in HISTOGRAM_METRICS:
            hist = merged.get((side, tag))
            if hist is None:
                continue
            pct = hist.percentiles((*SUMMARY_PERCENTILES, 99.9))
            out.append(
                HistogramView(
                    side=side,
                    metric=tag,
                    count=hist.count,
                    p50_us=pct.get(50.0),
                    p90_us=pct.get(90.0),
                    p99_us=pct.get(99.0),
                    p999_us=pct.get(99.9),
                    max_us=hist.max,
                    runs_merged=sum((side, tag) in r.histograms for r in runs),
                )
            )
    return tuple(out)
