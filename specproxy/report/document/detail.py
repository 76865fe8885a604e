"""Detail sections of the report document: acceptance, output agreement, launch configs
and scope, merged histogram logs."""

from __future__ import annotations

from collections.abc import Sequence

from specproxy.core.compare.acceptance import AcceptanceSummary, GroupRatio
from specproxy.core.compare.agreement import judge_against_noise
from specproxy.core.measurement.acceptance_window import ServerAcceptance
from specproxy.core.measurement.histogram import PERCENTILE_RULE
from specproxy.core.records.model import Role
from specproxy.report import fmt
from specproxy.report.document.blocks import Section, Table
from specproxy.report.document.glance import speculating_sides
from specproxy.report.model import Report


def _acceptance_line(a: AcceptanceSummary) -> str:
    if not a.n_requests:
        return f"{a.side.value}: no per-request acceptance figures."
    sources = ", ".join(f"{k} {n}" for k, n in a.sources)
    if a.side is Role.BASELINE and a.exactness == "estimated":
        return (
            f"baseline: {fmt.num(a.token_weighted_mean)} tokens per stream event over "
            f"{a.n_requests} requests (the chunk estimator on a server that does not speculate:"
            " about 1 is expected, so this checks the estimator, not acceptance)."
        )
    q = a.quantiles
    spread = f"; p10/p50/p90 {q[0]:.2f}/{q[1]:.2f}/{q[2]:.2f}" if q else ""
    return (
        f"{a.side.value}: mean accept length {fmt.num(a.request_weighted_mean)} per request, "
        f"{fmt.num(a.token_weighted_mean)} per token (Σ tokens / Σ verify steps) over "
        f"{a.n_requests} requests{spread}; figures are {a.exactness.upper()} ({sources})."
    )


_COUNTERS = {"sglang_prometheus": "SGLang counters", "llamacpp_prometheus": "llama.cpp counters"}


def _server_line(s: ServerAcceptance) -> str:
    w = s.window
    window = "no window figure"
    if w is not None and w.accept_length is not None:
        bound = ", a lower bound: prompt passes counted as steps" if w.lower_bound else ""
        rate = f", drafts accepted {fmt.pct(w.accept_rate)}" if w.accept_rate is not None else ""
        window = (
            f"window accept length {fmt.num(w.accept_length)} from "
            f"{_COUNTERS.get(w.source, w.source)} (Δ generated tokens "
            f"{fmt.num(w.generated_tokens, 0)} / Δ verify steps {fmt.num(w.verify_steps, 0)}"
            f"{rate}{bound})"
        )
    ranks = f", unweighted mean over {s.dp_ranks} DP ranks" if s.dp_ranks > 1 else ""
    cumulative = (
        f"; server cumulative average {fmt.num(s.avg_before)} before, {fmt.num(s.avg_after)} "
        f"after (since start or last flush, warm-up included{ranks})"
        if s.avg_before is not None or s.avg_after is not None
        else ""
    )
    problems = f" [{'; '.join(s.problems)}]" if s.problems else ""
    return f"{s.side.value} server: {window}{cumulative}{problems}."


def _group_table(groups: Sequence[GroupRatio], first: str, caption: str) -> Table:
    rows = tuple(
        (g.label, str(g.n), fmt.ratio(g.e2e), fmt.ratio(g.tpot), fmt.num(g.mean_accept_length))
        for g in groups
    )
    headers = (first, "pairs", "E2E ratio [95% CI]", "TPOT ratio [95% CI]", "mean accept length")
    return Table(headers, rows, caption)


def acceptance_section(report: Report) -> Section:
    blocks: list[str | Table] = [_acceptance_line(a) for a in report.acceptance if a.n_requests]
    if not blocks:
        blocks.append("No record carries a per-request acceptance figure.")
    server = next(s for s in report.server_acceptance if s.side is Role.CANDIDATE)
    blocks.append(_server_line(server))
    cand = next((a for a in report.acceptance if a.side is Role.CANDIDATE), None)
    if cand is not None and cand.token_weighted_mean and server.window_accept_length:
        gap = cand.token_weighted_mean / server.window_accept_length - 1.0
        blocks.append(
            f"Cross-check: per-request {cand.exactness} token-weighted mean "
            f"{cand.token_weighted_mean:.2f} against the server's window figure "
            f"{server.window_accept_length:.2f} ({gap:+.1%}; the server's counters include "
            "every request it finished in the window, warm-up and other clients too)."
        )
    if cand is not None and cand.distribution:
        rows = tuple((f"{low:.2f}", str(n)) for low, n in cand.distribution)
        blocks.append(Table(("accept length from", "requests"), rows, "Candidate distribution"))
    if report.by_acceptance:
        edge = report.break_even_accept_length
        blocks.append(
            f"Speculation paid (median E2E ratio < 1) from accept length {edge:g} upward."
            if edge is not None
            else "No acceptance bin where speculation paid consistently (median E2E ratio < 1)."
        )
        caption = "Speed ratio by the candidate's accept length"
        blocks.append(_group_table(report.by_acceptance, "accept length", caption))
    if report.by_category:
        blocks.append(_group_table(report.by_category, "category", "By prompt category"))
    if report.by_load:
        caption = "By load (candidate's requests in flight at send)"
        blocks.append(_group_table(report.by_load, "in flight", caption))
    return Section("acceptance", "Speculative acceptance", tuple(blocks))


def agreement_section(report: Report) -> Section:
    a = report.agreement
    greedy = {True: "greedy", False: "NOT greedy", None: "sampling unknown"}[a.greedy]
    if a.compared:
        line = (
            f"Outputs identical in {a.matched} of {a.compared} completed pairs "
            f"({fmt.ratio(a.rate)} exact-match rate, Wilson 95%); {greedy}."
        )
    else:
        line = f"No completed pair carries output hashes on both sides; {greedy}."
    blocks: list[str | Table] = [line]
    if a.first_divergence is not None:
        lo, mid, hi = a.first_divergence
        blocks.append(
            f"First divergence (character index) over {a.mismatched_with_text} mismatched "
            f"pairs with text: min {lo:.0f}, median {mid:.0f}, max {hi:.0f}."
        )
    nf = report.noise_floor
    if nf is not None:
        blocks.append(
            f"Noise floor from A/A run dirs ({', '.join(nf.run_dirs)}): E2E ratio "
            f"{fmt.ratio(nf.e2e.interval)} over {nf.e2e.n} pairs; outputs identical in "
            f"{nf.agreement.matched} of {nf.agreement.compared} ({fmt.ratio(nf.agreement.rate)}). "
            f"Verdict margin widened to ±{nf.margin:.1%}."
        )
        judged = judge_against_noise(a, nf.agreement)
        if judged:
            blocks.append(f"Against the noise floor: {judged}.")
    return Section("agreement", "Output agreement and noise floor", tuple(blocks))


def launch_section(report: Report) -> Section:
    prints = ", ".join(f"{side} {fp or 'unknown'}" for side, fp in report.fingerprints)
    algo = report.algorithm or "unknown"
    blocks: list[str | Table] = [f"Candidate algorithm: {algo}. Fingerprints: {prints}."]
    sides = speculating_sides(report)
    if sides:
        blocks.append(sides)
    if report.speculative:
        blocks.append(Table(("setting", "value"), report.speculative, "Candidate speculation"))
    if report.launch_table:
        caption = "Both launches side by side (key settings, then every other difference)"
        blocks.append(Table(("setting", "baseline", "candidate"), report.launch_table, caption))
    if report.launch_differences:
        diffs = tuple((d,) for d in report.launch_differences)
        blocks.append(Table(("non-speculative difference",), diffs, "Launch differences"))
    else:
        blocks.append("No non-speculative launch difference found.")
    rows = tuple(
        (k, "see the workload table below" if k == "workload" and report.workload else v)
        for k, v in ((k, v or "NOT STATED") for k, v in report.scope)
    )
    blocks.append(Table(("scope", "value"), rows, "Compatibility scope"))
    if report.workload:
        blocks.append(Table(("workload", "value"), report.workload, "Workload as recorded"))
    return Section("launch", "Launch configurations and scope", tuple(blocks))


def histogram_section(report: Report) -> Section:
    if not report.histograms:
        return Section("histograms", "Histogram logs", ("No histogram logs found.",))
    estimated = {c.side for c in report.plots.cdfs if c.metric == "itl_us" and c.estimated}
    rows = tuple(
        (
            h.side.value,
            f"{h.metric} (estimated)" if h.metric == "itl_us" and h.side in estimated else h.metric,
            fmt.count(h.count),
            fmt.ms(h.p50_us),
            fmt.ms(h.p90_us),
            fmt.ms(h.p99_us),
            fmt.ms(h.p999_us),
            fmt.ms(h.max_us),
            str(h.runs_merged),
        )
        for h in report.histograms
    )
    headers = ("side", "metric", "count", "p50", "p90", "p99", "p99.9", "max", "logs merged")
    caption = "HdrHistogram logs (completed requests, 3 significant digits), merged exactly"
    rule = f"Histogram percentiles: {PERCENTILE_RULE}; warm-up excluded." + (
        " An itl_us row marked estimated rests partly on estimated tokens per chunk."
        if estimated
        else ""
    )
    return Section("histograms", "Histogram logs", (Table(headers, rows, caption), rule))
