"""The replay's end-of-run summary: what experiment.json stores and the terminal text.

Every per-side count, latency percentile and the load-met rule come from the
``Recorder``'s ``core.records.tally.SideTally``, whose summary is built by
``core.records.tally.build_side_summary`` (the builder the reports' column pass calls too; warm-up
counted apart and left out of every figure). ITL percentiles come from the Recorder's
ITL histogram (``core.measurement.histogram``'s percentile rule), acceptance from its
``core.compare.acceptance.AcceptanceTally`` (the report's own). ``Tally`` adds only what
the replayer alone knows: requests sent per side.
``side_figures()`` is what experiment.json stores; ``render_summary`` is the terminal
text (the richer report lives in ``specproxy.report``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specproxy.core.compare.acceptance import AcceptanceSummary
from specproxy.core.measurement.histogram import (
    PERCENTILE_RULE,
    SUMMARY_PERCENTILES,
    LatencyHistogram,
)
from specproxy.core.records.model import Role
from specproxy.core.records.tally import SideSummary, SideTally, format_ms, load_met
from specproxy.recording.recorder import Recorder
from specproxy.replay.saturation import HELD_SHARE, render_line

_PRINTED = (("ttft_us", "TTFT"), ("itl_us", "ITL"), ("tpot_us", "TPOT"), ("e2e_us", "E2E"))


@dataclass(slots=True)
class ReplaySideTally:
    """What one side adds to the Recorder's figures (mutable, owned by ``Tally``)."""

    side: Role
    sent: int = 0


class Tally:
    """The replayer's additions next to its ``Recorder`` (see the module docstring)."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self.sides: dict[Role, ReplaySideTally] = {role: ReplaySideTally(role) for role in Role}

    def stats(self, side: Role) -> SideTally:
        """The Recorder's running tally of ``side`` (completed, failed by error class...)."""
        return self._recorder.stats(side)

    def histogram(self, side: Role, metric: str) -> LatencyHistogram:
        return self._recorder.histogram(side, metric)

    def itl_estimated_tokens(self, side: Role) -> int:
        """How many of ``side``'s ITL samples rest on estimated tokens per event."""
        return self._recorder.itl_estimated_tokens(side)

    def figures(self, side: Role, max_lag_ms: float) -> dict[str, Any]:
        """The Recorder's experiment.json figures of ``side`` (``Recorder.figures``)."""
        return self._recorder.figures(side, max_lag_ms)

    def summary(self, side: Role, max_lag_ms: float) -> SideSummary:
        """The Recorder's summary of ``side`` (``core.records.tally``), load-met limit ``max_lag_ms``."""
        return self._recorder.summary(side, max_lag_ms)

    def on_sent(self, side: Role) -> None:
        self.sides[side].sent += 1

    def acceptance(self, side: Role) -> AcceptanceSummary:
        """The Recorder's per-request acceptance of ``side`` (``Recorder.acceptance``)."""
        return self._recorder.acceptance(side)


def side_figures(tally: Tally, side: Role, max_lag_ms: float) -> dict[str, Any]:
    """One side's figures as experiment.json stores them (microseconds, tokens/s)."""
    out: dict[str, Any] = {"sent": tally.sides[side].sent}
    out.update(tally.figures(side, max_lag_ms))
    return out


def lag_verdict(tally: Tally, max_lag_ms: float) -> dict[str, Any]:
    """Whether the intended load was met (``core.records.tally.load_met``), with each side's send lag."""
    sides = [tally.summary(role, max_lag_ms) for role in Role if tally.sides[role].sent]
    return {
        "max_lag_ms": max_lag_ms,
        "load_met": load_met(sides),
        "sides": {
            s.side.value: {
                "p50_us": s.send_lag_p50_us,
                "p99_us": s.send_lag_p99_us,
                "max_us": s.send_lag_max_us,
                "lagged": s.lagged,
            }
            for s in sides
        },
    }


def _metric_line(name: str, stats: Mapping[str, Any]) -> str:
    cells = "  ".join(f"p{q:g} {format_ms(stats[f'p{q:g}'], '-'):>9}" for q in SUMMARY_PERCENTILES)
    estimated = stats.get("estimated_tokens")
    note = f", {estimated} on ESTIMATED tokens per chunk" if estimated else ""
    return f"  {name:<5} {cells}  (n={stats['count']}{note})"


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
    ref = summary.get("output_len_from_reference")
    if ref and ref["requests"] < ref["of"]:
        lines.append(
            f"note: --output-len-from-reference: {ref['requests']} of {ref['of']} requests have a"
            " reference answer; the others ask for the usual output length (--output-len)"
        )
    return lines


def _lag_line(summary: Mapping[str, Any]) -> str:
    lag = summary.get("send_lag", {})
    flag = "load met" if summary.get("load_met", lag.get("load_met", True)) else "LOAD NOT MET"
    saturation = summary.get("saturation", {})
    if any(s.get("closed_loop") for s in saturation.values()):
        return _closed_loop_line(flag, saturation)
    sides = lag.get("sides", {})
    parts = [
        f"{side} p50 {format_ms(v.get('p50_us'), '-')}, p99 {format_ms(v.get('p99_us'), '-')},"
        f" max {format_ms(v.get('max_us'), '-')}" + (" LAGGED" if v.get("lagged") else "")
        for side, v in sides.items()
    ]
    shown = "; ".join(parts) or "no scheduled sends"
    return f"send lag: {shown} ({flag}: limit {lag.get('max_lag_ms')} ms at p99, warm-up excluded)"


def _closed_loop_line(flag: str, saturation: Mapping[str, Any]) -> str:
    """A closed loop's load line: the concurrency each side held (it has no send lag)."""
    parts = []
    for side, s in saturation.items():
        held = s.get("held_in_flight")
        shown = "-" if held is None else f"{held:.1f}"
        short = " NOT HELD" if s.get("held") is False else ""
        parts.append(f"{side} {shown} of {s.get('concurrency')}{short}")
    return (
        f"closed loop: in flight {'; '.join(parts)} ({flag}: time-weighted from the end of the"
        f" start-up ramp to the last send, at least {HELD_SHARE:.0%} of N)"
    )


def _side_lines(side: str, s: Mapping[str, Any], excluded: str = "warm-up") -> list[str]:
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(s["failed_by_kind"].items()))
    failed = f" ({kinds})" if kinds else ""
    warm = f", {excluded} {s['warmup_excluded']} ({s['warmup_failed']} failed; excluded below)"
    lines = [
        f"{side}: sent {s['sent']}{warm}; counted {s['requests']}: completed {s['completed']},"
        f" failed {s['failed']}{failed}",
        *(_metric_line(label, s[name]) for name, label in _PRINTED),
        f"  output {s['output_tokens_per_s'] or '-'} tokens/s (while active)",
    ]
    if s["accept_length_mean"] is not None:
        kind = {"estimated": "ESTIMATED from stream chunks", "exact": "server-reported"}.get(
            s["accept_length_exactness"], s["accept_length_exactness"]
        )
        lines.append(
            f"  acceptance length mean {s['accept_length_mean']:.2f} per request ({kind},"
            f" {s['accept_length_requests']} requests)"
        )
    return lines


def render_summary(summary: Mapping[str, Any], *, brief: bool = False) -> str:
    """The terminal summary: per side counts, latency percentiles, throughput, acceptance, lag.

    ``brief`` keeps only the replay's own lines (run directory, notes, send lag), for
    printing under the full report.
    """
    lines = [f"run: {summary.get('run_dir')}  status: {summary.get('status')}", *_notes(summary)]
    servers = [render_line(side, s) for side, s in summary.get("saturation", {}).items()]
    if brief:
        return "\n".join([*lines, _lag_line(summary), *servers])
    for side, s in summary.get("sides", {}).items():
        lines += _side_lines(side, s, summary.get("excluded_as", "warm-up"))
    lines.append(f"({PERCENTILE_RULE}; ITL from the histogram log)")
    lines.append(_lag_line(summary))
    return "\n".join([*lines, *servers])
