"""The proxy's own counters: Prometheus text at ``/_specproxy/metrics``, JSON at ``/_specproxy/status``.

Owned and mutated only by the relay, on the event loop's thread (no locks). Updates
happen once per request, never per chunk. Histogram buckets are in seconds, as
Prometheus expects; everything else in specproxy stays in integer microseconds.

Exposed series (each name declared once, below, with its type and help text):

- ``REQUESTS_TOTAL{side,route,role,outcome}`` (counter; ``role`` is ``primary`` or
  ``shadow``, ``outcome`` is ``ok`` or an error kind)
- ``IN_FLIGHT{side,role}`` (gauge)
- ``SHADOW_DROPPED_TOTAL{side}`` (counter; the ``shadow_dropped`` outcomes of
  ``REQUESTS_TOTAL``, summed per side)
- ``TTFT_SECONDS{side,route}`` and ``E2E_SECONDS{side,route}`` (histograms over
  successful requests)

Warm-up requests are counted like any other here: these are live operational counters,
not the experiment's statistics (``core.tally`` keeps those).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from typing import Any

from specproxy.core.model import ErrorKind, Measurement, Role, Route

TTFT_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
E2E_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
REQUESTS_TOTAL = "specproxy_requests_total"
IN_FLIGHT = "specproxy_in_flight"
SHADOW_DROPPED_TOTAL = "specproxy_shadow_dropped_total"
TTFT_SECONDS = "specproxy_ttft_seconds"
E2E_SECONDS = "specproxy_e2e_seconds"
_HELP = {
    REQUESTS_TOTAL: ("counter", "Requests sent upstream, by side, route, role and outcome."),
    IN_FLIGHT: ("gauge", "Requests in flight upstream."),
    SHADOW_DROPPED_TOTAL: ("counter", "Shadow copies dropped at the in-flight bound."),
    TTFT_SECONDS: ("histogram", "Time to first token of successful requests."),
    E2E_SECONDS: ("histogram", "End-to-end latency of successful requests."),
}
PRIMARY = "primary"
SHADOW = "shadow"
_DROPPED = ErrorKind.SHADOW_DROPPED.value


class _Histogram:
    """Cumulative-on-render Prometheus histogram with fixed upper bounds in seconds."""

    __slots__ = ("bounds", "count", "counts", "sum_s")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum_s = 0.0
        self.count = 0

    def observe_us(self, value_us: int) -> None:
        seconds = value_us / 1e6
        self.counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.sum_s += seconds
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out: list[str] = []
        running = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            running += n
            out.append(f'{name}_bucket{{{labels},le="{bound:g}"}} {running}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.sum_s:.6f}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


class ProxyMetrics:
    """Counts per side; see the module docstring for the exposed series.

    ``_requests`` (side, route, role, outcome) is the one count of ended requests: the
    per-side completed, failed and dropped figures are sums over it, made when read.
    """

    def __init__(self) -> None:
        self._in_flight = {role: {PRIMARY: 0, SHADOW: 0} for role in Role}
        self._requests: Counter[tuple[str, str, str, str]] = Counter()
        self._ttft: defaultdict[tuple[str, str], _Histogram] = defaultdict(
            lambda: _Histogram(TTFT_BUCKETS_S)
        )
        self._e2e: defaultdict[tuple[str, str], _Histogram] = defaultdict(
            lambda: _Histogram(E2E_BUCKETS_S)
        )

    def started(self, side: Role, *, shadow: bool) -> None:
        """A request was sent to ``side``."""
        self._in_flight[side][SHADOW if shadow else PRIMARY] += 1

    def finished(self, side: Role, route: Route, m: Measurement, *, shadow: bool) -> None:
        """A request sent to ``side`` ended with measurement ``m``."""
        role = SHADOW if shadow else PRIMARY
        self._in_flight[side][role] -= 1
        outcome = "ok" if m.error_kind is None else m.error_kind.value
        self._requests[(side.value, route.value, role, outcome)] += 1
        if m.error_kind is not None:
            return
        key = (side.value, route.value)
        if m.ttft_us is not None:
            self._ttft[key].observe_us(m.ttft_us)
        if m.e2e_us is not None:
            self._e2e[key].observe_us(m.e2e_us)

    def shadow_dropped(self, side: Role, route: Route) -> None:
        """A shadow copy for ``side`` was dropped because too many were in flight."""
        self._requests[(side.value, route.value, SHADOW, _DROPPED)] += 1

    def _outcomes(self, side: Role) -> Counter[str]:
        """Ended requests of ``side`` by outcome (``ok`` or an error kind)."""
        out: Counter[str] = Counter()
        for (name, _route, _role, outcome), n in self._requests.items():
            if name == side.value:
                out[outcome] += n
        return out

    def status(self) -> dict[str, Any]:
        """Per side: in flight (primary and shadow), completed, failed by class, shadow dropped."""
        out: dict[str, Any] = {}
        for role, in_flight in self._in_flight.items():
            failed_by_kind = self._outcomes(role)
            completed = failed_by_kind.pop("ok", 0)
            out[role.value] = {
                "in_flight": sum(in_flight.values()),
                "in_flight_primary": in_flight[PRIMARY],
                "in_flight_shadow": in_flight[SHADOW],
                "completed": completed,
                "failed": sum(failed_by_kind.values()),
                "failed_by_kind": dict(failed_by_kind),
                "shadow_dropped": failed_by_kind[_DROPPED],
            }
        return out

    def render(self) -> str:
        """The Prometheus text exposition (format 0.0.4)."""
        lines = _head(REQUESTS_TOTAL)
        for (side, route, role, outcome), n in sorted(self._requests.items()):
            lines.append(
                f'{REQUESTS_TOTAL}{{side="{side}",route="{route}",role="{role}",'
                f'outcome="{outcome}"}} {n}'
            )
        lines += _head(IN_FLIGHT)
        for side, in_flight in self._in_flight.items():
            for role, n in in_flight.items():
                lines.append(f'{IN_FLIGHT}{{side="{side.value}",role="{role}"}} {n}')
        lines += _head(SHADOW_DROPPED_TOTAL)
        for side in self._in_flight:
            dropped = self._outcomes(side)[_DROPPED]
            lines.append(f'{SHADOW_DROPPED_TOTAL}{{side="{side.value}"}} {dropped}')
        for name, hists in ((TTFT_SECONDS, self._ttft), (E2E_SECONDS, self._e2e)):
            lines += _head(name)
            for (side, route), hist in sorted(hists.items()):
                lines += hist.lines(name, f'side="{side}",route="{route}"')
        return "\n".join(lines) + "\n"


def _head(name: str) -> list[str]:
    kind, text = _HELP[name]
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
