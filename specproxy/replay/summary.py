"""The replayer's own per-side tally and its small end-of-run summary.

The ``Recorder`` that writes each record already keeps, per side, the completed and
failed counts (by error class) and the HdrHistograms of TTFT, per-token latency (ITL),
TPOT and E2E over completed non-warm-up requests; the summary reads those. ``Tally``
adds what only the replayer knows or wants: requests sent, output tokens of completed
non-warm-up requests, the time each side was being sent to, acceptance per source, and
the send lag of every request sent (kept raw: exact percentiles). Output tokens/s divides
a side's output tokens by the time that side was being sent to (its windows' spans, so
alternate mode does not count the other side's turns). ``side_summary()`` is what
experiment.json stores; ``render_summary`` is the terminal text (the richer report
lives in ``specproxy.report``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specproxy.core.histogram import LatencyHistogram
from specproxy.core.model import AcceptanceSource, RequestRecord, Role
from specproxy.recording.recorder import Recorder, SideStats

PERCENTILES = (50.0, 90.0, 99.0)
METRICS = ("ttft_us", "itl_us", "tpot_us", "e2e_us")
ESTIMATE = AcceptanceSource.CHUNK_ESTIMATE.value


@dataclass(slots=True)
class SideTally:
    """What one side adds to the Recorder's figures (mutable, owned by ``Tally``)."""

    sent: int = 0
    output_tokens: int = 0
    active_us: int = 0
    accept_sums: dict[str, float] = field(default_factory=dict)
    accept_counts: Counter[str] = field(default_factory=Counter)
    lags_us: list[int] = field(default_factory=list)


class Tally:
    """Per-side figures of one replay run, next to its ``Recorder`` (see the module docstring).

    ``observe`` is called with each record right after ``Recorder.write``.
    """

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self.sides: dict[Role, SideTally] = {role: SideTally() for role in Role}

    def stats(self, side: Role) -> SideStats:
        """The Recorder's running counts of ``side`` (completed, failed by error class)."""
        return self._recorder.stats(side)

    def histogram(self, side: Role, metric: str) -> LatencyHistogram:
        return self._recorder.histogram(side, metric)

    def itl_estimated_tokens(self, side: Role) -> int:
        """How many of ``side``'s ITL samples rest on estimated tokens per event."""
        return self._recorder.itl_estimated_tokens(side)

    def on_sent(self, side: Role) -> None:
        self.sides[side].sent += 1

    def observe(self, record: RequestRecord) -> None:
        tally = self.sides[record.side]
        lag = record.send_lag_us
        if lag is not None:
            tally.lags_us.append(lag)
        m = record.measurement
        if not m.ok or record.warmup:
            return
        tally.output_tokens += m.completion_tokens or 0
        acc = m.acceptance
        if acc is not None and acc.accept_length is not None:
            source = acc.source.value
            tally.accept_sums[source] = tally.accept_sums.get(source, 0.0) + acc.accept_length
            tally.accept_counts[source] += 1

    def add_active(self, sides: Iterable[Role], span_us: int) -> None:
        """Count ``span_us`` of sending time for each of ``sides``."""
        for side in sides:
            self.sides[side].active_us += max(span_us, 0)

    def lags_us(self) -> list[int]:
        """Send lag of every request sent, every side."""
        return [lag for side in self.sides.values() for lag in side.lags_us]


def _percentiles(hist: LatencyHistogram) -> dict[str, int | None]:
    """p50/p90/p99 and mean (3 significant digits, from the histogram) and count."""
    found = hist.percentiles(PERCENTILES)
    out: dict[str, int | None] = {f"p{q:g}": found.get(q) for q in PERCENTILES}
    mean = hist.mean
    out["mean"] = round(mean) if mean is not None else None
    out["count"] = hist.count
    return out


def exact_percentiles(values: list[int]) -> dict[str, int | None]:
    """Exact nearest-rank p50/p90/p99, max and count of ``values`` (send lag is kept raw)."""
    ordered = sorted(values)
    n = len(ordered)

    def rank(q: float) -> int | None:
        return ordered[min(n - 1, max(0, math.ceil(q / 100 * n) - 1))] if n else None

    out = {f"p{q:g}": rank(q) for q in PERCENTILES}
    out["max"] = ordered[-1] if n else None
    out["count"] = n
    return out


def side_summary(tally: Tally, side: Role) -> dict[str, Any]:
    """One side's figures as experiment.json stores them (microseconds, tokens/s)."""
    mine = tally.sides[side]
    stats = tally.stats(side)
    out: dict[str, Any] = {
        "sent": mine.sent,
        "completed": stats.completed,
        "failed": stats.failed,
        "failed_by_kind": dict(stats.failed_by_kind),
        "output_tokens": mine.output_tokens,
        "output_tokens_per_s": (
            round(mine.output_tokens * 1e6 / mine.active_us, 2) if mine.active_us else None
        ),
    }
    for name in METRICS:
        out[name] = _percentiles(tally.histogram(side, name))
    out["itl_us"]["estimated_tokens"] = tally.itl_estimated_tokens(side)
    out["send_lag_us"] = exact_percentiles(mine.lags_us)
    out.update(_acceptance(mine))
    return out


def _acceptance(tally: SideTally) -> dict[str, Any]:
    """Mean accept length per source, and the headline: server-reported when any, else estimated."""
    by_source = {
        src: round(tally.accept_sums[src] / n, 4) for src, n in tally.accept_counts.items() if n
    }
    reported = [s for s in by_source if s != ESTIMATE]
    chosen = reported or [s for s in by_source if s == ESTIMATE]
    n = sum(tally.accept_counts[s] for s in chosen)
    mean = sum(tally.accept_sums[s] for s in chosen) / n if n else None
    return {
        "accept_length_mean": round(mean, 4) if mean is not None else None,
        "accept_length_requests": n,
        "accept_length_estimated": bool(chosen) and not reported,
        "accept_length_by_source": by_source,
    }


def lag_verdict(tally: Tally, max_lag_ms: float) -> dict[str, Any]:
    """Send lag over all sides and whether the intended load was met (p99 within the limit)."""
    lags = exact_percentiles(tally.lags_us())
    p99 = lags["p99"]
    return {
        "p50_us": lags["p50"],
        "p99_us": p99,
        "max_us": lags["max"],
        "max_lag_ms": max_lag_ms,
        "load_met": p99 is None or p99 <= max_lag_ms * 1000,
    }


def _ms(value: int | float | None) -> str:
    return "-" if value is None else f"{value / 1000:.1f}"


def _estimated_note(stats: Mapping[str, Any]) -> str:
    estimated = stats.get("estimated_tokens")
    return f", {estimated} on ESTIMATED tokens per chunk" if estimated else ""


def _metric_line(name: str, stats: Mapping[str, Any]) -> str:
    return (
        f"  {name:<5} p50 {_ms(stats['p50']):>8}  p90 {_ms(stats['p90']):>8}"
        f"  p99 {_ms(stats['p99']):>8} ms  (n={stats['count']}{_estimated_note(stats)})"
    )


def _notes(summary: Mapping[str, Any]) -> list[str]:
    lines = []
    if summary.get("synthetic_prompts"):
        lines.append(
            f"note: {summary['synthetic_prompts']} prompts were synthesised from token lengths;"
            " acceptance measured on synthetic text is not representative of real traffic"
        )
    dropped = {
        "unreadable trace lines skipped": summary.get("skipped_bad"),
        "requests over the context limit skipped": summary.get("over_context_skipped"),
        "requests clamped to the context limit": summary.get("over_context_clamped"),
    }
    lines += [f"note: {n} {what}" for what, n in dropped.items() if n]
    return lines


def _lag_line(summary: Mapping[str, Any]) -> str:
    lag = summary.get("send_lag", {})
    flag = "load met" if lag.get("load_met", True) else "LOAD NOT MET"
    return (
        f"send lag p50 {_ms(lag.get('p50_us'))} ms, p99 {_ms(lag.get('p99_us'))} ms,"
        f" max {_ms(lag.get('max_us'))} ms ({flag}: limit {lag.get('max_lag_ms')} ms at p99)"
    )


def render_summary(summary: Mapping[str, Any], *, brief: bool = False) -> str:
    """The terminal summary: per side latency percentiles, throughput, failures, acceptance, lag.

    ``brief`` keeps only the replay's own lines (run directory, notes, send lag), for
    printing under the full report.
    """
    lines = [f"run: {summary.get('run_dir')}  status: {summary.get('status')}", *_notes(summary)]
    if brief:
        return "\n".join([*lines, _lag_line(summary)])
    for side, s in summary.get("sides", {}).items():
        lines.append(
            f"{side}: sent {s['sent']}, completed {s['completed']}, failed {s['failed']}"
            f" {s['failed_by_kind'] or ''}".rstrip()
        )
        for name, label in (
            ("ttft_us", "TTFT"),
            ("itl_us", "ITL"),
            ("tpot_us", "TPOT"),
            ("e2e_us", "E2E"),
        ):
            lines.append(_metric_line(label, s[name]))
        lines.append(f"  output {s['output_tokens_per_s'] or '-'} tokens/s")
        if s["accept_length_mean"] is not None:
            kind = (
                "estimated from stream chunks"
                if s["accept_length_estimated"]
                else "server-reported"
            )
            lines.append(
                f"  acceptance length mean {s['accept_length_mean']} ({kind},"
                f" {s['accept_length_requests']} requests)"
            )
    lines.append(_lag_line(summary))
    return "\n".join(lines)
