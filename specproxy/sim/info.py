"""Server-description bodies: ``/server_info``, ``/model_info``, ``/v1/models``, loads.

``/server_info`` starts from the key set and values of a real SGLang 0.5.16 baseline
(``sglang_0_5_16_server_info.json``, taken from the captures), then overwrites what
this simulated launch decides: host, port, model and served name, revision, API key
(returned verbatim, as SGLang does, so redaction downstream can be tested), memory
fraction, metrics switch, decode log interval, every resolved ``speculative_*``
field, ``max_running_requests`` (null on a default baseline, 48 on a default
speculative server) and the random seed. ``internal_states[0]`` repeats the server
args and adds live state; ``avg_spec_accept_length`` appears there only on a
speculative server after its first decode log window. Newer ``--sglang-version``
values add the keys those releases added (``startup_time`` 0.5.17, ``launch_command``
0.5.20, ``frontend`` 0.5.21). Every body also says ``"simulated": true`` where a real
server has no such key: ``/server_info`` only. Pure apart from reading the template.
"""

from __future__ import annotations

import copy
import datetime
import functools
import json
import time
from dataclasses import dataclass
from importlib import resources
from typing import Any

from specproxy.sim.config import SimConfig, SpecSettings

TEMPLATE_NAME = "sglang_0_5_16_server_info.json"
MAX_TOTAL_NUM_TOKENS_BASE = 760_000
MAX_TOTAL_NUM_TOKENS_SPEC = 700_000
KV_BYTES_PER_TOKEN = 131_072  # Llama-3-8B: 32 layers x 8 KV heads x 128 dims x K,V x bf16
WEIGHT_GB = 16.06


@functools.cache
def _template() -> dict[str, Any]:
    text = resources.files("specproxy.sim").joinpath(TEMPLATE_NAME).read_text("utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


@dataclass(frozen=True, slots=True)
class LiveState:
    """Live figures read at request time."""

    running: int
    waiting: int
    used_tokens: int
    last_gen_throughput: float
    avg_spec_accept_length: float | None
    last_accept_rate: float


def max_total_num_tokens(config: SimConfig, spec: SpecSettings | None) -> int:
    if config.max_total_tokens is not None:
        return config.max_total_tokens
    return MAX_TOTAL_NUM_TOKENS_SPEC if spec is not None else MAX_TOTAL_NUM_TOKENS_BASE


GRAPH_GB = {False: 12.75, True: 4.55}  # decode-graph memory with graphs on (real NEXTN pair)
MODEL_TYPES = {"LlamaForCausalLM": "llama", "DeepseekV3ForCausalLM": "deepseek_v3",
               "MiMoForCausalLM": "mimo", "Qwen2ForCausalLM": "qwen2"}  # fmt: skip


def _graphs(args: dict[str, Any], config: SimConfig) -> None:
    """Decode CUDA graphs on (``--cuda-graph-max-bs``), as a real server reports them."""
    if config.cuda_graph_max_bs is None:
        return
    args.update(cuda_graph_backend_decode=None, cuda_graph_backend_prefill=None,
                cuda_graph_max_bs_decode=config.cuda_graph_max_bs)  # fmt: skip
    graphs = args["cuda_graph_config"]
    graphs["decode"].update(
        backend="full",
        max_bs=config.cuda_graph_max_bs,
        bs=[b for b in graphs["decode"]["bs"] if b <= config.cuda_graph_max_bs],
    )


def launch_command(config: SimConfig) -> str:
    """The ``python -m sglang.launch_server`` argv this simulated launch stands for."""
    args = ["python3", "-m", "sglang.launch_server", "--model-path", config.model_path]
    args += ["--host", config.host, "--port", str(config.port)]
    optional: list[tuple[str, object]] = [
        ("--revision", config.revision),
        ("--served-model-name", config.served_model_name),
        ("--api-key", config.api_key),
        ("--max-running-requests", config.max_running_requests),
        ("--speculative-algorithm", config.speculative_algorithm),
        ("--speculative-draft-model-path", config.speculative_draft_model_path),
        ("--speculative-num-steps", config.speculative_num_steps),
        ("--speculative-eagle-topk", config.speculative_eagle_topk),
        ("--speculative-num-draft-tokens", config.speculative_num_draft_tokens),
        (
            "--speculative-accept-threshold-single",
            _lossy(config.speculative_accept_threshold_single),
        ),
        ("--speculative-accept-threshold-acc", _lossy(config.speculative_accept_threshold_acc)),
        ("--random-seed", config.random_seed),
        ("--mem-fraction-static", config.mem_fraction_static),
    ]
    args += [f"{flag} {value}" for flag, value in optional if value is not None]
    if config.speculative_adaptive:
        args.append("--speculative-adaptive")
    if config.enable_metrics:
        args.append("--enable-metrics")
    return " ".join(args)


def _lossy(threshold: float) -> float | None:
    """A threshold for the launch command: only when it relaxes acceptance."""
    return threshold if threshold < 1.0 else None


def server_args(config: SimConfig, spec: SpecSettings | None) -> dict[str, Any]:
    """The flat server-args part of ``/server_info`` (template plus this launch)."""
    args: dict[str, Any] = copy.deepcopy(_template()["server_info"])
    for key in ("status", "max_total_num_tokens", "max_req_input_len", "version", "kv_events"):
        args.pop(key, None)
    args.update(
        host=config.host,
        port=config.port,
        model_path=config.model_path,
        tokenizer_path=config.model_path,
        served_model_name=config.model_name,
        revision=config.revision,
        api_key=config.api_key,
        max_running_requests=config.reported_max_running_requests,
        random_seed=config.reported_random_seed,
        enable_metrics=config.enable_metrics,
        decode_log_interval=config.decode_log_interval,
    )
    if config.mem_fraction_static is not None:
        args["mem_fraction_static"] = config.mem_fraction_static
    if config.max_total_tokens is not None:
        args["max_total_tokens"] = config.max_total_tokens
    if spec is not None:
        args.update(
            speculative_algorithm=spec.algorithm,
            speculative_num_steps=spec.num_steps,
            speculative_eagle_topk=spec.eagle_topk,
            speculative_num_draft_tokens=spec.num_draft_tokens,
            speculative_draft_model_path=spec.draft_model_path,
            speculative_draft_model_revision=spec.draft_model_revision,
            speculative_adaptive=config.speculative_adaptive,
            speculative_accept_threshold_single=config.speculative_accept_threshold_single,
            speculative_accept_threshold_acc=config.speculative_accept_threshold_acc,
            cuda_graph_config=copy.deepcopy(_template()["speculative"]["cuda_graph_config"]),
        )
    _graphs(args, config)
    return args


def _internal_state(
    config: SimConfig, spec: SpecSettings | None, args: dict[str, Any], live: LiveState
) -> dict[str, Any]:
    template = _template()
    state = {k: v for k, v in args.items() if k != "custom_sigquit_handler"}
    state.update(copy.deepcopy(template["internal_differs"]))
    extras = copy.deepcopy(template["internal_only"])
    effective = config.effective_max_running_requests
    state["pp_max_micro_batch_size"] = effective
    total = max_total_num_tokens(config, spec)
    graph = GRAPH_GB[spec is not None] if config.cuda_graph_max_bs is not None else 0
    extras.update(
        last_gen_throughput=live.last_gen_throughput,
        memory_usage={
            "weight": WEIGHT_GB,
            "kvcache": round(total * KV_BYTES_PER_TOKEN / 1e9, 2),
            "token_capacity": total,
            "graph": graph,
        },
        effective_max_running_requests_per_dp=effective,
    )
    mutations = extras["_runtime_mutations"]
    if spec is not None:
        extras["max_speculative_num_draft_tokens"] = spec.num_draft_tokens
    if spec is not None and spec.algorithm != "NGRAM":  # a draft worker matches the context
        state["context_length"] = config.context_length
        mutations = copy.deepcopy(template["speculative"]["_runtime_mutations"])
        mutations[1][1]["context_length"] = config.context_length
    mutations[-1][1]["pp_max_micro_batch_size"] = effective
    extras["_runtime_mutations"] = mutations
    state.update(extras)
    if live.avg_spec_accept_length is not None:
        state["avg_spec_accept_length"] = live.avg_spec_accept_length
    return state


def server_info(config: SimConfig, spec: SpecSettings | None, live: LiveState) -> dict[str, Any]:
    """The ``/server_info`` (and ``/get_server_info``) body."""
    args = server_args(config, spec)
    info: dict[str, Any] = {}
    for key, value in _template()["server_info"].items():
        info[key] = args.get(key, value)
    info.update(
        status="ready",
        max_total_num_tokens=max_total_num_tokens(config, spec),
        max_req_input_len=config.context_length - 6,
        internal_states=[_internal_state(config, spec, args, live)],
        version=config.sglang_version,
    )
    version = config.version
    if version >= (0, 5, 17):
        info["startup_time"] = {
            "load_weight": 0.0,
            "kv_cache_allocation": 0.0,
            "scheduler_e2e": 0.0,
            "tokenizer_e2e": 0.0,
            "cuda_graph": {},
        }
    if version >= (0, 5, 20):
        info["launch_command"] = launch_command(config)
    if version >= (0, 5, 21):
        info["frontend"] = "python"
    info["simulated"] = True
    return info


def model_info(config: SimConfig) -> dict[str, Any]:
    """The ``/model_info`` (and ``/get_model_info``) body."""
    info: dict[str, Any] = {
        "model_path": config.model_path,
        "tokenizer_path": config.model_path,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": MODEL_TYPES.get(config.architecture, config.architecture.lower()),
        "architectures": [config.architecture],
    }
    if config.version >= (0, 5, 18):
        info.update(
            served_model_name=config.model_name,
            load_format="auto",
            reasoning_parser=None,
            tool_call_parser=None,
        )
    if config.version >= (0, 5, 21):
        info["disaggregation_mode"] = "null"
    return info


def models_list(config: SimConfig, *, created: int) -> dict[str, Any]:
    """The ``/v1/models`` body."""
    name = config.model_name
    card = {
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "sglang",
        "root": name,
        "parent": None,
        "max_model_len": config.context_length,
    }
    return {"object": "list", "data": [card]}


_DISAGGREGATION_IDLE: dict[str, Any] = {
    "mode": "null",
    "prefill_bootstrap_queue_reqs": 0,
    "prefill_inflight_queue_reqs": 0,
    "decode_prealloc_queue_reqs": 0,
    "decode_transfer_queue_reqs": 0,
    "decode_retracted_queue_reqs": 0,
    "kv_transfer_speed_gb_s": 0.0,
    "kv_transfer_latency_ms": 0.0,
}


def loads_prometheus(body: dict[str, Any]) -> str:
    """``/v1/loads?format=prometheus``: gauges ``sglang_<key>`` / ``sglang_spec_<key>``."""
    lines: list[str] = []
    for load in body["loads"]:
        rank = f'{{dp_rank="{load["dp_rank"]}"}}'
        numeric = {k: v for k, v in load.items() if isinstance(v, int | float) and k != "dp_rank"}
        for key, value in numeric.items():
            lines.append(f"sglang_{key}{rank} {float(value)}")
        for key, value in load.get("speculative", {}).items():
            lines.append(f"sglang_spec_{key}{rank} {float(value)}")
    return "\n".join(lines) + "\n"


def loads(config: SimConfig, spec: SpecSettings | None, live: LiveState) -> dict[str, Any]:
    """The ``/v1/loads`` body (JSON format)."""
    now = time.time()
    total = max_total_num_tokens(config, spec)
    load: dict[str, Any] = {
        "timestamp": now,
        "dp_rank": 0,
        "num_running_reqs": live.running,
        "num_waiting_reqs": live.waiting,
        "num_waiting_uncached_tokens": 0,
        "num_used_tokens": live.used_tokens,
        "num_total_tokens": live.used_tokens,
        "max_total_num_tokens": total,
        "max_running_requests": config.effective_max_running_requests,
        "token_usage": round(live.used_tokens / total, 4),
        "gen_throughput": 0.0,
        "cache_hit_rate": 0.0,
        "utilization": 0.0,
        "memory": {
            "weight_gb": WEIGHT_GB,
            "kv_cache_gb": round(total * KV_BYTES_PER_TOKEN / 1e9, 3),
            "graph_gb": GRAPH_GB[spec is not None] if config.cuda_graph_max_bs is not None else 0.0,
            "token_capacity": total,
        },
    }
    if spec is not None and live.avg_spec_accept_length is not None:
        load["speculative"] = {
            "accept_length": live.avg_spec_accept_length,
            "accept_rate": live.last_accept_rate,
        }
    load["disaggregation"] = dict(_DISAGGREGATION_IDLE)
    load["queues"] = {"waiting": live.waiting, "grammar": 0, "paused": 0, "retracted": 0}
    stamp = datetime.datetime.fromtimestamp(now, tz=datetime.UTC).isoformat()
    return {"timestamp": stamp, "version": config.sglang_version, "loads": [load]}


def get_load(live: LiveState) -> list[dict[str, Any]]:
    """The deprecated ``/get_load`` body (SGLang <= 0.5.20)."""
    return [
        {
            "dp_rank": 0,
            "num_reqs": live.running,
            "num_waiting_reqs": live.waiting,
            "num_tokens": live.used_tokens,
            "num_pending_tokens": 0,
            "ts_tic": time.monotonic(),
        }
    ]
