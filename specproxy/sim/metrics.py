"""Prometheus text exposition of a simulated server, in SGLang 0.5.16's names and order.

The family list, label sets, help strings and bucket bounds follow the real
``/metrics`` captures: tokenizer-side series carry ``engine_type`` and
``model_name``; scheduler-side series add ``moe_ep_rank``, ``pp_rank`` and
``tp_rank``. ``sglang:spec_verify_calls_total`` exists only on speculative servers;
the ``sglang:spec_*`` gauges exist on every server (0 on a baseline). As with
prometheus_client's labelled series, ``cached_tokens_total``,
``get_loads_duration_seconds`` and ``inter_token_latency_seconds`` appear only once
observed. Values are rendered like prometheus_client's ``floatToGoString``. Pure
apart from reading the process CPU time.
"""

from __future__ import annotations

import itertools
import math
import os
from dataclasses import dataclass

from specproxy.sim.stats import Histogram, ServerStats

_ROUTING_BUCKETS = ("0", "1", "2", "3", "5", "7", "10", "20", "50", "100", "200", "+Inf")

_HELP = {
    "process_cpu_seconds_total": "Total CPU time consumed by this process (user + system)",
    "http_requests_total": "Total number of HTTP requests by endpoint and method",
    "http_responses_total": "Total number of HTTP responses by endpoint and status code",
    "prompt_tokens_total": "Number of prefill tokens processed.",
    "generation_tokens_total": "Number of generation tokens processed.",
    "spec_verify_calls_total": "Number of speculative decoding verification calls.",
    "num_requests_total": "Number of requests processed.",
    "cached_tokens_total": "Number of cached prompt tokens by source (device/host/storage).",
    "routing_keys_active": "Number of unique routing keys with active requests",
    "http_requests_active": "Number of currently active HTTP requests",
    "time_to_first_token_seconds": "Histogram of time to first token in seconds.",
    "e2e_request_latency_seconds": "Histogram of End-to-end request latency in seconds",
    "prompt_tokens_histogram": "Histogram of prompt token length.",
    "uncached_prompt_tokens_histogram": "Histogram of uncached (compute) prompt token length.",
    "generation_tokens_histogram": "Histogram of generation token length.",
    "get_loads_duration_seconds": "Time spent serving /v1/loads requests (seconds).",
    "inter_token_latency_seconds": "Histogram of inter-token latency in seconds.",
    "routing_key_running_req_count": "Distribution of routing keys by running request count (gt < count <= le).",
    "routing_key_all_req_count": "Distribution of routing keys by running+waiting request count (gt < count <= le).",
    "per_stage_req_latency_seconds": "The latency of each stage of requests.",
    "queue_time_seconds": "Histogram of queueing time in seconds.",
    "cuda_graph_passes_total": "Total number of forward passes categorized by CUDA graph.",
    "realtime_tokens_total": "Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.",
    "num_retracted_reqs": "The number of retracted requests.",
    "num_paused_reqs": "The number of paused requests by async weight sync.",
}

# Scheduler gauges in the captured order; values not set in _gauge_values are 0.
_SCHEDULER_GAUGES = (
    ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
    ("engine_startup_time", "The time taken for the engine to start up."),
    ("engine_load_weights_time", "The time taken for the engine to load weights."),
    ("page_size", "KV cache page size in tokens."),
    ("num_pages", "Number of KV cache pages."),
    ("context_len", "Maximum context length."),
    ("startup_available_gpu_memory_gb", "Available GPU memory in GB at startup."),
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("cache_hit_rate", "The prefix cache hit rate."),
    ("decode_sum_seq_lens", "The sum of all sequence lengths in decode."),
    ("token_usage", "The token usage."),
    ("full_token_usage", "The token usage for full attention layers."),
    ("swa_token_usage", "The token usage for SWA layers."),
    ("mamba_usage", "The token usage for Mamba layers."),
    ("num_used_tokens", "The number of used tokens."),
    ("kv_available_tokens", "Number of free token slots in the KV cache pool."),
    ("kv_evictable_tokens", "Number of evictable (radix-cached) token slots in the KV cache pool."),
    ("kv_used_tokens", "Number of actively used token slots in the KV cache pool."),
    ("swa_available_tokens", "Number of free token slots in the SWA pool (hybrid-SWA only)."),
    ("swa_evictable_tokens", "Number of evictable (radix-cached) token slots in the SWA pool."),
    ("swa_used_tokens", "Number of actively used token slots in the SWA pool."),
    ("mamba_available_tokens", "Number of free state slots in the mamba SSM pool (hybrid-SSM only)."),
    ("mamba_evictable_tokens", "Number of evictable (radix-cached) state slots in the mamba SSM pool."),
    ("mamba_used_tokens", "Number of actively used state slots in the mamba SSM pool."),
    ("spec_accept_length", "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward)."),
    ("spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."),
    ("spec_cap_length", "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot (0 when no cap is scheduled)."),
    ("spec_block_accept_length", "Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; exact only in DSpark cap-accept mode)."),
    ("spec_num_steps", "Currently active speculative_num_steps."),
    ("spec_num_draft_tokens", "Currently active speculative_num_draft_tokens (decouples from steps under topk>1)."),
    ("num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue."),
    ("num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."),
    ("num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."),
    ("num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."),
    ("pending_prealloc_token_usage", "The token usage for pending preallocated tokens (not preallocated yet)."),
    ("utilization", "The utilization."),
    ("fwd_occupancy", "Forward pass GPU occupancy percentage."),
    ("new_token_ratio", "The new token ratio."),
    ("is_cuda_graph", "Whether the batch is using CUDA graph."),
    ("num_unique_running_routing_keys", "Number of unique routing keys in running batch."),
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class SchedulerView:
    """What the scheduler gauges show at scrape time."""

    model_name: str
    speculative: bool
    num_steps: int
    num_draft_tokens: int
    running: int
    waiting: int
    max_total_num_tokens: int
    context_len: int
    used_tokens: int


def format_value(value: float) -> str:
    """A sample value as prometheus_client writes it (Go float formatting)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6 and "e" not in text:
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


class _Text:
    """Accumulates exposition lines; label names are written sorted, as prometheus_client does."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str | None = None) -> None:
        self.lines.append(f"# HELP sglang:{name} {help_text or _HELP[name]}")
        self.lines.append(f"# TYPE sglang:{name} {kind}")

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        inner = ",".join(f'{k}="{labels[k]}"' for k in sorted(labels))
        rendered = "{" + inner + "}" if inner else ""
        self.lines.append(f"sglang:{name}{rendered} {format_value(value)}")

    def counter(self, name: str, labels: dict[str, str], value: float) -> None:
        self.family(name, "counter")
        self.sample(name, labels, value)

    def histogram(self, name: str, labels: dict[str, str], hist: Histogram) -> None:
        self.sample(f"{name}_sum", labels, hist.total)
        for bound, count in zip(hist.bounds, hist.cumulative(), strict=True):
            self.sample(f"{name}_bucket", {**labels, "le": format_value(bound)}, count)
        self.sample(f"{name}_bucket", {**labels, "le": "+Inf"}, hist.count)
        self.sample(f"{name}_count", labels, hist.count)


def _http(out: _Text, stats: ServerStats) -> None:
    out.family("process_cpu_seconds_total", "counter")
    cpu = os.times()
    out.sample("process_cpu_seconds_total", {"component": "tokenizer"}, cpu.user + cpu.system)
    out.sample("process_cpu_seconds_total", {"component": "detokenizer"}, 0.0)
    out.family("http_requests_total", "counter")
    for (endpoint, method), n in stats.http_requests.items():
        out.sample("http_requests_total", {"endpoint": endpoint, "method": method}, n)
    out.family("http_responses_total", "counter")
    for (endpoint, method, status), n in stats.http_responses.items():
        labels = {"endpoint": endpoint, "method": method, "status_code": str(status)}
        out.sample("http_responses_total", labels, n)


def _tokenizer(out: _Text, stats: ServerStats, tok: dict[str, str], speculative: bool) -> None:
    c = stats.counters
    out.counter("prompt_tokens_total", tok, c["prompt_tokens"])
    out.counter("generation_tokens_total", tok, c["generation_tokens"])
    if speculative:
        out.counter("spec_verify_calls_total", tok, c["spec_verify_calls"])
    out.counter("num_requests_total", tok, c["num_requests"])
    if c["cached_tokens"]:
        out.counter("cached_tokens_total", {**tok, "cache_source": "device"}, c["cached_tokens"])
    out.family("routing_keys_active", "gauge")
    out.sample("routing_keys_active", {}, 0.0)
    out.family("http_requests_active", "gauge")
    for (endpoint, method), n in stats.http_active.items():
        out.sample("http_requests_active", {"endpoint": endpoint, "method": method}, n)
    h = stats.hist
    histograms = (
        ("time_to_first_token_seconds", h["ttft"]),
        ("e2e_request_latency_seconds", h["e2e"]),
        ("prompt_tokens_histogram", h["prompt_len"]),
        ("uncached_prompt_tokens_histogram", h["uncached_len"]),
        ("generation_tokens_histogram", h["gen_len"]),
        ("get_loads_duration_seconds", h["loads"]),
        ("inter_token_latency_seconds", h["itl"]),
    )
    lazy = ("get_loads_duration_seconds", "inter_token_latency_seconds")
    for name, hist in histograms:
        if name in lazy and not hist.count:
            continue
        out.family(name, "histogram")
        out.histogram(name, tok, hist)


def _gauge_values(view: SchedulerView, stats: ServerStats) -> dict[str, float]:
    total, used = view.max_total_num_tokens, view.used_tokens
    values = {
        "max_total_num_tokens": total,
        "page_size": 1.0,
        "num_pages": total,
        "context_len": view.context_len,
        "startup_available_gpu_memory_gb": 139.8,
        "num_running_reqs": view.running,
        "num_queue_reqs": view.waiting,
        "gen_throughput": stats.last_gen_throughput,
        "decode_sum_seq_lens": used,
        "token_usage": used / max(1, total),
        "full_token_usage": used / max(1, total),
        "num_used_tokens": used,
        "kv_available_tokens": total - used,
        "kv_used_tokens": used,
        "fwd_occupancy": math.nan,
        "new_token_ratio": 0.7,
    }
    if view.speculative:
        values.update(
            spec_accept_length=stats.last_accept_length,
            spec_accept_rate=stats.last_accept_rate,
            spec_num_steps=view.num_steps,
            spec_num_draft_tokens=view.num_draft_tokens,
        )
    return values


def _scheduler(out: _Text, view: SchedulerView, stats: ServerStats, sched: dict[str, str]) -> None:
    values = _gauge_values(view, stats)
    for name, help_text in _SCHEDULER_GAUGES:
        out.family(name, "gauge", help_text)
        out.sample(name, sched, values.get(name, 0.0))
    for name in ("routing_key_running_req_count", "routing_key_all_req_count"):
        out.family(name, "gauge")
        for gt, le in itertools.pairwise(_ROUTING_BUCKETS):
            out.sample(name, {**sched, "gt": gt, "le": le}, 0.0)
    out.family("per_stage_req_latency_seconds", "histogram")
    for stage in ("request_process", "prefill_forward"):
        labels = {**sched, "stage": stage}
        out.histogram("per_stage_req_latency_seconds", labels, stats.hist[f"stage_{stage}"])
    out.family("queue_time_seconds", "histogram")
    out.histogram("queue_time_seconds", sched, stats.hist["queue"])
    _scheduler_counters(out, stats, sched)


def _scheduler_counters(out: _Text, stats: ServerStats, sched: dict[str, str]) -> None:
    c = stats.counters
    out.family("cuda_graph_passes_total", "counter")
    out.sample("cuda_graph_passes_total", {**sched, "mode": "prefill_none"}, c["prefill_passes"])
    out.sample("cuda_graph_passes_total", {**sched, "mode": "decode_none"}, c["decode_passes"])
    out.family("realtime_tokens_total", "counter")
    modes = (
        ("prefill_compute", "prefill_compute"),
        ("decode", "decode_tokens"),
        ("prefill_cache", "prefill_cache"),
    )
    for mode, key in modes:
        out.sample("realtime_tokens_total", {**sched, "mode": mode}, c[key])
    with_pid = {**sched, "pid": str(os.getpid())}
    for name in ("num_retracted_reqs", "num_paused_reqs"):
        out.family(name, "gauge")
        out.sample(name, with_pid, 0.0)


def render_exposition(stats: ServerStats, view: SchedulerView) -> str:
    """The whole ``/metrics`` body."""
    tok = {"engine_type": "unified", "model_name": view.model_name}
    sched = {**tok, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
    out = _Text()
    _http(out, stats)
    _tokenizer(out, stats, tok, view.speculative)
    _scheduler(out, view, stats, sched)
    return "\n".join(out.lines) + "\n"
