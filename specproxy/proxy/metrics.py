"""The proxy's own counters: Prometheus text at ``/_specproxy/metrics``, JSON at ``/_specproxy/status``.

Kept in prometheus_client's metrics and written out by its own exposition
(``generate_latest``, text format 0.0.4). This module declares the series and reads
them back; they are written once per request, never per chunk, by ``proxy.records``
(``MetricUpdates``, on the event loop's thread; ``bench/metrics_speed.py`` measures the
cost per request), apart from the admin calls' counter (``admin``). Histogram buckets
are in seconds, as Prometheus expects; everything else in specproxy stays in integer
microseconds.

Two storage modes. By default each ``ProxyMetrics`` has its own registry (one process,
one proxy; tests run many side by side). With ``multiprocess_dir`` (``serve --workers N``,
N > 1) the values live in prometheus_client's multiprocess files in that directory
(``PROMETHEUS_MULTIPROC_DIR``, which must be set before prometheus_client is imported),
and both the exposition and the status JSON are read back through ``MultiProcessCollector``:
whichever worker answers the scrape reports the sum over all of them (in-flight gauges:
the live workers only). The accept-length gauge is a ratio, which no summing can
aggregate, so it is derived at read time from the two aggregated counters.

Two words, one meaning each: **side** is ``baseline`` or ``candidate`` (the server),
**role** is ``primary`` (its answer went to the client) or ``shadow`` (the mirrored copy).

Exposed series (each name declared once, below, with its type and help text):

- ``REQUESTS_TOTAL{side,route,role,outcome}`` (counter; ``outcome`` is ``ok`` or an
  error kind)
- ``OUTPUT_TOKENS_TOTAL{side,route}`` (counter; the server's completion tokens of
  successful requests)
- ``IN_FLIGHT{side,role}`` (gauge)
- ``SHADOW_DROPPED_TOTAL{side}`` (counter; the ``shadow_dropped`` outcomes of
  ``REQUESTS_TOTAL``, summed per side)
- ``TTFT_SECONDS``, ``E2E_SECONDS`` and ``TPOT_SECONDS{side,route}`` (histograms over
  successful requests), ``ITL_SECONDS{side,route}`` (per-token latency, one observation
  per output token: ``core.records.model.Measurement.itl_us``)
- ``SPEC_TOKENS_TOTAL`` and ``SPEC_STEPS_TOTAL{side,source}`` (counters: output tokens and
  verify steps of the successful requests with an accept length; ``source`` is ``server``
  for a figure the server reported, ``chunk_estimate`` for one estimated from tokens per
  stream chunk), and ``ACCEPT_LENGTH{side,source}`` (gauge: their ratio since the proxy
  started, computed when read). A live panel divides the counters' rates:
  ``rate(specproxy_spec_tokens_total[1m]) / rate(specproxy_spec_steps_total[1m])``.
- ``ADMIN_REQUESTS_TOTAL{path,side,status}`` (counter; SGLang admin and tokenizer calls
  relayed to the primary, ``proxy.admin``; they are not measured requests)

Warm-up requests are counted like any other here: these are live operational counters,
not the experiment's statistics (``core.records.tally`` keeps those).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    values,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from specproxy.core.measurement.acceptance import accept_length_of
from specproxy.core.records.model import ErrorKind, Role

TTFT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
E2E_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
TOKEN_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
REQUESTS_TOTAL = "specproxy_requests_total"
OUTPUT_TOKENS_TOTAL = "specproxy_output_tokens_total"
IN_FLIGHT = "specproxy_in_flight"
SHADOW_DROPPED_TOTAL = "specproxy_shadow_dropped_total"
TTFT_SECONDS = "specproxy_ttft_seconds"
E2E_SECONDS = "specproxy_e2e_seconds"
TPOT_SECONDS = "specproxy_tpot_seconds"
ITL_SECONDS = "specproxy_itl_seconds"
SPEC_TOKENS_TOTAL = "specproxy_spec_tokens_total"
SPEC_STEPS_TOTAL = "specproxy_spec_steps_total"
ACCEPT_LENGTH = "specproxy_accept_length"
ADMIN_REQUESTS_TOTAL = "specproxy_admin_requests_total"
_HELP = {
    REQUESTS_TOTAL: "Requests sent upstream, by side, route, role and outcome.",
    OUTPUT_TOKENS_TOTAL: "Output tokens of successful requests (server counts).",
    IN_FLIGHT: "Requests in flight upstream.",
    SHADOW_DROPPED_TOTAL: "Shadow copies dropped at the in-flight bound.",
    TTFT_SECONDS: "Time to first token of successful requests.",
    E2E_SECONDS: "End-to-end latency of successful requests.",
    TPOT_SECONDS: "Time per output token after the first, per request.",
    ITL_SECONDS: "Per-token latency, one observation per output token.",
    SPEC_TOKENS_TOTAL: "Output tokens of requests with an accept length.",
    SPEC_STEPS_TOTAL: "Verify steps of requests with an accept length.",
    ACCEPT_LENGTH: "Output tokens per verify step since the proxy started.",
    ADMIN_REQUESTS_TOTAL: "SGLang admin calls relayed to the primary (not measured).",
}
PRIMARY = "primary"
SHADOW = "shadow"
SERVER = "server"
CHUNK_ESTIMATE = "chunk_estimate"
_DROPPED = ErrorKind.SHADOW_DROPPED.value
_SIDE_ROUTE = ("side", "route")
_SIDE_SOURCE = ("side", "source")

# ``*_created`` series are per-process start times; the multiprocess collector has none,
# so the exposition looks the same in both modes.
disable_created_metrics()  # type: ignore[no-untyped-call]


class _Families:
    """A fixed list of collected families, in the shape ``generate_latest`` reads."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def _by_sample(families: Iterable[Metric]) -> defaultdict[str, list[tuple[dict[str, str], float]]]:
    """Every sample's (labels, value), keyed by sample name."""
    out: defaultdict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for family in families:
        for sample in family.samples:
            out[sample.name].append((sample.labels, sample.value))
    return out


def _sums(
    samples: list[tuple[dict[str, str], float]], names: tuple[str, ...]
) -> defaultdict[tuple[str, ...], float]:
    out: defaultdict[tuple[str, ...], float] = defaultdict(float)
    for labels, value in samples:
        out[tuple(labels.get(n, "") for n in names)] += value
    return out


class ProxyMetrics:
    """Counts per side; see the module docstring for the exposed series, declared here
    (public attributes) and written per request by ``proxy.records.MetricUpdates``.

    ``REQUESTS_TOTAL`` (side, route, role, outcome) is the one count of ended requests:
    the per-side completed, failed and dropped figures of ``status`` are sums over it.
    ``multiprocess_dir``: keep the values in prometheus_client's multiprocess files there
    and read every worker's back (the module docstring says when).
    """

    def __init__(self, multiprocess_dir: Path | None = None) -> None:
        if multiprocess_dir is not None and values.ValueClass is values.MutexValue:
            raise RuntimeError(
                "PROMETHEUS_MULTIPROC_DIR must be set before prometheus_client is imported"
            )
        self._multiprocess_dir = multiprocess_dir
        registry = CollectorRegistry(auto_describe=True) if multiprocess_dir is None else None
        self._registry = registry

        def counter(name: str, labels: tuple[str, ...]) -> Counter:
            return Counter(name, _HELP[name], labels, registry=registry)

        def histogram(name: str, bounds: tuple[float, ...]) -> Histogram:
            return Histogram(name, _HELP[name], _SIDE_ROUTE, registry=registry, buckets=bounds)

        self.requests_total = counter(REQUESTS_TOTAL, ("side", "route", "role", "outcome"))
        self.tokens_total = counter(OUTPUT_TOKENS_TOTAL, _SIDE_ROUTE)
        self._in_flight_gauge = Gauge(
            IN_FLIGHT,
            _HELP[IN_FLIGHT],
            ("side", "role"),
            registry=registry,
            multiprocess_mode="livesum",
        )
        self._dropped_total = counter(SHADOW_DROPPED_TOTAL, ("side",))
        self.ttft = histogram(TTFT_SECONDS, TTFT_BUCKETS_S)
        self.e2e = histogram(E2E_SECONDS, E2E_BUCKETS_S)
        self.tpot = histogram(TPOT_SECONDS, TOKEN_BUCKETS_S)
        self.itl = histogram(ITL_SECONDS, TOKEN_BUCKETS_S)
        self.token_bounds = [*TOKEN_BUCKETS_S, float("inf")]  # with +Inf, for ``bisect``
        self.spec_tokens = counter(SPEC_TOKENS_TOTAL, _SIDE_SOURCE)
        self.spec_steps = counter(SPEC_STEPS_TOTAL, _SIDE_SOURCE)
        self._admin_total = counter(ADMIN_REQUESTS_TOTAL, ("path", "side", "status"))
        # The children of fixed label values, exposed (at 0) from the start; looked up
        # once, as ``labels()`` validates and locks per call.
        self.in_flight = {
            (side, role): self._in_flight_gauge.labels(side.value, role)
            for side in Role
            for role in (PRIMARY, SHADOW)
        }
        self.dropped = {side: self._dropped_total.labels(side.value) for side in Role}

    def admin(self, path: str, side: Role, status: int) -> None:
        """An admin call on ``path`` was relayed to ``side`` and answered ``status``."""
        self._admin_total.labels(path, side.value, str(status)).inc()

    def _collect(self) -> list[Metric]:
        """Every family as a scrape sees it, with the derived accept-length gauge."""
        if self._registry is not None:
            families = list(self._registry.collect())
        else:
            registry = CollectorRegistry()
            MultiProcessCollector(registry, path=str(self._multiprocess_dir))  # type: ignore[no-untyped-call]
            families = list(registry.collect())
        samples = _by_sample(families)
        tokens = _sums(samples[SPEC_TOKENS_TOTAL], _SIDE_SOURCE)
        steps = _sums(samples[SPEC_STEPS_TOTAL], _SIDE_SOURCE)
        gauge = GaugeMetricFamily(ACCEPT_LENGTH, _HELP[ACCEPT_LENGTH], labels=_SIDE_SOURCE)
        for key in sorted(steps):
            length = accept_length_of(tokens[key], steps[key])
            if length is not None:
                gauge.add_metric(list(key), length)
        return [*families, gauge]

    def accept_length(self, side: Role) -> float | None:
        """``side``'s output tokens per verify step so far, every source together."""
        samples = _by_sample(self._collect())
        return _accept_length(samples, side)

    def status(self) -> dict[str, Any]:
        """Per side: in flight (primary and shadow), completed, failed by class, shadow
        dropped, output tokens and the accept length so far (over every worker)."""
        samples = _by_sample(self._collect())
        in_flight = _sums(samples[IN_FLIGHT], ("side", "role"))
        requests = _sums(samples[REQUESTS_TOTAL], ("side", "outcome"))
        tokens = _sums(samples[OUTPUT_TOKENS_TOTAL], ("side",))
        out: dict[str, Any] = {}
        for side in Role:
            failed_by_kind = {
                outcome: int(n)
                for (name, outcome), n in sorted(requests.items())
                if name == side.value and outcome != "ok" and n
            }
            primary = int(in_flight[(side.value, PRIMARY)])
            shadow = int(in_flight[(side.value, SHADOW)])
            out[side.value] = {
                "in_flight": primary + shadow,
                "in_flight_primary": primary,
                "in_flight_shadow": shadow,
                "completed": int(requests[(side.value, "ok")]),
                "failed": sum(failed_by_kind.values()),
                "failed_by_kind": failed_by_kind,
                "shadow_dropped": failed_by_kind.get(_DROPPED, 0),
                "output_tokens": int(tokens[(side.value,)]),
                "accept_length": _accept_length(samples, side),
            }
        return out

    def render(self) -> str:
        """The Prometheus text exposition (format 0.0.4), from prometheus_client."""
        return generate_latest(_Families(self._collect())).decode()


def _accept_length(
    samples: defaultdict[str, list[tuple[dict[str, str], float]]], side: Role
) -> float | None:
    tokens = sum(v for labels, v in samples[SPEC_TOKENS_TOTAL] if labels["side"] == side.value)
    steps = sum(v for labels, v in samples[SPEC_STEPS_TOTAL] if labels["side"] == side.value)
    length = accept_length_of(tokens, steps)
    return round(length, 4) if length is not None else None
