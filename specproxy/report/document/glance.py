"""The report's first section: the answer at a glance.

A verdict badge (faster / slower / no difference / inconclusive) with the E2E ratio,
its interval and the number of pairs; the output-distribution check (same distribution,
shifted, not settled or not checked, with its scoring requests); the recommendation or the
conditions it misses;
and a card of key numbers per side (E2E, TTFT and TPOT p50/p99, output tokens/s,
failures, accept length). Every renderer puts it before the detail sections.
"""

from __future__ import annotations

from collections.abc import Callable

from specproxy.core.compare.acceptance import AcceptanceSummary
from specproxy.core.compare.distribution import describe_lossy
from specproxy.core.compare.pairing import Metric
from specproxy.core.compare.verdict import SIMULATED
from specproxy.core.measurement.histogram import SUMMARY_PERCENTILES
from specproxy.core.records.model import Role
from specproxy.core.records.tally import SideSummary
from specproxy.report import fmt
from specproxy.report.document.blocks import Badge, Section, Table
from specproxy.report.launch_rows import NOT_SET
from specproxy.report.model import SIMULATED_LABEL, Report

_P50, _P99 = SUMMARY_PERCENTILES.index(50.0), SUMMARY_PERCENTILES.index(99.0)
_Cell = Callable[[SideSummary], str]


def badge(report: Report) -> Badge:
    """The verdict as a badge: label, then (inconclusive) the first unmet condition in
    plain words, then ratio [interval] over N pairs."""
    v = report.verdict
    text = f"{v.metric.label} ratio {fmt.ratio(v.interval)} over {fmt.count(v.n_pairs)} pairs"
    if units := fmt.units(v.interval):
        text += f" in {units}"
    if v.short:  # inconclusive: why, first
        text = f"{v.short}; {text}"
    tag = SIMULATED_LABEL if report.simulated else ""
    return Badge(v.label.value, v.label.value.replace("_", " ").upper(), text, tag)


def _recommendation(report: Report) -> str:
    rec = report.recommendation
    if rec.text and rec.text != SIMULATED:
        return f"Recommendation: {rec.text}"
    missing = ", ".join(c.key for c in rec.missing)
    if missing and missing in rec.reason:  # the reason names them already: once is enough
        return f"No recommendation: {rec.reason} (conditions below)."
    if missing:
        return f"No recommendation: {rec.reason}. Missing: {missing} (conditions below)."
    return f"No recommendation: {rec.reason}."


def distribution_line(report: Report) -> str | None:
    """The output-distribution check in one sentence, with the scoring requests it cost."""
    d = report.distribution
    if d is None:
        return None
    text = f"Output distribution: {d.text}."
    if d.lossy:
        lossy = describe_lossy(d.lossy)
        text = f"Output distribution: the candidate is lossy by configuration ({lossy}); measured: {d.text}."
    if d.scoring:
        s = d.scoring
        sent = "; ".join(
            ", ".join(f"{k} {v:g}" for k, v in p.items()) or "server defaults"
            for p in s.get("sampling_params") or ()
        )
        text += (
            f" Scored on the baseline with {s.get('scoring_requests', 0)} teacher-forced requests "
            f"(limit {s.get('limit', 0)}; sampling {sent or 'unknown'}; "
            f"{s.get('logprobs') or 'unknown'} log-probabilities, not temperature-scaled), "
            "sent after the timed blocks and not recorded as traffic."
        )
    if report.simulated:
        text += f" [{SIMULATED_LABEL}]"
    return text


def _latency(metric: Metric) -> _Cell:
    i = list(Metric).index(metric)

    def cell(s: SideSummary) -> str:
        values = s.latency[i].ok
        if values is None:
            return fmt.DASH
        return f"{fmt.ms(values[_P50])} / {fmt.ms(values[_P99])}"

    return cell


def _failures(s: SideSummary) -> str:
    failed = sum(n for _, n in s.failures)
    share = f" ({fmt.pct(failed / s.requests)})" if s.requests else ""
    return f"{fmt.count(failed)} of {fmt.count(s.requests)}{share}"


def _accept(a: AcceptanceSummary | None) -> str:
    if a is None or not a.n_requests or a.token_weighted_mean is None:
        return fmt.DASH
    return f"{fmt.num(a.token_weighted_mean)} ({a.exactness})"


def key_numbers(report: Report) -> Table:
    """Per side: E2E/TTFT/TPOT p50 and p99, output tokens/s, failures, accept length."""
    cells: list[tuple[str, _Cell]] = [
        (f"{m.label} p50 / p99", _latency(m)) for m in (Metric.E2E, Metric.TTFT, Metric.TPOT)
    ]
    cells += [
        ("output tokens/s", lambda s: fmt.num(s.output_tokens_per_s, 1) + fmt.activity(s.active_s)),
        ("failed requests", _failures),
    ]
    sides = [report.side(r) for r in Role]
    rows = [
        (label, *(get(s) if s is not None and s.requests else fmt.DASH for s in sides))
        for label, get in cells
    ]
    accept = {a.side: a for a in report.acceptance}
    rows.append(("accept length", *(_accept(accept.get(r)) for r in Role)))
    return Table(("", "baseline", "candidate"), tuple(rows), "Key numbers (completed requests)")


def speculating_sides(report: Report) -> str | None:
    """A plain sentence when the sides look wrong: the baseline speculates, or neither does."""
    row = next((r for r in report.launch_table if r[0] == "speculative_algorithm"), None)
    if row is None:
        return None
    on = {
        side: value not in (NOT_SET, "NONE", "none")
        for side, value in zip(Role, row[1:], strict=True)
    }
    if on[Role.BASELINE] and not on[Role.CANDIDATE]:
        return (
            f"The sides look swapped: the baseline speculates ({row[1]}) and the candidate does"
            " not; every ratio is still candidate/baseline as given (swap --baseline and"
            " --candidate to compare the speculative server against the plain one)."
        )
    if on[Role.BASELINE]:
        return f"Both sides speculate (baseline {row[1]}, candidate {row[2]}): the baseline is not a plain server."
    if not on[Role.CANDIDATE] and report.aa_reason is None:
        return "Neither side speculates: this compares two plain servers."
    return None


def glance_section(report: Report) -> Section:
    """The first section of every rendering."""
    sides = speculating_sides(report)
    distribution = distribution_line(report)
    blocks = (
        badge(report),
        *((sides,) if sides else ()),
        *((distribution,) if distribution else ()),
        _recommendation(report),
        key_numbers(report),
    )
    return Section("glance", "At a glance", blocks)
