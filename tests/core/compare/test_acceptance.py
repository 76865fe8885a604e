"""Acceptance figures: per-request means, exactness, the server's window figure (from real
SGLang 0.5.16 captures) and acceptance joined to the speed ratio."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from specproxy.core.compare.acceptance import (
    AcceptanceSummary,
    acceptance_metrics,
    break_even_accept_length,
    load_bin,
    summarise_acceptance,
)
from specproxy.core.compare.pairing import find_pairs
from specproxy.core.measurement.acceptance_window import server_acceptance
from specproxy.core.records.model import Acceptance, AcceptanceSource, ErrorKind, Role
from specproxy.testing.fabricate import make_records, record
from tests.oracles.acceptance import ratio_by_acceptance, ratio_by_category, ratio_by_load

B, C = Role.BASELINE, Role.CANDIDATE
CAPTURES = Path(__file__).parents[2] / "fixtures" / "sglang-0.5.16"


def _http_body(path: Path) -> bytes:
    """The body of a captured HTTP response (chunked transfer encoding undone)."""
    head, _, rest = path.read_bytes().partition(b"\r\n\r\n")
    if b"chunked" not in head.lower():
        return rest
    out, i = b"", 0
    while True:
        j = rest.index(b"\r\n", i)
        size = int(rest[i:j], 16)
        if size == 0:
            return out
        out += rest[j + 2 : j + 2 + size]
        i = j + 2 + size + 2


def _snapshot(server: str, info: str, metrics: str) -> dict[str, Any]:
    folder = CAPTURES / server
    return {
        "server_info": json.loads(_http_body(folder / info)),
        "metrics_text": _http_body(folder / metrics).decode(),
        "t_unix_s": 0.0,
    }


def _acc(
    length: float,
    verify_ct: int | None = None,
    source: AcceptanceSource = AcceptanceSource.META_INFO,
) -> Acceptance:
    return Acceptance(source=source, accept_length=length, verify_ct=verify_ct)


def test_request_and_token_weighted_means_differ_as_defined() -> None:
    """Request-weighted averages accept lengths; token-weighted is Σ tokens / Σ verify steps."""
    recs = [
        record(C, "1", tokens=100, acceptance=_acc(4.0, 25)),
        record(C, "2", tokens=10, acceptance=_acc(1.0, 10)),
    ]
    a = summarise_acceptance(recs, C)
    assert a.n_requests == 2
    assert a.request_weighted_mean == pytest.approx(2.5)
    assert a.token_weighted_mean == pytest.approx(110 / 35)
    assert a.exactness == "exact"
    assert a.sources == (("meta_info", 2),)
    assert a.distribution == ((1.0, 1), (4.0, 1))


def test_verify_steps_estimated_from_length_when_not_reported() -> None:
    """Without verify_ct a request's steps are tokens / accept length."""
    a = summarise_acceptance([record(C, "1", tokens=90, acceptance=_acc(3.0))], C)
    assert a.token_weighted_mean == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ((AcceptanceSource.CHUNK_ESTIMATE,), "estimated"),
        ((AcceptanceSource.SGLEXT, AcceptanceSource.CHUNK_ESTIMATE), "mixed"),
        ((), "none"),
    ],
)
def test_exactness_says_whether_figures_are_estimated(
    sources: tuple[AcceptanceSource, ...], expected: str
) -> None:
    """Chunk-count estimates are labelled estimated; a mix is labelled mixed."""
    recs = [record(C, str(i), acceptance=_acc(2.0, source=s)) for i, s in enumerate(sources)]
    assert summarise_acceptance(recs, C).exactness == expected


def test_failed_and_warmup_records_carry_no_acceptance() -> None:
    """Failed and warm-up records, and the other side's, are left out of a side's acceptance."""
    failed = record(C, "f", acceptance=_acc(7.0))
    failed = replace(failed, measurement=replace(failed.measurement, error_kind=ErrorKind.TIMEOUT))
    recs = [
        record(C, "w", warmup=True, acceptance=_acc(9.0)),
        record(B, "1", acceptance=_acc(1.0)),
        failed,
    ]
    assert summarise_acceptance(recs, C).n_requests == 0
    assert summarise_acceptance([*recs, record(C, "2", acceptance=_acc(3.0))], C).n_requests == 1


def test_step_histograms_are_summed() -> None:
    """Per-request step histograms of different lengths add element-wise."""
    a1 = Acceptance(source=AcceptanceSource.SGLEXT, accept_length=2.0, histogram=(1, 2))
    a2 = Acceptance(source=AcceptanceSource.SGLEXT, accept_length=3.0, histogram=(0, 1, 5))
    a = summarise_acceptance([record(C, "1", acceptance=a1), record(C, "2", acceptance=a2)], C)
    assert a.step_histogram == (1, 3, 5)


def test_server_window_from_real_sglang_captures() -> None:
    """SGLang 0.5.16 STANDALONE (copy draft, attention off): Δ512 tokens / Δ128 verify calls = 4.0,
    and the cumulative server average after the window is 4.0."""
    before = _snapshot(
        "run_b_attn_off/sa_copy_b", "01_get_server_info_before.http", "06_metrics_before.http"
    )
    after = _snapshot(
        "run_b_attn_off/sa_copy_b", "19_get_server_info_after.http", "21_metrics_after.http"
    )
    s = server_acceptance(C, before, after)
    assert (s.generation_tokens, s.verify_calls) == (512.0, 128.0)
    assert s.window_accept_length == pytest.approx(4.0)
    assert s.avg_before is None
    assert s.avg_after == pytest.approx(4.0)
    assert s.problems == ()


def test_server_window_of_a_baseline_has_no_verify_calls() -> None:
    """The real non-speculative baseline capture has no verify calls: no window figure, and why."""
    before = _snapshot(
        "run_a_init0.1/base", "01_get_server_info_before.http", "06_metrics_before.http"
    )
    after = _snapshot(
        "run_a_init0.1/base", "19_get_server_info_after.http", "21_metrics_after.http"
    )
    s = server_acceptance(B, before, after)
    assert s.window_accept_length is None
    assert s.window is None and s.generation_tokens is None
    assert any("speculation off" in p for p in s.problems)


def test_server_window_missing_snapshots_and_metrics_are_explained() -> None:
    """A missing snapshot or metrics text leaves the figure out and says which."""
    assert "no before snapshot" in server_acceptance(C, None, {"metrics_text": ""}).problems
    s = server_acceptance(C, {"server_info": {}}, {"server_info": {}})
    assert any("--enable-metrics" in p for p in s.problems)
    bad = server_acceptance(C, {"metrics_text": "x{"}, {"metrics_text": "y 1"})
    assert any("unreadable" in p for p in bad.problems)


def test_ratio_by_acceptance_finds_the_break_even() -> None:
    """When the true ratio is 1.6 - 0.3 x accept length, speculation pays from length 2 up."""
    recs = make_records(
        n_pairs=3000,
        sigma=0.05,
        accept=lambda rng: rng.uniform(1.0, 4.0),
        ratio_of_accept=lambda length: 1.6 - 0.3 * length,
        seed=9,
    )
    groups = ratio_by_acceptance(find_pairs(recs).pairs)
    assert [g.label for g in groups][:3] == ["1–1.25", "1.25–1.5", "1.5–1.75"]
    for g in groups:
        assert g.e2e is not None and g.mean_accept_length is not None
        assert g.e2e.point == pytest.approx(1.6 - 0.3 * g.mean_accept_length, abs=0.03)
    assert break_even_accept_length(groups) == 2.0


def test_break_even_is_none_when_speculation_never_pays() -> None:
    """A ratio above 1 in the top bin means no break-even."""
    recs = make_records(
        n_pairs=200, true_ratio=1.2, sigma=0.05, accept=lambda rng: rng.uniform(1, 4)
    )
    assert break_even_accept_length(ratio_by_acceptance(find_pairs(recs).pairs)) is None


def test_ratio_by_load_and_category() -> None:
    """Pairs group into power-of-two load bins and into their prompt categories."""
    assert [load_bin(n)[0] for n in (0, 1, 2, 3, 4, 7, 8, 20)] == [
        "0",
        "1",
        "2–3",
        "2–3",
        "4–7",
        "4–7",
        "8–15",
        "16–31",
    ]
    recs = make_records(n_pairs=100, true_ratio=0.9, categories=("code", "chat"), seed=2)
    pairs = find_pairs(recs).pairs
    by_cat = ratio_by_category(pairs)
    assert [(g.label, g.n) for g in by_cat] == [("chat", 50), ("code", 50)]
    by_load = ratio_by_load(pairs)
    assert sum(g.n for g in by_load) == 100
    assert [g.low for g in by_load] == sorted(g.low for g in by_load)


def test_acceptance_metrics_section_keys_and_none_without_lengths() -> None:
    """acceptance_metrics: the one experiment.json / experiments.jsonl section, or None."""
    summary = AcceptanceSummary(
        side=Role.CANDIDATE,
        n_requests=3,
        request_weighted_mean=2.5,
        token_weighted_mean=2.75,
        quantiles=(2.0, 2.5, 3.0),
        sources=(("meta_info", 3),),
        exactness="exact",
        distribution=(),
        step_histogram=None,
    )
    assert acceptance_metrics(summary, synthetic_prompts=True) == {
        "mean_accept_length": 2.5,
        "mean_accept_length_token_weighted": 2.75,
        "requests_with_acceptance": 3,
        "exactness": "exact",
        "sources": {"meta_info": 3},
        "synthetic_prompts": True,
    }
    empty = replace(summary, n_requests=0, request_weighted_mean=None, token_weighted_mean=None)
    assert acceptance_metrics(empty, synthetic_prompts=None) is None
