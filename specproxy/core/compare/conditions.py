"""The preconditions of a recommendation (``docs/contract.md``), each checked and explained.

Pure. Each function returns one ``Condition`` whose ``detail`` names what was found
or exactly what is missing, so the report can list the gaps instead of a recommendation.
The contract's six (``docs/contract.md``), plus ``candidate_fails_no_more_often``:
counting failures is not enough when the candidate fails measurably more often than the
baseline (``core.compare.failures``), and ``acceptance_not_simulated``: a candidate whose
launch record shows SGLang's acceptance-faking variables measures nothing about its draft.
Under sampling exact match says nothing, so ``same_output_distribution`` (the check of
``core.compare.distribution``) stands in for greedy agreement: the recommendation requires
"same distribution", as it requires compared outputs under greedy decoding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specproxy.core.compare.agreement import OutputAgreement
from specproxy.core.compare.distribution import DistributionCheck
from specproxy.core.compare.failures import FailureComparison, compare_failures
from specproxy.core.compare.launch_checks import (
    SCOPE_KEYS,
    SideLaunch,
    completeness_gaps,
    other_differences,
)
from specproxy.core.compare.pairing import PairingCounts
from specproxy.core.launch.command import launch_source
from specproxy.core.launch.config import LaunchConfig
from specproxy.core.records.model import Role, SendMode

LAUNCH_COMPLETE = "launch_configs_complete"
RAW_SAVED = "raw_measurements_saved"
FAILURES_COUNTED = "failures_counted_both_sides"
FAILURE_RATES = "candidate_fails_no_more_often"
OUTPUTS_COMPARED = "greedy_outputs_compared"
MATCHED = "matched_baseline"
SCOPE = "compatibility_scope_stated"
REAL_ACCEPTANCE = "acceptance_not_simulated"
SAME_DISTRIBUTION = "same_output_distribution"
SIMULATED_ACCEPTANCE_ENV = ("SGLANG_SIMULATE_ACC_LEN", "SGLANG_SIMULATE_ACC_METHOD")
"""SGLang's variables that fake acceptance (``srt/environ.py``, read in
``speculative/spec_utils.py``): nothing in ``/server_info`` or the log shows them, so only
the launch record can."""


@dataclass(frozen=True, slots=True)
class Condition:
    """One precondition of a recommendation; ``detail`` says what was found or is missing."""

    key: str
    met: bool
    detail: str

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a condition has a key")


def launch_complete(experiment: Mapping[str, Any], base: SideLaunch, cand: SideLaunch) -> Condition:
    gaps = completeness_gaps(base, experiment) + completeness_gaps(cand, experiment)
    if gaps:
        return Condition(LAUNCH_COMPLETE, False, "; ".join(gaps))
    sources = ", ".join(
        f"{side.side.value} {launch_source(side.config) or 'unknown'}" for side in (base, cand)
    )
    detail = f"both commands, versions and revisions recorded (commands from: {sources})"
    return Condition(LAUNCH_COMPLETE, True, detail)


def raw_saved(requests_file_found: bool, per_side: Mapping[Role, int]) -> Condition:
    if not requests_file_found:
        return Condition(RAW_SAVED, False, "requests.jsonl not found")
    empty = [r.value for r in Role if per_side.get(r, 0) == 0]
    if empty:
        return Condition(RAW_SAVED, False, f"no request records for: {', '.join(empty)}")
    counts = ", ".join(f"{r.value} {per_side.get(r, 0)}" for r in Role)
    return Condition(RAW_SAVED, True, f"requests.jsonl holds {counts} records")


def failures_counted(
    status: str | None,
    mode: SendMode | None,
    pairing: PairingCounts,
    per_side: Mapping[Role, int],
) -> Condition:
    """Every request left a record on both sides (a finished run, no half-recorded pairs),
    and the one-sided failures entered the paired ratio; the detail says how many."""
    problems: list[str] = []
    if status != "completed":
        problems.append(f"run status is {status or 'unknown'}, not completed")
    if any(per_side.get(r, 0) == 0 for r in Role):
        problems.append("one side has no records at all")
    if mode in (SendMode.MIRROR, SendMode.ALTERNATE) and pairing.incomplete:
        problems.append(f"{pairing.incomplete} pair ids have a record on one side only")
    if problems:
        return Condition(FAILURES_COUNTED, False, "; ".join(problems))
    counted = (
        f"every request has its record, failed ones included; in the paired ratio "
        f"{pairing.candidate_failed_only} candidate-only failures count as +inf, "
        f"{pairing.baseline_failed_only} baseline-only as 0, {pairing.both_failed} "
        "both-failed pairs are counted, not ranked"
    )
    failures = compare_failures(pairing) if pairing.pairs else None
    if failures is not None and failures.difference is not None and failures.candidate_fails_more:
        d = failures.difference
        counted += (
            f"; the candidate fails measurably more often ({d.point:+.1%} [95% CI "
            f"{d.low:+.1%}, {d.high:+.1%}]): see {FAILURE_RATES}"
        )
    return Condition(FAILURES_COUNTED, True, counted)


def failure_rates(failures: FailureComparison) -> Condition:
    """Met unless the candidate fails measurably more often (interval above 0)."""
    if failures.difference is None:
        return Condition(FAILURE_RATES, False, "no pairs: the failure rates cannot be compared")
    if failures.candidate_fails_more:
        return Condition(FAILURE_RATES, False, "candidate fails more often: " + failures.describe())
    return Condition(FAILURE_RATES, True, failures.describe())


def outputs_compared(
    agreement: OutputAgreement, distribution: DistributionCheck | None = None
) -> Condition:
    """Greedy outputs were compared; a disagreement passes because the report states it.
    Under sampling, with a distribution check given, the comparison is that check's
    (``same_distribution``)."""
    if agreement.greedy is None:
        return Condition(OUTPUTS_COMPARED, False, "sampling conditions not recorded")
    if not agreement.greedy and distribution is not None:
        return Condition(
            OUTPUTS_COMPARED, True,
            f"sampling is not greedy: exact match says nothing; the output distribution is "
            f"checked instead ({SAME_DISTRIBUTION})",
        )  # fmt: skip
    if not agreement.greedy:
        return Condition(
            OUTPUTS_COMPARED, False, "sampling is not greedy: outputs cannot be compared"
        )
    if agreement.compared == 0:
        return Condition(OUTPUTS_COMPARED, False, "no completed pair carries output hashes")
    if agreement.mismatched:
        detail = (
            f"{agreement.mismatched} of {agreement.compared} greedy outputs differ "
            "(reported in the output-agreement section)"
        )
        return Condition(OUTPUTS_COMPARED, True, detail)
    return Condition(OUTPUTS_COMPARED, True, f"all {agreement.compared} greedy outputs agree")


def same_distribution(distribution: DistributionCheck) -> Condition:
    """Under sampling: met only when the check says "same distribution"."""
    return Condition(SAME_DISTRIBUTION, distribution.same, distribution.text)


def matched_baseline(
    experiment: Mapping[str, Any], base: SideLaunch, cand: SideLaunch
) -> Condition:
    diffs = other_differences(experiment, base, cand)
    if diffs is None:
        return Condition(MATCHED, False, "launch configs missing: the match cannot be checked")
    blocking = [d.text for d in diffs if d.blocking]
    if blocking:
        others = [d.text for d in diffs if not d.blocking]
        also = f"; also differing (not blocking): {'; '.join(others)}" if others else ""
        return Condition(MATCHED, False, "not a matched baseline: " + "; ".join(blocking) + also)
    if diffs:
        named = "; ".join(d.text for d in diffs)
        return Condition(MATCHED, True, f"speculative settings differ, plus (named): {named}")
    return Condition(MATCHED, True, "the configs differ only in speculative settings")


def scope_stated(scope: Mapping[str, str | None]) -> Condition:
    missing = [k for k in SCOPE_KEYS if not scope.get(k)]
    if missing:
        return Condition(SCOPE, False, "scope lacks: " + ", ".join(missing))
    return Condition(SCOPE, True, "; ".join(f"{k}: {scope[k]}" for k in SCOPE_KEYS))


def faked_acceptance(config: LaunchConfig | None) -> list[str] | None:
    """The ``KEY=VALUE`` settings of SGLang's acceptance-faking variables in the launch
    record's environment; ``None`` when the config holds no launch record (then they cannot
    be seen: nothing in ``/server_info`` or the server's log shows them)."""
    launcher = (config.data.get("launcher") or {}) if config is not None else {}
    env = launcher.get("env") if isinstance(launcher, Mapping) else None
    if not isinstance(env, Mapping):
        return None
    return [f"{k}={env[k]}" for k in SIMULATED_ACCEPTANCE_ENV if k in env]


def real_acceptance(cand: SideLaunch) -> Condition:
    """The candidate was not started with a variable that fakes SGLang's acceptance (on the
    kit's real NEXTN server ``SGLANG_SIMULATE_ACC_LEN=2.5`` raised the accept length from 1.03
    to 2.46 and turned the greedy output to garbage). Met when the launch record shows none;
    without a launch record it cannot be seen, and the detail says so."""
    faked = faked_acceptance(cand.config)
    if faked is None:
        return Condition(
            REAL_ACCEPTANCE, True,
            "no launch record: a variable faking acceptance (SGLANG_SIMULATE_ACC_LEN) would not "
            "show; start the pair with `specproxy launch` to record the environment",
        )  # fmt: skip
    if faked:
        return Condition(
            REAL_ACCEPTANCE, False,
            f"the candidate was started with {', '.join(faked)}: SGLang fakes its acceptance, so "
            "its speed says nothing about this draft",
        )  # fmt: skip
    return Condition(REAL_ACCEPTANCE, True, "the launch environment fakes no acceptance")


def evaluate(
    *,
    experiment: Mapping[str, Any],
    base: SideLaunch,
    cand: SideLaunch,
    requests_file_found: bool,
    per_side: Mapping[Role, int],
    mode: SendMode | None,
    pairing: PairingCounts,
    agreement: OutputAgreement,
    scope: Mapping[str, str | None],
    distribution: DistributionCheck | None = None,
) -> Sequence[Condition]:
    """All conditions in the contract's order, the failure-rate comparison after failures
    counted; under sampling with a distribution check, ``same_output_distribution`` after the
    outputs' comparison."""
    status = experiment.get("status")
    sampled = agreement.greedy is False and distribution is not None
    extra = (same_distribution(distribution),) if sampled and distribution is not None else ()
    return (
        launch_complete(experiment, base, cand),
        raw_saved(requests_file_found, per_side),
        failures_counted(str(status) if status else None, mode, pairing, per_side),
        failure_rates(compare_failures(pairing)),
        outputs_compared(agreement, distribution),
        *extra,
        matched_baseline(experiment, base, cand),
        real_acceptance(cand),
        scope_stated(scope),
    )
