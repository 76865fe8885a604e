"""The proxy's own counters: status JSON per side and Prometheus text."""

from __future__ import annotations

from specproxy.core.model import ErrorKind, Measurement, Role, Route
from specproxy.core.prometheus import parse_exposition
from specproxy.proxy.metrics import ProxyMetrics


def test_counts_in_flight_completed_failed_and_dropped() -> None:
    """Started, finished, failed and dropped requests show up per side in the status."""
    metrics = ProxyMetrics()
    metrics.started(Role.BASELINE, shadow=False)
    metrics.started(Role.CANDIDATE, shadow=True)
    metrics.started(Role.CANDIDATE, shadow=True)
    assert metrics.status()["candidate"]["in_flight"] == 2
    metrics.finished(
        Role.BASELINE, Route.CHAT, Measurement(status=200, ttft_us=1500, e2e_us=9000), shadow=False
    )
    failed = Measurement(error_kind=ErrorKind.TIMEOUT, error_message="deadline")
    metrics.finished(Role.CANDIDATE, Route.CHAT, failed, shadow=True)
    metrics.shadow_dropped(Role.CANDIDATE, Route.CHAT)
    status = metrics.status()
    assert status["baseline"] == {
        "in_flight": 0,
        "in_flight_primary": 0,
        "in_flight_shadow": 0,
        "completed": 1,
        "failed": 0,
        "failed_by_kind": {},
        "shadow_dropped": 0,
    }
    assert status["candidate"]["in_flight_shadow"] == 1
    assert status["candidate"]["failed_by_kind"] == {"timeout": 1, "shadow_dropped": 1}
    assert status["candidate"]["shadow_dropped"] == 1


def test_prometheus_text_parses_and_carries_the_series() -> None:
    """The exposition parses as Prometheus text and holds requests, drops and histograms."""
    metrics = ProxyMetrics()
    for ttft_us in (3000, 30000, 400000):
        metrics.started(Role.BASELINE, shadow=False)
        m = Measurement(status=200, ttft_us=ttft_us, e2e_us=ttft_us * 2)
        metrics.finished(Role.BASELINE, Route.GENERATE, m, shadow=False)
    metrics.shadow_dropped(Role.CANDIDATE, Route.GENERATE)
    exposition = parse_exposition(metrics.render())
    assert exposition.types["specproxy_ttft_seconds"] == "histogram"
    assert exposition.total("specproxy_requests_total", outcome="ok") == 3
    assert exposition.total("specproxy_shadow_dropped_total", side="candidate") == 1
    buckets = {s.label("le"): s.value for s in exposition.named("specproxy_ttft_seconds_bucket")}
    assert buckets["0.005"] == 1
    assert buckets["0.05"] == 2
    assert buckets["+Inf"] == 3
