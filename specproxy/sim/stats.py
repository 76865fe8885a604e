"""Server-level statistics of one simulated server: counters, histograms, spec windows.

Mirrors SGLang's two accountings (docs/sglang.md, Server statistics): Prometheus counters and histograms
updated when a request finishes (never reset), and the scheduler's speculative
counters behind ``avg_spec_accept_length``: every decode step adds (accepted drafts +
batch size) and batch size to a window; every ``decode_log_interval`` decode steps
the window is folded into the lifetime totals and the last-window gauges
(``sglang:spec_accept_length``, ``spec_accept_rate``, ``gen_throughput``) are set.
So ``avg_spec_accept_length`` is absent until the first window closes and lags by up
to one window, as on a real server. ``reset_spec()`` (``/flush_cache``) clears the
speculative counters only. Times are seconds (Prometheus' unit) derived from integer
nanosecond instants. No I/O.
"""

from __future__ import annotations

import bisect
import itertools
import time
from dataclasses import dataclass, field

from specproxy.sim.engine import SimJob

TTFT_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
)
E2E_BUCKETS = (*TTFT_BUCKETS, 600.0, 1200.0, 1800.0, 2400.0)
ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
)
TOKEN_BUCKETS = (
    100.0,
    300.0,
    500.0,
    700.0,
    1000.0,
    1500.0,
    2000.0,
    3000.0,
    4000.0,
    5000.0,
    6000.0,
    7000.0,
    8000.0,
    9000.0,
    10000.0,
    12500.0,
    15000.0,
    17500.0,
    20000.0,
    22500.0,
    25000.0,
    27500.0,
    30000.0,
    35000.0,
    40000.0,
    60000.0,
    80000.0,
    100000.0,
    200000.0,
    300000.0,
    400000.0,
    600000.0,
    800000.0,
    1e6,
    1.1e6,
)
LOADS_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0)
QUEUE_BUCKETS = (
    0.0,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    3.0,
    4.0,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    70.0,
    80.0,
    90.0,
    100.0,
    200.0,
    300.0,
    400.0,
    500.0,
    600.0,
    700.0,
    800.0,
    900.0,
    1000.0,
    1200.0,
    1400.0,
    1600.0,
    1800.0,
    2000.0,
    2500.0,
    3000.0,
)


def _stage_buckets() -> tuple[float, ...]:
    out, value = [], 0.001
    for _ in range(30):
        out.append(value)
        value *= 1.62
    return tuple(out)


STAGE_BUCKETS = _stage_buckets()


@dataclass(slots=True)
class Histogram:
    """A Prometheus histogram (upper bounds without +Inf); observing is one bisection.

    ``counts[i]`` counts values in (bounds[i-1], bounds[i]]; the last slot those above
    every bound. ``cumulative()`` gives the per-``le`` figures the exposition shows.
    """

    bounds: tuple[float, ...]
    counts: list[int] = field(init=False)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += times
        self.total += value * times
        self.count += times

    def cumulative(self) -> list[int]:
        """Observations at or below each bound, in bound order."""
        return list(itertools.accumulate(self.counts[:-1]))


@dataclass(slots=True)
class SpecWindow:
    """Decode-step counters of the current log window (reset when folded)."""

    steps: int = 0
    request_steps: int = 0
    accepted: int = 0
    tokens: int = 0
    start_ns: int = field(default_factory=time.perf_counter_ns)


def _s(ns: int) -> float:
    return ns / 1e9


class ServerStats:
    """Everything ``/metrics``, ``/server_info`` and ``/v1/loads`` report about traffic."""

    def __init__(self, *, num_draft_tokens: int | None, decode_log_interval: int) -> None:
        self.num_draft_tokens = num_draft_tokens
        self.decode_log_interval = decode_log_interval
        self.counters: dict[str, int] = dict.fromkeys(
            (
                "prompt_tokens",
                "generation_tokens",
                "spec_verify_calls",
                "num_requests",
                "cached_tokens",
                "prefill_compute",
                "prefill_cache",
                "decode_tokens",
                "prefill_passes",
                "decode_passes",
            ),
            0,
        )
        self.hist = {
            "ttft": Histogram(TTFT_BUCKETS),
            "e2e": Histogram(E2E_BUCKETS),
            "itl": Histogram(ITL_BUCKETS),
            "prompt_len": Histogram(TOKEN_BUCKETS),
            "uncached_len": Histogram(TOKEN_BUCKETS),
            "gen_len": Histogram(TOKEN_BUCKETS),
            "loads": Histogram(LOADS_BUCKETS),
            "queue": Histogram(QUEUE_BUCKETS),
            "stage_request_process": Histogram(STAGE_BUCKETS),
            "stage_prefill_forward": Histogram(STAGE_BUCKETS),
        }
        self.http_requests: dict[tuple[str, str], int] = {}
        self.http_responses: dict[tuple[str, str, int], int] = {}
        self.http_active: dict[tuple[str, str], int] = {}
        self.window = SpecWindow()
        self.lifetime_request_steps = 0
        self.lifetime_accept_sum = 0
        self.last_accept_length = 0.0
        self.last_accept_rate = 0.0
        self.last_gen_throughput = 0.0

    # engine observer ---------------------------------------------------------------
    def on_prefill(self, jobs: list[SimJob], duration_us: int) -> None:
        self.counters["prefill_passes"] += 1
        for job in jobs:
            uncached = job.prompt_tokens - job.cached_tokens
            self.counters["prefill_compute"] += uncached
            self.counters["prefill_cache"] += job.cached_tokens
            self.hist["uncached_len"].observe(uncached)
            start = job.prefill_start_ns or job.arrival_ns
            self.hist["queue"].observe(_s(start - job.arrival_ns))
            self.hist["stage_request_process"].observe(0.0)
            self.hist["stage_prefill_forward"].observe(duration_us / 1e6)

    def on_decode_step(self, batch_size: int, accepted_drafts: int, tokens: int) -> None:
        self.counters["decode_passes"] += 1
        self.counters["decode_tokens"] += tokens
        window = self.window
        window.steps += 1
        window.request_steps += batch_size
        window.accepted += accepted_drafts
        window.tokens += tokens
        if window.steps >= self.decode_log_interval:
            self._fold_window()

    def on_finished(self, job: SimJob) -> None:
        c = self.counters
        c["num_requests"] += 1
        c["prompt_tokens"] += job.prompt_tokens
        c["generation_tokens"] += job.produced
        c["cached_tokens"] += job.cached_tokens
        if job.spec is not None:
            c["spec_verify_calls"] += job.spec.verify_ct
        self.hist["prompt_len"].observe(job.prompt_tokens)
        self.hist["gen_len"].observe(job.produced)
        if job.emit_ns:
            self.hist["ttft"].observe(_s(job.emit_ns[0] - job.arrival_ns))
        self.hist["e2e"].observe(_s((job.finish_ns or job.arrival_ns) - job.arrival_ns))
        self._observe_itl(job)

    def _observe_itl(self, job: SimJob) -> None:
        if not job.stream:
            return
        itl = self.hist["itl"]
        emitted = zip(job.emissions, job.emit_ns, strict=True)
        for (before, before_ns), (count, ns) in itertools.pairwise(emitted):
            new = count - before
            itl.observe(_s(ns - before_ns) / new, new)

    # speculative counters ------------------------------------------------------------
    def _fold_window(self) -> None:
        window = self.window
        elapsed = max(1, time.perf_counter_ns() - window.start_ns)
        self.last_gen_throughput = window.tokens / _s(elapsed)
        if self.num_draft_tokens is not None and window.request_steps:
            self.lifetime_request_steps += window.request_steps
            self.lifetime_accept_sum += window.accepted + window.request_steps
            self.last_accept_length = (
                window.accepted + window.request_steps
            ) / window.request_steps
            proposed = window.request_steps * (self.num_draft_tokens - 1)
            self.last_accept_rate = window.accepted / proposed
        self.window = SpecWindow()

    @property
    def avg_spec_accept_length(self) -> float | None:
        """Cumulative accept length since start or the last reset; None before a window closed."""
        if self.num_draft_tokens is None or self.lifetime_request_steps == 0:
            return None
        return self.lifetime_accept_sum / self.lifetime_request_steps

    def reset_spec(self) -> None:
        """What a successful ``/flush_cache`` does to the speculative counters."""
        self.lifetime_request_steps = 0
        self.lifetime_accept_sum = 0
        self.window = SpecWindow()

    # HTTP middleware ----------------------------------------------------------------
    def http_started(self, endpoint: str, method: str) -> None:
        key = (endpoint, method)
        self.http_requests[key] = self.http_requests.get(key, 0) + 1
        self.http_active[key] = self.http_active.get(key, 0) + 1

    def http_finished(self, endpoint: str, method: str, status: int) -> None:
        self.http_active[(endpoint, method)] -= 1
        key3 = (endpoint, method, status)
        self.http_responses[key3] = self.http_responses.get(key3, 0) + 1
