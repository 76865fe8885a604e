"""Prometheus text exposition of a simulated server, in SGLang 0.5.16's names and order.

The family list, label sets, help strings and bucket bounds follow the real
``/metrics`` captures: tokenizer-side series carry ``engine_type`` and
``model_name``; scheduler-side series add ``moe_ep_rank``, ``pp_rank`` and
``tp_rank``. ``sglang:spec_verify_calls_total`` exists only on speculative servers;
the ``sglang:spec_*`` gauges exist on every server (0 on a baseline). As with
prometheus_client's labelled series, ``cached_tokens_total``,
``get_loads_duration_seconds`` and ``inter_token_latency_seconds`` appear only once
observed. Values are rendered like prometheus_client's ``floatToGoString``. Pure.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from specproxy.sim.stats import Histogram, ServerStats

_ROUTING_BUCKETS = (
    ("0", "1"),
    ("1", "2"),
    ("2", "3"),
    ("3", "5"),
    ("5", "7"),
    ("7", "10"),
    ("10", "20"),
    ("20", "50"),
    ("50", "100"),
    ("100", "200"),
    ("200", "+Inf"),
)


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
    evictable_tokens: int


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


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{labels[k]}"' for k in sorted(labels))
    return "{" + inner + "}"


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP sglang:{name} {help_text}")
        self.lines.append(f"# TYPE sglang:{name} {kind}")

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        self.lines.append(f"sglang:{name}{_labels(labels)} {format_value(value)}")

    def histogram(self, name: str, labels: dict[str, str], hist: Histogram) -> None:
        self.sample(f"{name}_sum", labels, hist.total)
        for bound, count in zip(hist.bounds, hist.counts, strict=True):
            self.sample(f"{name}_bucket", {**labels, "le": format_value(bound)}, count)
        self.sample(f"{name}_bucket", {**labels, "le": "+Inf"}, hist.count)
        self.sample(f"{name}_count", labels, hist.count)


def _http(out: _Text, stats: ServerStats) -> None:
    out.family(
        "process_cpu_seconds_total",
        "counter",
        "Total CPU time consumed by this process (user + system)",
    )
    out.sample(
        "process_cpu_seconds_total", {"component": "tokenizer"}, os.times().user + os.times().system
    )
    out.sample("process_cpu_seconds_total", {"component": "detokenizer"}, 0.0)
    out.family(
        "http_requests_total", "counter", "Total number of HTTP requests by endpoint and method"
    )
    for (endpoint, method), n in stats.http_requests.items():
        out.sample("http_requests_total", {"endpoint": endpoint, "method": method}, n)
    out.family(
        "http_responses_total",
        "counter",
        "Total number of HTTP responses by endpoint and status code",
    )
    for (endpoint, method, status), n in stats.http_responses.items():
        labels = {"endpoint": endpoint, "method": method, "status_code": str(status)}
        out.sample("http_responses_total", labels, n)


def _tokenizer(out: _Text, stats: ServerStats, tok: dict[str, str], speculative: bool) -> None:
    c = stats.counters
    counters = [
        ("prompt_tokens_total", "Number of prefill tokens processed.", c["prompt_tokens"]),
        (
            "generation_tokens_total",
            "Number of generation tokens processed.",
            c["generation_tokens"],
        ),
    ]
    if speculative:
        counters.append(
            (
                "spec_verify_calls_total",
                "Number of speculative decoding verification calls.",
                c["spec_verify_calls"],
            )
        )
    counters.append(("num_requests_total", "Number of requests processed.", c["num_requests"]))
    for name, help_text, value in counters:
        out.family(name, "counter", help_text)
        out.sample(name, tok, value)
    if c["cached_tokens"]:
        out.family(
            "cached_tokens_total",
            "counter",
            "Number of cached prompt tokens by source (device/host/storage).",
        )
        out.sample("cached_tokens_total", {**tok, "cache_source": "device"}, c["cached_tokens"])
    out.family("routing_keys_active", "gauge", "Number of unique routing keys with active requests")
    out.sample("routing_keys_active", {}, 0.0)
    out.family("http_requests_active", "gauge", "Number of currently active HTTP requests")
    for (endpoint, method), n in stats.http_active.items():
        out.sample("http_requests_active", {"endpoint": endpoint, "method": method}, n)
    h = stats.hist
    hists = [
        ("time_to_first_token_seconds", "Histogram of time to first token in seconds.", h["ttft"]),
        (
            "e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            h["e2e"],
        ),
        ("prompt_tokens_histogram", "Histogram of prompt token length.", h["prompt_len"]),
        (
            "uncached_prompt_tokens_histogram",
            "Histogram of uncached (compute) prompt token length.",
            h["uncached_len"],
        ),
        ("generation_tokens_histogram", "Histogram of generation token length.", h["gen_len"]),
        (
            "get_loads_duration_seconds",
            "Time spent serving /v1/loads requests (seconds).",
            h["loads"],
        ),
        ("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", h["itl"]),
    ]
    for name, help_text, hist in hists:
        if name in ("get_loads_duration_seconds", "inter_token_latency_seconds") and not hist.count:
            continue
        out.family(name, "histogram", help_text)
        out.histogram(name, tok, hist)


def _scheduler_gauges(view: SchedulerView, stats: ServerStats) -> list[tuple[str, str, float]]:
    free = view.max_total_num_tokens - view.used_tokens
    spec = view.speculative
    return [
        (
            "max_total_num_tokens",
            "Maximum total number of tokens in the KV cache pool.",
            view.max_total_num_tokens,
        ),
        ("engine_startup_time", "The time taken for the engine to start up.", 0.0),
        ("engine_load_weights_time", "The time taken for the engine to load weights.", 0.0),
        ("page_size", "KV cache page size in tokens.", 1.0),
        ("num_pages", "Number of KV cache pages.", view.max_total_num_tokens),
        ("context_len", "Maximum context length.", view.context_len),
        (
            "startup_available_gpu_memory_gb",
            "Available GPU memory in GB at startup.",
            66.68157958984375,
        ),
        ("num_running_reqs", "The number of running requests.", view.running),
        ("num_queue_reqs", "The number of requests in the waiting queue.", view.waiting),
        ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue.", 0.0),
        ("gen_throughput", "The generation throughput (token/s).", stats.last_gen_throughput),
        ("cache_hit_rate", "The prefix cache hit rate.", 0.0),
        ("decode_sum_seq_lens", "The sum of all sequence lengths in decode.", view.used_tokens),
        ("token_usage", "The token usage.", view.used_tokens / max(1, view.max_total_num_tokens)),
        (
            "full_token_usage",
            "The token usage for full attention layers.",
            view.used_tokens / max(1, view.max_total_num_tokens),
        ),
        ("swa_token_usage", "The token usage for SWA layers.", 0.0),
        ("mamba_usage", "The token usage for Mamba layers.", 0.0),
        ("num_used_tokens", "The number of used tokens.", view.used_tokens),
        (
            "kv_available_tokens",
            "Number of free token slots in the KV cache pool.",
            free - view.evictable_tokens,
        ),
        (
            "kv_evictable_tokens",
            "Number of evictable (radix-cached) token slots in the KV cache pool.",
            view.evictable_tokens,
        ),
        (
            "kv_used_tokens",
            "Number of actively used token slots in the KV cache pool.",
            view.used_tokens,
        ),
        (
            "swa_available_tokens",
            "Number of free token slots in the SWA pool (hybrid-SWA only).",
            0.0,
        ),
        (
            "swa_evictable_tokens",
            "Number of evictable (radix-cached) token slots in the SWA pool.",
            0.0,
        ),
        ("swa_used_tokens", "Number of actively used token slots in the SWA pool.", 0.0),
        (
            "mamba_available_tokens",
            "Number of free state slots in the mamba SSM pool (hybrid-SSM only).",
            0.0,
        ),
        (
            "mamba_evictable_tokens",
            "Number of evictable (radix-cached) state slots in the mamba SSM pool.",
            0.0,
        ),
        ("mamba_used_tokens", "Number of actively used state slots in the mamba SSM pool.", 0.0),
        (
            "spec_accept_length",
            "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            stats.last_accept_length if spec else 0.0,
        ),
        (
            "spec_accept_rate",
            "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            stats.last_accept_rate if spec else 0.0,
        ),
        (
            "spec_cap_length",
            "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot (0 when no cap is scheduled).",
            0.0,
        ),
        (
            "spec_block_accept_length",
            "Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; exact only in DSpark cap-accept mode).",
            0.0,
        ),
        (
            "spec_num_steps",
            "Currently active speculative_num_steps.",
            view.num_steps if spec else 0.0,
        ),
        (
            "spec_num_draft_tokens",
            "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
            view.num_draft_tokens if spec else 0.0,
        ),
        (
            "num_prefill_bootstrap_queue_reqs",
            "The number of requests in the prefill bootstrap queue.",
            0.0,
        ),
        (
            "num_prefill_inflight_queue_reqs",
            "The number of requests in the prefill inflight queue.",
            0.0,
        ),
        (
            "num_decode_prealloc_queue_reqs",
            "The number of requests in the decode prealloc queue.",
            0.0,
        ),
        (
            "num_decode_transfer_queue_reqs",
            "The number of requests in the decode transfer queue.",
            0.0,
        ),
        (
            "pending_prealloc_token_usage",
            "The token usage for pending preallocated tokens (not preallocated yet).",
            0.0,
        ),
        ("utilization", "The utilization.", 0.0),
        ("fwd_occupancy", "Forward pass GPU occupancy percentage.", math.nan),
        ("new_token_ratio", "The new token ratio.", 0.7),
        ("is_cuda_graph", "Whether the batch is using CUDA graph.", 0.0),
        ("num_unique_running_routing_keys", "Number of unique routing keys in running batch.", 0.0),
    ]


def _scheduler(out: _Text, view: SchedulerView, stats: ServerStats, sched: dict[str, str]) -> None:
    for name, help_text, value in _scheduler_gauges(view, stats):
        out.family(name, "gauge", help_text)
        out.sample(name, sched, value)
    for name, what in (
        ("routing_key_running_req_count", "running"),
        ("routing_key_all_req_count", "running+waiting"),
    ):
        out.family(
            name,
            "gauge",
            f"Distribution of routing keys by {what} request count (gt < count <= le).",
        )
        for gt, le in _ROUTING_BUCKETS:
            out.sample(name, {**sched, "gt": gt, "le": le}, 0.0)
    out.family(
        "per_stage_req_latency_seconds", "histogram", "The latency of each stage of requests."
    )
    for stage in ("request_process", "prefill_forward"):
        out.histogram(
            "per_stage_req_latency_seconds", {**sched, "stage": stage}, stats.hist[f"stage_{stage}"]
        )
    out.family("queue_time_seconds", "histogram", "Histogram of queueing time in seconds.")
    out.histogram("queue_time_seconds", sched, stats.hist["queue"])
    c = stats.counters
    out.family(
        "cuda_graph_passes_total",
        "counter",
        "Total number of forward passes categorized by CUDA graph.",
    )
    out.sample("cuda_graph_passes_total", {**sched, "mode": "prefill_none"}, c["prefill_passes"])
    out.sample("cuda_graph_passes_total", {**sched, "mode": "decode_none"}, c["decode_passes"])
    out.family(
        "realtime_tokens_total",
        "counter",
        "Total number of tokens processed (updated on each log interval). mode: prefill_compute, prefill_cache, decode.",
    )
    for mode, key in (
        ("prefill_compute", "prefill_compute"),
        ("decode", "decode_tokens"),
        ("prefill_cache", "prefill_cache"),
    ):
        out.sample("realtime_tokens_total", {**sched, "mode": mode}, c[key])
    with_pid = {**sched, "pid": str(os.getpid())}
    out.family("num_retracted_reqs", "gauge", "The number of retracted requests.")
    out.sample("num_retracted_reqs", with_pid, 0.0)
    out.family("num_paused_reqs", "gauge", "The number of paused requests by async weight sync.")
    out.sample("num_paused_reqs", with_pid, 0.0)


def render(stats: ServerStats, view: SchedulerView) -> str:
    """The whole ``/metrics`` body."""
    tok = {"engine_type": "unified", "model_name": view.model_name}
    sched = {**tok, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
    out = _Text()
    _http(out, stats)
    _tokenizer(out, stats, tok, view.speculative)
    _scheduler(out, view, stats, sched)
    return "\n".join(out.lines) + "\n"
