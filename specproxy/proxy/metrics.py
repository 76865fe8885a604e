"""The proxy's own counters: Prometheus text at ``/_specproxy/metrics``, JSON at ``/_specproxy/status``.

Owned and mutated only by the relay, on the event loop's thread (no locks). Updates
happen once per request, never per chunk. Histogram buckets are in seconds, as
Prometheus expects; everything else in specproxy stays in integer microseconds.

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
  per output token: ``core.model.Measurement.itl_us``)
- ``SPEC_TOKENS_TOTAL`` and ``SPEC_STEPS_TOTAL{side,source}`` (counters: output tokens and
  verify steps of the successful requests with an accept length; ``source`` is ``server``
  for a figure the server reported, ``chunk_estimate`` for one estimated from tokens per
  stream chunk), and ``ACCEPT_LENGTH{side,source}`` (gauge: their ratio since the proxy
  started). A live panel divides the counters' rates:
  ``rate(specproxy_spec_tokens_total[1m]) / rate(specproxy_spec_steps_total[1m])``.
- ``ADMIN_REQUESTS_TOTAL{path,side,status}`` (counter; SGLang admin and tokenizer calls
  relayed to the primary, ``proxy.admin``; they are not measured requests)

Warm-up requests are counted like any other here: these are live operational counters,
not the experiment's statistics (``core.tally`` keeps those).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from specproxy.core.compare.acceptance import verify_steps
from specproxy.core.model import ErrorKind, Measurement, Role, Route

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
    REQUESTS_TOTAL: ("counter", "Requests sent upstream, by side, route, role and outcome."),
    OUTPUT_TOKENS_TOTAL: ("counter", "Output tokens of successful requests (server counts)."),
    IN_FLIGHT: ("gauge", "Requests in flight upstream."),
    SHADOW_DROPPED_TOTAL: ("counter", "Shadow copies dropped at the in-flight bound."),
    TTFT_SECONDS: ("histogram", "Time to first token of successful requests."),
    E2E_SECONDS: ("histogram", "End-to-end latency of successful requests."),
    TPOT_SECONDS: ("histogram", "Time per output token after the first, per request."),
    ITL_SECONDS: ("histogram", "Per-token latency, one observation per output token."),
    SPEC_TOKENS_TOTAL: ("counter", "Output tokens of requests with an accept length."),
    SPEC_STEPS_TOTAL: ("counter", "Verify steps of requests with an accept length."),
    ACCEPT_LENGTH: ("gauge", "Output tokens per verify step since the proxy started."),
    ADMIN_REQUESTS_TOTAL: ("counter", "SGLang admin calls relayed to the primary (not measured)."),
}
PRIMARY = "primary"
SHADOW = "shadow"
SERVER = "server"
CHUNK_ESTIMATE = "chunk_estimate"
_DROPPED = ErrorKind.SHADOW_DROPPED.value


class _Histogram:
    """Cumulative-on-render Prometheus histogram with fixed upper bounds in seconds."""

    __slots__ = ("bounds", "count", "counts", "sum_s")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum_s = 0.0
        self.count = 0

    def observe_us(self, value_us: int, times: int = 1) -> None:
        seconds = value_us / 1e6
        self.counts[bisect.bisect_left(self.bounds, seconds)] += times
        self.sum_s += seconds * times
        self.count += times

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


def _histograms(bounds: tuple[float, ...]) -> defaultdict[tuple[str, str], _Histogram]:
    return defaultdict(lambda: _Histogram(bounds))


class ProxyMetrics:
    """Counts per side; see the module docstring for the exposed series.

    ``_requests`` (side, route, role, outcome) is the one count of ended requests: the
    per-side completed, failed and dropped figures are sums over it, made when read.
    """

    def __init__(self) -> None:
        self._in_flight = {side: {PRIMARY: 0, SHADOW: 0} for side in Role}
        self._requests: Counter[tuple[str, str, str, str]] = Counter()
        self._tokens: Counter[tuple[str, str]] = Counter()
        self._ttft = _histograms(TTFT_BUCKETS_S)
        self._e2e = _histograms(E2E_BUCKETS_S)
        self._tpot = _histograms(TOKEN_BUCKETS_S)
        self._itl = _histograms(TOKEN_BUCKETS_S)
        self._spec_tokens: defaultdict[tuple[str, str], float] = defaultdict(float)
        self._spec_steps: defaultdict[tuple[str, str], float] = defaultdict(float)
        self._admin: Counter[tuple[str, str, int]] = Counter()

    def started(self, side: Role, *, shadow: bool) -> None:
        """A request was sent to ``side``."""
        self._in_flight[side][SHADOW if shadow else PRIMARY] += 1

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
        self._in_flight[side][role] -= 1
        outcome = "ok" if m.error_kind is None else m.error_kind.value
        self._requests[(side.value, route.value, role, outcome)] += 1
        if m.error_kind is not None:
            return
        key = (side.value, route.value)
        for hists, value in (
            (self._ttft, m.ttft_us),
            (self._e2e, m.e2e_us),
            (self._tpot, m.tpot_us),
        ):
            if value is not None:
                hists[key].observe_us(value)
        hist = self._itl[key]
        for latency_us, tokens in m.itl_us if itl is None else itl:
            hist.observe_us(latency_us, tokens)
        if m.completion_tokens:
            self._tokens[key] += m.completion_tokens
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
        self._spec_tokens[key] += tokens
        self._spec_steps[key] += steps

    def shadow_dropped(self, side: Role, route: Route) -> None:
        """A shadow copy for ``side`` was dropped because too many were in flight."""
        self._requests[(side.value, route.value, SHADOW, _DROPPED)] += 1

    def admin(self, path: str, side: Role, status: int) -> None:
        """An admin call on ``path`` was relayed to ``side`` and answered ``status``."""
        self._admin[(path, side.value, status)] += 1

    def _outcomes(self, side: Role) -> Counter[str]:
        """Ended requests of ``side`` by outcome (``ok`` or an error kind)."""
        out: Counter[str] = Counter()
        for (name, _route, _role, outcome), n in self._requests.items():
            if name == side.value:
                out[outcome] += n
        return out

    def accept_length(self, side: Role) -> float | None:
        """``side``'s output tokens per verify step so far, every source together."""
        tokens = sum(v for (name, _), v in self._spec_tokens.items() if name == side.value)
        steps = sum(v for (name, _), v in self._spec_steps.items() if name == side.value)
        return round(tokens / steps, 4) if steps else None

    def status(self) -> dict[str, Any]:
        """Per side: in flight (primary and shadow), completed, failed by class, shadow
        dropped, output tokens and the accept length so far."""
        out: dict[str, Any] = {}
        for side, in_flight in self._in_flight.items():
            failed_by_kind = self._outcomes(side)
            completed = failed_by_kind.pop("ok", 0)
            out[side.value] = {
                "in_flight": sum(in_flight.values()),
                "in_flight_primary": in_flight[PRIMARY],
                "in_flight_shadow": in_flight[SHADOW],
                "completed": completed,
                "failed": sum(failed_by_kind.values()),
                "failed_by_kind": dict(failed_by_kind),
                "shadow_dropped": failed_by_kind[_DROPPED],
                "output_tokens": sum(
                    n for (name, _), n in self._tokens.items() if name == side.value
                ),
                "accept_length": self.accept_length(side),
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
        lines += _samples(OUTPUT_TOKENS_TOTAL, ("side", "route"), self._tokens.items())
        lines += _head(IN_FLIGHT)
        for side, in_flight in self._in_flight.items():
            for role, n in in_flight.items():
                lines.append(f'{IN_FLIGHT}{{side="{side.value}",role="{role}"}} {n}')
        lines += _head(SHADOW_DROPPED_TOTAL)
        for side in self._in_flight:
            dropped = self._outcomes(side)[_DROPPED]
            lines.append(f'{SHADOW_DROPPED_TOTAL}{{side="{side.value}"}} {dropped}')
        for name, hists in (
            (TTFT_SECONDS, self._ttft),
            (E2E_SECONDS, self._e2e),
            (TPOT_SECONDS, self._tpot),
            (ITL_SECONDS, self._itl),
        ):
            lines += _head(name)
            for (side, route), hist in sorted(hists.items()):
                lines += hist.lines(name, f'side="{side}",route="{route}"')
        lines += self._acceptance_lines()
        admin = self._admin.items()
        lines += _samples(ADMIN_REQUESTS_TOTAL, ("path", "side", "status"), admin)
        return "\n".join(lines) + "\n"

    def _acceptance_lines(self) -> list[str]:
        steps = self._spec_steps
        lengths = {k: self._spec_tokens[k] / n for k, n in steps.items() if n}
        labels = ("side", "source")
        return [
            *_samples(SPEC_TOKENS_TOTAL, labels, self._spec_tokens.items()),
            *_samples(SPEC_STEPS_TOTAL, labels, steps.items()),
            *_samples(ACCEPT_LENGTH, labels, lengths.items()),
        ]


def _head(name: str) -> list[str]:
    kind, text = _HELP[name]
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]


def _samples(
    name: str, labels: tuple[str, ...], items: Iterable[tuple[tuple[Any, ...], float]]
) -> list[str]:
    """``name``'s HELP/TYPE lines, then one sample per (label values, value), sorted."""
    out = _head(name)
    for values, value in sorted(items):
        pairs = ",".join(f'{k}="{v}"' for k, v in zip(labels, values, strict=True))
        out.append(f"{name}{{{pairs}}} {value:.12g}")
    return out
