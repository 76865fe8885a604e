"""The proxy's own counters, as ``proxy.records.MetricUpdates`` writes them: status JSON per
side and Prometheus text."""

from __future__ import annotations

from pathlib import Path

import pytest

from specproxy.core.protocol.prometheus import parse_exposition
from specproxy.core.records.model import (
    Acceptance,
    AcceptanceSource,
    ErrorKind,
    Measurement,
    Role,
    Route,
)
from specproxy.proxy.metrics import ProxyMetrics
from specproxy.proxy.records import MetricUpdates


def test_counts_in_flight_completed_failed_and_dropped() -> None:
    """Started, finished, failed and dropped requests show up per side in the status."""
    metrics = ProxyMetrics()
    updates = MetricUpdates(metrics)
    updates.started(Role.BASELINE, shadow=False)
    updates.started(Role.CANDIDATE, shadow=True)
    updates.started(Role.CANDIDATE, shadow=True)
    assert metrics.status()["candidate"]["in_flight"] == 2
    updates.finished(
        Role.BASELINE, Route.CHAT, Measurement(status=200, ttft_us=1500, e2e_us=9000), shadow=False
    )
    failed = Measurement(error_kind=ErrorKind.TIMEOUT, error_message="deadline")
    updates.finished(Role.CANDIDATE, Route.CHAT, failed, shadow=True)
    updates.shadow_dropped(Role.CANDIDATE, Route.CHAT)
    status = metrics.status()
    assert status["baseline"] == {
        "in_flight": 0,
        "in_flight_primary": 0,
        "in_flight_shadow": 0,
        "completed": 1,
        "failed": 0,
        "failed_by_kind": {},
        "shadow_dropped": 0,
        "output_tokens": 0,
        "accept_length": None,
    }
    assert status["candidate"]["in_flight_shadow"] == 1
    assert status["candidate"]["failed_by_kind"] == {"timeout": 1, "shadow_dropped": 1}
    assert status["candidate"]["shadow_dropped"] == 1


def test_prometheus_text_parses_and_carries_the_series() -> None:
    """The exposition parses as Prometheus text and holds requests, drops and histograms."""
    metrics = ProxyMetrics()
    updates = MetricUpdates(metrics)
    for ttft_us in (3000, 30000, 400000):
        updates.started(Role.BASELINE, shadow=False)
        m = Measurement(status=200, ttft_us=ttft_us, e2e_us=ttft_us * 2)
        updates.finished(Role.BASELINE, Route.GENERATE, m, shadow=False)
    updates.shadow_dropped(Role.CANDIDATE, Route.GENERATE)
    exposition = parse_exposition(metrics.render())
    assert exposition.types["specproxy_ttft_seconds"] == "histogram"
    assert exposition.total("specproxy_requests_total", outcome="ok") == 3
    assert exposition.total("specproxy_shadow_dropped_total", side="candidate") == 1
    buckets = {s.label("le"): s.value for s in exposition.named("specproxy_ttft_seconds_bucket")}
    assert buckets["0.005"] == 1
    assert buckets["0.05"] == 2
    assert buckets["+Inf"] == 3


def _streamed(side_tokens: tuple[int, ...], accept: Acceptance | None) -> Measurement:
    """A successful stream whose events carried ``side_tokens`` tokens, 10 ms apart."""
    offsets = tuple(5000 + 10_000 * i for i in range(len(side_tokens)))
    total = sum(side_tokens)
    return Measurement(
        status=200,
        ttft_us=offsets[0],
        e2e_us=offsets[-1],
        tpot_us=(offsets[-1] - offsets[0]) // (total - 1),
        chunk_offsets_us=offsets,
        chunk_tokens=side_tokens,
        completion_tokens=total,
        acceptance=accept,
    )


def test_tokens_tpot_itl_and_accept_length_per_side() -> None:
    """Output tokens are counted per side, TPOT and per-token latency are histograms (one ITL
    observation per token), and the accept length is tokens over verify steps per source."""
    metrics = ProxyMetrics()
    updates = MetricUpdates(metrics)
    server = Acceptance(AcceptanceSource.META_INFO, accept_length=3.0)
    estimate = Acceptance(AcceptanceSource.CHUNK_ESTIMATE, accept_length=1.0)
    for side, tokens, accept in (
        (Role.CANDIDATE, (1, 3, 3, 3), server),  # 10 tokens, 10/3 steps
        (Role.CANDIDATE, (1, 2), Acceptance(AcceptanceSource.SGLEXT, accept_length=1.5)),
        (Role.BASELINE, (1, 1, 1), estimate),
    ):
        updates.started(side, shadow=side is Role.CANDIDATE)
        updates.finished(side, Route.CHAT, _streamed(tokens, accept), shadow=side is Role.CANDIDATE)
    exposition = parse_exposition(metrics.render())
    assert exposition.total("specproxy_output_tokens_total", side="candidate") == 13
    assert exposition.total("specproxy_output_tokens_total", side="baseline") == 3
    itl = exposition.total("specproxy_itl_seconds_count", side="candidate")
    assert itl == 3 * 3 + 2  # the tokens after each choice's first event
    assert exposition.total("specproxy_tpot_seconds_count", side="candidate") == 2
    steps = exposition.total("specproxy_spec_steps_total", side="candidate", source="server")
    assert steps is not None and abs(steps - (10 / 3 + 3 / 1.5)) < 1e-9
    gauge = exposition.total("specproxy_accept_length", side="candidate", source="server")
    assert gauge is not None and abs(gauge - 13 / steps) < 1e-9
    assert (
        exposition.total("specproxy_accept_length", side="baseline", source="chunk_estimate") == 1
    )
    assert metrics.status()["candidate"]["accept_length"] == round(13 / steps, 4)
    assert metrics.status()["baseline"]["output_tokens"] == 3


def test_batched_itl_equals_one_observe_per_token() -> None:
    """The per-request ITL batch gives the buckets and sum that prometheus_client's own
    ``observe``, called once per token, gives (the batch writes its values directly)."""
    from prometheus_client import CollectorRegistry, Histogram

    from specproxy.proxy.metrics import ITL_SECONDS, TOKEN_BUCKETS_S

    tokens = (1, 2, 1, 4, 1, 1, 3)
    offsets = (1000, 1900, 4000, 4500, 60_000, 61_000, 2_500_000)
    m = Measurement(
        status=200,
        ttft_us=offsets[0],
        e2e_us=offsets[-1],
        chunk_offsets_us=offsets,
        chunk_tokens=tokens,
        completion_tokens=sum(tokens),
    )
    metrics = ProxyMetrics()
    updates = MetricUpdates(metrics)
    updates.started(Role.BASELINE, shadow=False)
    updates.finished(Role.BASELINE, Route.CHAT, m, shadow=False)
    reference = Histogram("ref", "reference", registry=CollectorRegistry(), buckets=TOKEN_BUCKETS_S)
    for latency_us, n in m.itl_us:
        for _ in range(n):
            reference.observe(latency_us / 1e6)
    expected = {s.labels["le"]: s.value for s in reference.collect()[0].samples if "le" in s.labels}
    exposition = parse_exposition(metrics.render())
    got = {s.label("le"): s.value for s in exposition.named(ITL_SECONDS + "_bucket")}
    assert got == expected
    assert len(set(got.values())) >= 4  # the values spread over several buckets
    ref_sum = next(s.value for s in reference.collect()[0].samples if s.name == "ref_sum")
    total = exposition.total(ITL_SECONDS + "_sum")
    assert total is not None and abs(total - ref_sum) < 1e-9


def test_every_documented_series_has_its_type_and_no_created_series() -> None:
    """Each series the module docstring lists is exposed under its name and type, and the
    per-process ``*_created`` series (absent in multiprocess mode) are left out."""
    from specproxy.proxy import metrics as names

    metrics = ProxyMetrics()
    updates = MetricUpdates(metrics)
    accept = Acceptance(AcceptanceSource.META_INFO, accept_length=2.0)
    updates.started(Role.CANDIDATE, shadow=True)
    updates.finished(Role.CANDIDATE, Route.CHAT, _streamed((1, 2, 2), accept), shadow=True)
    metrics.admin("/flush_cache", Role.BASELINE, 200)
    text = metrics.render()
    exposition = parse_exposition(text)
    expected = {
        names.REQUESTS_TOTAL: "counter",
        names.OUTPUT_TOKENS_TOTAL: "counter",
        names.IN_FLIGHT: "gauge",
        names.SHADOW_DROPPED_TOTAL: "counter",
        names.TTFT_SECONDS: "histogram",
        names.E2E_SECONDS: "histogram",
        names.TPOT_SECONDS: "histogram",
        names.ITL_SECONDS: "histogram",
        names.SPEC_TOKENS_TOTAL: "counter",
        names.SPEC_STEPS_TOTAL: "counter",
        names.ACCEPT_LENGTH: "gauge",
        names.ADMIN_REQUESTS_TOTAL: "counter",
    }
    assert {k: exposition.types.get(k) for k in expected} == expected
    assert "_created" not in text
    assert exposition.total(names.IN_FLIGHT, side="baseline", role="primary") == 0
    assert exposition.total(names.ADMIN_REQUESTS_TOTAL, path="/flush_cache", status="200") == 1


def test_multiprocess_storage_needs_the_environment_first(tmp_path: Path) -> None:
    """Asking for multiprocess files in a process whose prometheus_client was imported
    without ``PROMETHEUS_MULTIPROC_DIR`` is refused (its values would stay private)."""
    with pytest.raises(RuntimeError, match="PROMETHEUS_MULTIPROC_DIR must be set"):
        ProxyMetrics(multiprocess_dir=tmp_path)
