"""The proxy's own counters: Prometheus text at ``/_specproxy/metrics``, JSON at ``/_specproxy/status``.

Kept in prometheus_client's metrics and written out by its own exposition
(``generate_latest``, text format 0.0.4). Mutated only by the relay, on the event loop's
thread. Updates happen once per request, never per chunk, and the per-token ITL is
batched: one request's latencies are counted per bucket first, then each bucket touched
gets one update (``bench/metrics_speed.py`` measures the cost per request). Histogram
buckets are in seconds, as Prometheus expects; everything else in specproxy stays in
integer microseconds.

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

import bisect
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
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

from specproxy.core.compare.acceptance import verify_steps
from specproxy.core.measurement.acceptance import accept_length_of
from specproxy.core.records.model import ErrorKind, Measurement, Role, Route
from specproxy.core.speedups import SPEEDUPS

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
_C_BUCKET_COUNTS = SPEEDUPS.bucket_counts if SPEEDUPS is not None else None


def _observe_many(
    hist: Histogram, bounds: list[float], latencies: Iterable[tuple[int, int]]
) -> None:
    """``hist.observe(latency_s)`` ``tokens`` times per ``(latency_us, tokens)``, with one
    update per bucket touched (prometheus_client's ``observe`` takes one value per call).

    Writes the child's bucket and sum values directly, as ``Histogram.observe`` does
    (non-cumulative bucket counts, cumulated on collection); ``tests/proxy/test_metrics.py``
    checks the result against ``observe`` called per token."""
    done = _C_BUCKET_COUNTS(latencies, bounds) if _C_BUCKET_COUNTS is not None else None
    counts, total_s = done if done is not None else _bucket_counts_py(latencies, bounds)
    if not counts:
        return
    buckets: Any = hist._buckets  # no public API observes a value n times
    for i, n in counts.items():
        buckets[i].inc(n)
    hist._sum.inc(total_s)


def _bucket_counts_py(
    latencies: Iterable[tuple[int, int]], bounds: list[float]
) -> tuple[dict[int, int], float]:
    """``_observe_many``'s loop in Python (the reference for ``core/_speedups.c``'s
    ``bucket_counts``): tokens per bucket index, and the sum of seconds x tokens."""
    counts: dict[int, int] = {}
    total_s = 0.0
    find = bisect.bisect_left
    for latency_us, tokens in latencies:
        seconds = latency_us / 1e6
        i = find(bounds, seconds)  # the first bound >= the value: ``observe``'s bucket
        counts[i] = counts.get(i, 0) + tokens
        total_s += seconds * tokens
    return counts, total_s


@dataclass(slots=True)
class _SideRoute:
    """The per-(side, route) children touched by each successful request."""

    ttft: Histogram
    e2e: Histogram
    tpot: Histogram
    itl: Histogram
    tokens: Counter


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
    """Counts per side; see the module docstring for the exposed series.

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

        self._requests_total = counter(REQUESTS_TOTAL, ("side", "route", "role", "outcome"))
        self._tokens_total = counter(OUTPUT_TOKENS_TOTAL, _SIDE_ROUTE)
        self._in_flight_gauge = Gauge(
            IN_FLIGHT,
            _HELP[IN_FLIGHT],
            ("side", "role"),
            registry=registry,
            multiprocess_mode="livesum",
        )
        self._dropped_total = counter(SHADOW_DROPPED_TOTAL, ("side",))
        self._ttft = histogram(TTFT_SECONDS, TTFT_BUCKETS_S)
        self._e2e = histogram(E2E_SECONDS, E2E_BUCKETS_S)
        self._tpot = histogram(TPOT_SECONDS, TOKEN_BUCKETS_S)
        self._itl = histogram(ITL_SECONDS, TOKEN_BUCKETS_S)
        self._token_bounds = [*TOKEN_BUCKETS_S, float("inf")]  # with +Inf, for ``bisect``
        self._spec_tokens = counter(SPEC_TOKENS_TOTAL, _SIDE_SOURCE)
        self._spec_steps = counter(SPEC_STEPS_TOTAL, _SIDE_SOURCE)
        self._admin_total = counter(ADMIN_REQUESTS_TOTAL, ("path", "side", "status"))
        # Children by label values, looked up once: ``labels()`` validates and locks per call.
        self._in_flight = {
            (side, role): self._in_flight_gauge.labels(side.value, role)
            for side in Role
            for role in (PRIMARY, SHADOW)
        }
        self._dropped = {side: self._dropped_total.labels(side.value) for side in Role}
        self._requests: dict[tuple[str, str, str, str], Counter] = {}
        self._side_route: dict[tuple[str, str], _SideRoute] = {}
        self._spec: dict[tuple[str, str], tuple[Counter, Counter]] = {}

    def started(self, side: Role, *, shadow: bool) -> None:
        """A request was sent to ``side``."""
        self._in_flight[(side, SHADOW if shadow else PRIMARY)].inc()

    def _request(self, key: tuple[str, str, str, str]) -> Counter:
        child = self._requests.get(key)
        if child is None:
            child = self._requests[key] = self._requests_total.labels(*key)
        return child

    def _children(self, key: tuple[str, str]) -> _SideRoute:
        found = self._side_route.get(key)
        if found is None:
            found = self._side_route[key] = _SideRoute(
                ttft=self._ttft.labels(*key),
                e2e=self._e2e.labels(*key),
                tpot=self._tpot.labels(*key),
                itl=self._itl.labels(*key),
                tokens=self._tokens_total.labels(*key),
            )
        return found

    def finished(
        self,
        side: Role,
        route: Route,
        m: Measurement,
        *,
        shadow: bool,
        itl: list[tuple[int, int]] | None = None,
    ) -> None:
        """A request sent to ``side`` ended with measurement ``m`` (``itl``: its
        ``Measurement.itl_us`` when the caller has it already)."""
        role = SHADOW if shadow else PRIMARY
        self._in_flight[(side, role)].dec()
        outcome = "ok" if m.error_kind is None else m.error_kind.value
        self._request((side.value, route.value, role, outcome)).inc()
        if m.error_kind is not None:
            return
        children = self._children((side.value, route.value))
        if m.ttft_us is not None:
            children.ttft.observe(m.ttft_us / 1e6)
        if m.e2e_us is not None:
            children.e2e.observe(m.e2e_us / 1e6)
        if m.tpot_us is not None:
            children.tpot.observe(m.tpot_us / 1e6)
        _observe_many(children.itl, self._token_bounds, m.itl_us if itl is None else itl)
        if m.completion_tokens:
            children.tokens.inc(m.completion_tokens)
            self._acceptance(side, m, m.completion_tokens)

    def _acceptance(self, side: Role, m: Measurement, tokens: int) -> None:
        """Add the request's tokens and verify steps (``core.compare.acceptance.verify_steps``:
        the server's count, else tokens / accept length) to its source."""
        acc = m.acceptance
        if acc is None or not acc.accept_length or acc.accept_length <= 0:
            return
        steps = verify_steps(m, acc.accept_length)
        if steps is None:
            return
        key = (side.value, CHUNK_ESTIMATE if acc.estimated else SERVER)
        pair = self._spec.get(key)
        if pair is None:
            pair = self._spec[key] = (self._spec_tokens.labels(*key), self._spec_steps.labels(*key))
        pair[0].inc(tokens)
        pair[1].inc(steps)

    def shadow_dropped(self, side: Role, route: Route) -> None:
        """A shadow copy for ``side`` was dropped because too many were in flight."""
        self._request((side.value, route.value, SHADOW, _DROPPED)).inc()
        self._dropped[side].inc()

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
