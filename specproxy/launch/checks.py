"""The pure half of preflight: check results, the speculation and diff checks, the table.

No I/O: takes launch configs and diffs that ``preflight`` has already read, returns
``CheckResult`` rows. ``render_table`` is the terminal form ``specproxy check`` prints.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from specproxy.core.compare.distribution import describe_lossy, lossy_settings
from specproxy.core.launch.config import ConfigDiff, LaunchConfig
from specproxy.launch import algorithms


class CheckStatus(StrEnum):
    PASS = "PASS"  # noqa: S105 - a check status, not a password
    WARN = "WARN"
    FAIL = "FAIL"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One row of the preflight table; ``side`` is None for checks across both servers."""

    name: str
    status: CheckStatus
    detail: str
    side: str | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a check has a name")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "side": self.side,
            "status": str(self.status),
            "detail": self.detail,
        }


def _spec_summary(config: LaunchConfig) -> str:
    args = config.server_args
    parts = [str(config.speculative_algorithm)]
    for key, label in (
        ("speculative_num_steps", "steps"),
        ("speculative_eagle_topk", "topk"),
        ("speculative_num_draft_tokens", "draft tokens"),
    ):
        if args.get(key) is not None:
            parts.append(f"{label} {args[key]}")
    if args.get("speculative_draft_model_path"):
        parts.append(f"draft {args['speculative_draft_model_path']}")
    return ", ".join(parts)


def _baseline_row(config: LaunchConfig) -> CheckResult:
    if config.speculation:
        detail = f"server reports speculative_algorithm {config.speculative_algorithm}; the baseline must run without speculation"
        return CheckResult("speculation_off", CheckStatus.FAIL, detail, "baseline")
    return CheckResult(
        "speculation_off", CheckStatus.PASS, "speculative_algorithm unset", "baseline"
    )


def lossless_row(config: LaunchConfig) -> CheckResult:
    """Accept thresholds below 1.0 make the candidate lossy by configuration (WARN: the
    comparison can still run; the report's output-distribution check measures the shift)."""
    lossy = lossy_settings(config.server_args)
    if not lossy:
        detail = "accept thresholds 1.0: acceptance is lossless"
        return CheckResult("lossless_acceptance", CheckStatus.PASS, detail, "candidate")
    detail = (
        f"lossy by configuration: {describe_lossy(lossy)} below 1.0 accept draft tokens the "
        "target would reject, so sampled outputs are no longer drawn from the target model; "
        "measure the shift with `specproxy replay --temperature T --score-requests N` (the "
        "report's output-distribution check)"
    )
    return CheckResult("lossless_acceptance", CheckStatus.WARN, detail, "candidate")


def _candidate_rows(config: LaunchConfig) -> list[CheckResult]:
    if not config.speculation:
        detail = "server reports no speculative_algorithm: speculation is off on the candidate"
        return [CheckResult("speculation_on", CheckStatus.FAIL, detail, "candidate")]
    rows = [CheckResult("speculation_on", CheckStatus.PASS, _spec_summary(config), "candidate")]
    rows.append(lossless_row(config))
    name = str(config.speculative_algorithm)
    known = algorithms.known_algorithms(config.version)
    if name in known:
        rows.append(
            CheckResult(
                "algorithm_known",
                CheckStatus.PASS,
                f"{name} is an SGLang {config.version} algorithm",
                "candidate",
            )
        )
    else:
        detail = f"{name} is not an algorithm SGLang {config.version} knows (known: {', '.join(sorted(known))})"
        rows.append(CheckResult("algorithm_known", CheckStatus.FAIL, detail, "candidate"))
    return rows


def expected_algorithm_row(config: LaunchConfig, expected: str) -> CheckResult:
    """Does the operator's label fit what the candidate runs and what its model supports?"""
    label = expected.strip().upper()
    name = "expected_algorithm"
    if label not in algorithms.accepted_names(config.version):
        known = ", ".join(sorted(algorithms.accepted_names(config.version)))
        detail = f"{label} is not an algorithm SGLang {config.version} knows (known: {known}): incompatible"
        return CheckResult(name, CheckStatus.FAIL, detail, "candidate")
    architectures = list((config.data.get("model_info") or {}).get("architectures") or [])
    if label == "NEXTN" and not algorithms.supports_mtp(architectures):
        detail = f"NEXTN needs MTP/NextN layers; model architectures {architectures or 'unknown'} have none SGLang can draft from: incompatible"
        return CheckResult(name, CheckStatus.FAIL, detail, "candidate")
    want, have = algorithms.canonical_algorithm(label), config.speculative_algorithm
    if want != have:
        alias = f" ({label} is reported as {want})" if want != label else ""
        detail = f"expected {label}{alias}, server reports {have}"
        return CheckResult(name, CheckStatus.FAIL, detail, "candidate")
    alias = f" (SGLang reports {label} as {want})" if want != label else ""
    return CheckResult(name, CheckStatus.PASS, f"server runs {have}{alias}", "candidate")


def speculation_checks(
    baseline: LaunchConfig | None, candidate: LaunchConfig | None, expected: str | None
) -> list[CheckResult]:
    """Speculation off on the baseline, on (with a known algorithm) on the candidate."""
    rows: list[CheckResult] = []
    if baseline is not None:
        rows.append(_baseline_row(baseline))
    if candidate is not None:
        rows += _candidate_rows(candidate)
        if expected:
            rows.append(expected_algorithm_row(candidate, expected))
    return rows


def diff_checks(diff: ConfigDiff) -> list[CheckResult]:
    """One summary row, one row per speculative change set, one row per other difference."""
    if diff.only_speculative:
        summary = CheckResult(
            "matched_baseline", CheckStatus.PASS, "only speculative settings differ"
        )
    elif diff.matched:
        keys = ", ".join(d.key for d in diff.other)
        summary = CheckResult(
            "matched_baseline", CheckStatus.WARN, f"implicit differences only: {keys}"
        )
    else:
        keys = ", ".join(d.key for d in diff.blocking)
        summary = CheckResult(
            "matched_baseline", CheckStatus.FAIL, f"not a matched baseline: {keys}"
        )
    rows = [summary]
    if diff.speculative:
        keys = ", ".join(d.key.removeprefix("speculative_") for d in diff.speculative)
        rows.append(CheckResult("speculative_settings", CheckStatus.PASS, f"differ: {keys}"))
    for d in diff.other:
        status = CheckStatus.FAIL if d.blocking else CheckStatus.WARN
        detail = d.describe().removeprefix(f"{d.key}: ")
        rows.append(CheckResult(f"diff:{d.key}", status, detail))
    return rows


def render_table(checks: Sequence[CheckResult], *, detail_width: int = 80) -> str:
    """Aligned rows ``CHECK SIDE STATUS DETAIL`` (long details wrap) and a count line."""
    header = CheckResult("CHECK", CheckStatus.PASS, "DETAIL", "SIDE")
    width = max(len(c.name) for c in [header, *checks])
    lines: list[str] = []
    for index, c in enumerate([header, *checks]):
        status = "STATUS" if index == 0 else str(c.status)
        wrapped = textwrap.wrap(c.detail, detail_width, break_on_hyphens=False) or [""]
        lines.append(f"{c.name:<{width}}  {c.side or 'both':<9}  {status:<6}  {wrapped[0]}")
        pad = " " * (width + 21)
        lines += [pad + more for more in wrapped[1:]]
    counts = {s: sum(1 for c in checks if c.status is s) for s in CheckStatus}
    lines.append(
        f"{counts[CheckStatus.PASS]} passed, {counts[CheckStatus.WARN]} warnings,"
        f" {counts[CheckStatus.FAIL]} failed"
    )
    return "\n".join(lines)
