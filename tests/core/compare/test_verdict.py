"""The verdict rule, each recommendation condition and each path to "no recommendation"."""

from __future__ import annotations

from typing import Any

import pytest

from specproxy.core.compare import conditions as cc
from specproxy.core.compare.agreement import OutputAgreement
from specproxy.core.compare.conditions import Condition
from specproxy.core.compare.launch_checks import SideLaunch, read_side, scope
from specproxy.core.compare.pairing import Metric, PairedRatio, find_pairs
from specproxy.core.compare.verdict import (
    SIMULATED,
    VerdictLabel,
    decide,
    noise_margin,
    recommend,
)
from specproxy.core.launch.config import with_launcher
from specproxy.core.records.model import Role, SendMode
from specproxy.core.statistics.stats import Interval
from specproxy.testing.fabricate import experiment, record

B, C = Role.BASELINE, Role.CANDIDATE
SCOPE = {"model": "m", "revision": "r", "server_version": "v", "gpu": "g", "precision": "p",
         "load_range": "0-8", "workload": "w"}  # fmt: skip


def _ratio(low: float, high: float, n: int = 100, units: int = 10) -> PairedRatio:
    iv = Interval((low + high) / 2, low, high, n, units=units, unit="block pair")
    return PairedRatio(Metric.E2E, iv, n, 0.5, units=units, clean_units=units)


@pytest.mark.parametrize(
    ("low", "high", "label"),
    [
        (0.80, 0.97, VerdictLabel.FASTER),
        (1.03, 1.20, VerdictLabel.SLOWER),
        (0.985, 1.015, VerdictLabel.NO_DIFFERENCE),
        (0.98, 1.02, VerdictLabel.NO_DIFFERENCE),
        (0.95, 0.99, VerdictLabel.INCONCLUSIVE),
        (0.90, 1.10, VerdictLabel.INCONCLUSIVE),
        (1.01, 1.05, VerdictLabel.INCONCLUSIVE),
    ],
)
def test_verdict_rule(low: float, high: float, label: VerdictLabel) -> None:
    """Below 1-m faster, above 1+m slower, inside [1-m, 1+m] no difference, else inconclusive."""
    assert decide(_ratio(low, high), mode=SendMode.MIRROR, margin=0.02).label is label


def test_too_few_pairs_is_inconclusive() -> None:
    """A clear effect over fewer than min_pairs pairs is still inconclusive."""
    v = decide(_ratio(0.5, 0.6, n=29), mode=SendMode.ALTERNATE, min_pairs=30)
    assert v.label is VerdictLabel.INCONCLUSIVE
    assert "29" in v.reason
    assert decide(None, mode=SendMode.MIRROR).label is VerdictLabel.INCONCLUSIVE


@pytest.mark.parametrize("mode", [SendMode.SPLIT, SendMode.PASSTHROUGH])
def test_unpaired_modes_get_no_verdict(mode: SendMode) -> None:
    """Split and passthrough runs have no pairs, so no verdict (SPEC: paired ratios only)."""
    v = decide(_ratio(0.5, 0.6), mode=mode)
    assert v.label is VerdictLabel.INCONCLUSIVE
    assert "no pairs" in v.reason


def test_noise_floor_widens_the_margin() -> None:
    """An A/A interval reaching 0.94 widens a 2% margin to 6%, turning 'faster' inconclusive."""
    aa = _ratio(0.94, 1.03)
    margin = noise_margin(0.02, aa)
    assert margin == pytest.approx(0.06)
    assert (
        decide(_ratio(0.90, 0.95), mode=SendMode.MIRROR, margin=margin).label
        is VerdictLabel.INCONCLUSIVE
    )
    assert noise_margin(0.02, _ratio(0.995, 1.005)) == 0.02
    assert noise_margin(0.02, None) == 0.02


def _all_met() -> list[Condition]:
    return [Condition(k, True, "ok") for k in ("a", "b")]


def test_recommendation_when_every_condition_holds() -> None:
    """Every condition met and a faster verdict: a recommendation naming algorithm and scope."""
    v = decide(_ratio(0.80, 0.90), mode=SendMode.ALTERNATE)
    rec = recommend(v, _all_met(), simulated=False, aa=False, algorithm="EAGLE3", scope=SCOPE)
    assert rec.text is not None
    assert rec.text.startswith("Use EAGLE3")
    assert "gpu: g" in rec.text
    slower = recommend(decide(_ratio(1.1, 1.2), mode=SendMode.ALTERNATE), _all_met(),
                       simulated=False, aa=False, algorithm="NGRAM", scope=SCOPE)  # fmt: skip
    assert slower.text is not None and slower.text.startswith("Keep the baseline")


def test_simulated_gets_only_simulated() -> None:
    """A simulated experiment's recommendation is 'simulated', whatever the data say."""
    v = decide(_ratio(0.80, 0.90), mode=SendMode.ALTERNATE)
    rec = recommend(v, _all_met(), simulated=True, aa=False, algorithm="EAGLE3", scope=SCOPE)
    assert rec.text == SIMULATED


def test_no_recommendation_for_aa_missing_or_inconclusive() -> None:
    """An A/A run, a missing condition or an inconclusive verdict give no recommendation."""
    good = decide(_ratio(0.80, 0.90), mode=SendMode.ALTERNATE)
    aa = recommend(good, _all_met(), simulated=False, aa=True, algorithm=None, scope=SCOPE)
    assert aa.text is None and "A/A" in aa.reason
    missing = [Condition("matched_baseline", False, "not a matched baseline: dtype")]
    rec = recommend(good, missing, simulated=False, aa=False, algorithm=None, scope=SCOPE)
    assert rec.text is None
    assert rec.missing == tuple(missing)
    assert "matched_baseline" in rec.reason
    unclear = decide(_ratio(0.9, 1.1), mode=SendMode.ALTERNATE)
    rec = recommend(unclear, _all_met(), simulated=False, aa=False, algorithm=None, scope=SCOPE)
    assert rec.text is None and "inconclusive" in rec.reason


# --- the six conditions, each missing path -------------------------------------------------


def _sides(exp: dict[str, Any]) -> tuple[Any, Any]:
    return read_side(exp, B), read_side(exp, C)


def test_launch_complete_met_for_full_configs() -> None:
    """Commands, versions and both revisions recorded on both sides: the condition holds and says so."""
    exp = experiment()
    condition = cc.launch_complete(exp, *_sides(exp))
    assert condition == Condition(
        cc.LAUNCH_COMPLETE,
        True,
        "both commands, versions and revisions recorded"
        " (commands from: baseline server, candidate server)",
    )


@pytest.mark.parametrize(
    ("extra", "gap"),
    [
        ({"launch_command": None}, "full launch command not recorded"),
        ({"version": None}, "server version unknown"),
        ({"revision": None}, "target model revision unknown"),
    ],
)
def test_launch_incomplete_names_the_gap(extra: dict[str, Any], gap: str) -> None:
    """A missing command, version or target revision is named for the side that lacks it."""
    exp = experiment(base_extra=extra)
    cond = cc.launch_complete(exp, *_sides(exp))
    assert not cond.met
    assert f"baseline: {gap}" in cond.detail


def test_launch_incomplete_without_draft_revision_or_config() -> None:
    """A draft model without a revision, or no launch config at all, fails the condition."""
    exp = experiment(cand_extra={"speculative_draft_model_revision": None})
    assert "candidate: draft model revision unknown" in cc.launch_complete(exp, *_sides(exp)).detail
    assert "no baseline launch config" in cc.launch_complete({}, *_sides({})).detail
    tampered = experiment()
    tampered["candidate"]["launch"]["fingerprint"] = "000000000000"
    assert "unreadable" in cc.launch_complete(tampered, *_sides(tampered)).detail


def test_raw_measurements_condition() -> None:
    """No requests.jsonl, or no records for one side, fails the raw-measurements condition."""
    assert not cc.raw_saved(False, {B: 5, C: 5}).met
    cond = cc.raw_saved(True, {B: 5, C: 0})
    assert not cond.met and "candidate" in cond.detail
    assert cc.raw_saved(True, {B: 5, C: 5}).met


def test_failures_counted_condition() -> None:
    """An unfinished run or a pair id with one side missing fails; a finished complete run holds."""
    full = find_pairs([record(B, "1"), record(C, "1")]).counts
    half = find_pairs([record(B, "1"), record(C, "1"), record(B, "2")]).counts
    counts = {B: 2, C: 2}
    assert cc.failures_counted("completed", SendMode.MIRROR, full, counts).met
    running = cc.failures_counted("running", SendMode.MIRROR, full, counts)
    assert not running.met and "running" in running.detail
    lost = cc.failures_counted("completed", SendMode.MIRROR, half, counts)
    assert not lost.met and "1 pair ids" in lost.detail
    assert not cc.failures_counted("completed", SendMode.SPLIT, full, {B: 2, C: 0}).met


def _agreement(compared: int, matched: int, greedy: bool | None) -> OutputAgreement:
    return OutputAgreement(compared, matched, None, greedy, 0, None)


def test_outputs_compared_condition() -> None:
    """Unknown or non-greedy sampling, or no hashes, fail; a reported disagreement passes."""
    assert "not recorded" in cc.outputs_compared(_agreement(10, 10, None)).detail
    assert "not greedy" in cc.outputs_compared(_agreement(10, 10, False)).detail
    assert not cc.outputs_compared(_agreement(0, 0, True)).met
    disagree = cc.outputs_compared(_agreement(10, 7, True))
    assert disagree.met and "3 of 10" in disagree.detail
    assert cc.outputs_compared(_agreement(10, 10, True)).met


def test_matched_baseline_lists_each_other_difference() -> None:
    """A non-speculative difference (dtype, memory fraction) makes it not a matched baseline."""
    exp = experiment(cand_extra={"dtype": "float16", "mem_fraction_static": 0.3})
    cond = cc.matched_baseline(exp, *_sides(exp))
    assert not cond.met
    assert cond.detail.startswith("not a matched baseline")
    blocking, _, also = cond.detail.partition("also differing (not blocking)")
    assert "dtype" in blocking and "mem_fraction_static" not in blocking
    assert "mem_fraction_static" in also
    same = experiment()
    assert cc.matched_baseline(same, *_sides(same)).met
    assert not cc.matched_baseline({}, *_sides({})).met


def test_matched_baseline_prefers_stored_launch_diff() -> None:
    """A stored launch_diff is used as written: a blocking entry fails the condition."""
    exp = experiment()
    exp["launch_diff"] = {
        "other": [{"key": "tp_size", "baseline": 1, "candidate": 2, "blocking": True}]
    }
    cond = cc.matched_baseline(exp, *_sides(exp))
    assert not cond.met and "tp_size" in cond.detail
    exp["launch_diff"] = {
        "other": [
            {"key": "served_model_name", "baseline": "a", "candidate": "b", "blocking": False}
        ]
    }
    assert cc.matched_baseline(exp, *_sides(exp)).met


def test_scope_condition_names_missing_entries() -> None:
    """A scope without GPU or load range fails and names them."""
    exp = experiment(facts={"precision": "bf16"})
    the_scope = scope(exp, read_side(exp, B), load_range=None)
    cond = cc.scope_stated(the_scope)
    assert not cond.met
    assert "gpu" in cond.detail and "load_range" in cond.detail
    full = scope(experiment(), read_side(experiment(), B), load_range="0-8 in flight")
    assert cc.scope_stated(full).met
    assert full["precision"] == "bf16"


def test_acceptance_faked_by_the_environment_blocks_the_recommendation() -> None:
    """A candidate whose launch record holds SGLANG_SIMULATE_ACC_LEN fails the condition and
    names it; an ordinary environment passes; no launch record passes and says why."""
    exp = experiment()
    config = read_side(exp, C).config
    assert config is not None
    faked = with_launcher(config, {"env": {"SGLANG_SIMULATE_ACC_LEN": "2.5", "CUDA_HOME": "/x"}})
    cond = cc.real_acceptance(SideLaunch(C, faked, None))
    assert not cond.met and "SGLANG_SIMULATE_ACC_LEN=2.5" in cond.detail
    plain = with_launcher(config, {"env": {"CUDA_HOME": "/x"}})
    assert cc.real_acceptance(SideLaunch(C, plain, None)).met
    unknown = cc.real_acceptance(read_side(exp, C))
    assert unknown.met and "no launch record" in unknown.detail
    rec = recommend(
        decide(_ratio(0.8, 0.9), mode=SendMode.ALTERNATE),
        [cond], simulated=False, aa=False, algorithm="EAGLE", scope=SCOPE,
    )  # fmt: skip
    assert rec.text is None and cc.REAL_ACCEPTANCE in rec.reason
