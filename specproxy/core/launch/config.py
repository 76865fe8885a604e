"""Launch configurations: canonical JSON, secret redaction, fingerprint (diffs: ``launchdiff``).

A ``LaunchConfig`` merges three sources about one server: what the server reports
(SGLang's ``/server_info`` and ``/model_info``), what the launcher recorded (full
command, nvidia-smi facts, environment) and what the operator declares (commit, GPU,
driver, CUDA, precision, revisions). Everything stored is redacted first: SGLang
returns ``api_key``/``admin_api_key`` verbatim (top level and in every
``internal_states`` entry) and ``--api-key VALUE`` appears in recorded commands.

Sections of the canonical dict: ``server_args`` (every server argument, minus
per-launch noise), ``measured`` (capacities SGLang derived from free GPU memory),
``model_info``, ``facts`` (declared over launcher-recorded), ``launcher``, ``noise``
(port, host, GPU index, seeds drawn at random, timestamps, internal state: stored,
never hashed or diffed; the GPU model is a fact), ``version``, ``kind``, ``simulated``.

The fingerprint is 12 hex digits of sha256 over an explicit allow-list
(docs/sglang.md, Launch identity): version, allow-listed resolved server args (every
``speculative_*`` included), model identity, merged facts, and ``random_seed`` only when
it was set explicitly. Measured capacities (``max_total_num_tokens``...) are *not*
hashed: they move with the GPU memory free at start, and two launches of one
configuration must share a fingerprint; the diff still names them.

Pure: no I/O, no clocks. Knows nothing about HTTP or processes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specproxy.core.launch.diff import (
    ABSENT,
    ConfigDiff,
    Difference,
    SeriesStep,
    diff_data,
    diff_series_data,
    is_speculative_key,
)

__all__ = [  # the diff types live in core.launch.diff and are re-exported here
    "ABSENT",
    "FACT_KEYS",
    "FINGERPRINT_HEX",
    "REDACTED",
    "ConfigDiff",
    "Difference",
    "LaunchConfig",
    "SeriesStep",
    "build_launch_config",
    "canonical_json",
    "compute_fingerprint",
    "diff_configs",
    "diff_series",
    "fingerprint_input",
    "is_secret_key",
    "is_speculative_key",
    "parse_declarations",
    "redact",
    "redact_argv",
    "redact_command",
    "with_launcher",
]

REDACTED = "[redacted]"
FINGERPRINT_HEX = 12

_SECRET_NAMES = frozenset(
    {"api_key", "admin_api_key", "authorization", "hf_token", "token", "password", "secret"}
)
_SQUASHED_SECRETS = frozenset(n.replace("_", "") for n in _SECRET_NAMES)
_SECRET_FLAG = re.compile(
    r"(--[A-Za-z0-9-]*(?:api-key|password|secret|hf-token)(?:=|\s+))(?:'[^']*'|\"[^\"]*\"|\S+)"
)
_BEARER = re.compile(r"(\b[Bb]earer\s+)(?!\[redacted\])[^\s\"',;]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOISE_ARGS = frozenset(
    {"port", "host", "nccl_port", "status", "startup_time", "kv_events", "launch_command",
     "internal_states", "dist_init_addr", "grpc_port", "smg_http_sidecar_port",
     "forward_pass_metrics_ipc_name", "disaggregation_bootstrap_port",
     "encoder_bootstrap_port", "engine_info_bootstrap_port", "file_storage_path",
     "crash_dump_folder", "simulated", "version", "frontend", "base_gpu_id", "gpu_id_step"}
)  # fmt: skip
_MEASURED = ("max_total_num_tokens", "max_req_input_len")
_MEASURED_INTERNAL = ("effective_max_running_requests_per_dp", "memory_usage")
_IDENTITY_ARGS = frozenset(
    {"model_path", "revision", "tokenizer_path", "load_format", "trust_remote_code",
     "context_length", "json_model_override_args", "dtype", "quantization", "kv_cache_dtype",
     "attention_backend", "prefill_attention_backend", "decode_attention_backend",
     "sampling_backend", "page_size", "disable_cuda_graph", "cuda_graph_max_bs_decode",
     "cuda_graph_config", "cuda_graph_backend_decode", "cuda_graph_backend_prefill",
     "enable_torch_compile", "tp_size", "dp_size", "pp_size", "ep_size", "enable_dp_attention",
     "attn_dp_size", "device", "mem_fraction_static", "max_running_requests",
     "max_total_tokens", "chunked_prefill_size", "max_prefill_tokens", "schedule_policy",
     "disable_radix_cache", "disable_overlap_schedule", "enable_mixed_chunk", "stream_interval",
     "incremental_streaming_output", "enable_deterministic_inference", "num_continuous_decode_steps",
     "enable_two_batch_overlap", "moe_runner_backend", "moe_a2a_backend", "grammar_backend",
     "enable_metrics", "decode_log_interval", "enable_cache_report", "enable_multi_layer_eagle"}
)  # fmt: skip
_MODEL_IDENTITY = ("architectures", "model_type", "weight_version", "is_generation")
FACT_KEYS = ("commit", "gpu", "driver", "cuda", "precision", "target_revision", "draft_revision")


def parse_declarations(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` items (``--declare``) as a dict; ValueError naming a bad item or key.

    Keys are the identity facts a server cannot report (``FACT_KEYS``): commit, gpu,
    driver, cuda, precision, target_revision, draft_revision.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key or not value.strip():
            raise ValueError(f"declare: {item!r} is not KEY=VALUE")
        if key not in FACT_KEYS:
            raise ValueError(f"declare: unknown key {key!r} (known: {', '.join(FACT_KEYS)})")
        out[key] = value.strip()
    return out


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, no NaN: the same object always gives the same text."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def is_secret_key(name: str) -> bool:
    """True for names whose values are credentials (``api_key``, ``apiKey``, ``*_password``...)."""
    low = _CAMEL.sub("_", name).lower().replace("-", "_")
    return (
        low.replace("_", "") in _SQUASHED_SECRETS
        or low.endswith(("_api_key", "_secret", "auth_token", "access_token", "hf_token"))
        or "password" in low
        or "secret" in low
    )


def redact_command(text: str) -> str:
    """``--api-key VALUE`` (and other credential flags), and ``Bearer VALUE`` wherever it
    stands, with the value replaced."""
    text = _SECRET_FLAG.sub(lambda m: m.group(1) + REDACTED, text)
    return _BEARER.sub(lambda m: m.group(1) + REDACTED, text)


def redact_argv(argv: Sequence[str]) -> list[str]:
    """An argv list with the value after (or inside) each credential flag replaced."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif arg.startswith("--") and is_secret_key(arg[2:].split("=", 1)[0]):
            hide_next = "=" not in arg
            out.append(arg if hide_next else arg.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(arg)
    return out


def redact(obj: Any) -> Any:
    """A deep copy of ``obj`` with secret-named values and credential flags replaced."""
    if isinstance(obj, Mapping):
        return {
            str(k): (REDACTED if is_secret_key(str(k)) and v is not None else redact(v))
            for k, v in obj.items()
        }
    if isinstance(obj, list | tuple):
        if obj and all(isinstance(a, str) for a in obj):
            return redact_argv([redact_command(a) for a in obj])
        return [redact(v) for v in obj]
    if isinstance(obj, str):
        return redact_command(obj)
    return obj


def _argv_has(argv: Iterable[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def _command_argv(launcher: Mapping[str, Any] | None, server_info: Mapping[str, Any]) -> list[str]:
    argv: list[str] = []
    if launcher and isinstance(launcher.get("command"), list):
        argv += [str(a) for a in launcher["command"]]
    if isinstance(server_info.get("launch_command"), str):
        argv += str(server_info["launch_command"]).split()
    return argv


def _split_server_info(
    info: Mapping[str, Any], seed_explicit: bool
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(server_args, measured, noise) from one redacted /server_info object."""
    args: dict[str, Any] = {}
    measured: dict[str, Any] = {}
    noise: dict[str, Any] = {}
    for key, value in info.items():
        if key in _NOISE_ARGS or (key == "random_seed" and not seed_explicit):
            noise[key] = value
        elif key in _MEASURED:
            measured[key] = value
        else:
            args[key] = value
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        for key in _MEASURED_INTERNAL:
            if key in states[0]:
                measured[key] = states[0][key]
        noise["internal_states"] = [
            {k: v for k, v in s.items() if k not in info or info[k] != v}
            for s in states
            if isinstance(s, Mapping)
        ]
    return args, measured, noise


def _facts(declared: Mapping[str, Any], launcher: Mapping[str, Any]) -> dict[str, Any]:
    """Identity facts the server cannot report: declared values win over recorded ones."""
    raw_gpu = launcher.get("gpu")
    gpu: Mapping[str, Any] = raw_gpu if isinstance(raw_gpu, Mapping) else {}
    recorded = {"gpu": gpu.get("name"), "driver": gpu.get("driver"), "cuda": gpu.get("cuda")}
    facts = {k: declared.get(k, recorded.get(k)) for k in FACT_KEYS}
    return {k: v for k, v in facts.items() if v is not None}


def build_launch_config(
    server_info: Mapping[str, Any] | None,
    *,
    model_info: Mapping[str, Any] | None = None,
    launcher: Mapping[str, Any] | None = None,
    declared: Mapping[str, Any] | None = None,
    kind: str = "sglang",
) -> LaunchConfig:
    """The canonical, redacted launch configuration of one server.

    ``server_info`` may be None when the server never came up (a refused launch): the
    config then holds only what the launcher recorded and the operator declared.
    """
    info = redact(dict(server_info or {}))
    launcher_r = redact(dict(launcher or {}))
    declared_r = redact(dict(declared or {}))
    seed_explicit = "random_seed" in declared_r or _argv_has(
        _command_argv(launcher_r, info), "--random-seed"
    )
    args, measured, noise = _split_server_info(info, seed_explicit)
    data: dict[str, Any] = {
        "kind": kind,
        "version": info.get("version"),
        "simulated": bool(info.get("simulated", False)),
        "server_args": args,
        "measured": measured,
        "model_info": redact(dict(model_info)) if model_info is not None else None,
        "facts": _facts(declared_r, launcher_r),
        "declared": declared_r,
        "launcher": launcher_r or None,
        "noise": noise,
        "random_seed_explicit": seed_explicit,
    }
    if "launch_command" in info:
        data["server_command"] = info["launch_command"]
    return LaunchConfig.from_data(data)


def with_launcher(config: LaunchConfig, launcher: Mapping[str, Any]) -> LaunchConfig:
    """The same server's config with a launcher record merged in, as if built with it.

    For configs read from a server that ``specproxy launch`` started (the record is in
    the run directory's ``launch.json``): recomputes the facts and whether the random
    seed was explicit, which moves ``random_seed`` from noise into the settings.
    """
    data = config.data
    record = redact(dict(launcher))
    declared = data.get("declared") or {}
    command = data.get("server_command")
    reported = {"launch_command": command} if isinstance(command, str) else {}
    explicit = bool(data.get("random_seed_explicit")) or _argv_has(
        _command_argv(record, reported), "--random-seed"
    )
    if explicit and "random_seed" in data["noise"]:
        data["server_args"]["random_seed"] = data["noise"].pop("random_seed")
    data.update(launcher=record, facts=_facts(declared, record), random_seed_explicit=explicit)
    return LaunchConfig.from_data(data)


def fingerprint_input(data: Mapping[str, Any]) -> dict[str, Any]:
    """Exactly what the fingerprint hashes (an allow-list; nothing secret or per-launch)."""
    args = data.get("server_args") or {}
    picked = {k: v for k, v in args.items() if k in _IDENTITY_ARGS or is_speculative_key(k)}
    picked.pop("random_seed", None)
    if data.get("random_seed_explicit") and "random_seed" in args:
        picked["random_seed"] = args["random_seed"]
    model = data.get("model_info") or {}
    return {
        "kind": data.get("kind"),
        "version": data.get("version"),
        "simulated": bool(data.get("simulated")),
        "server_args": picked,
        "model": {k: model[k] for k in _MODEL_IDENTITY if k in model},
        "facts": dict(data.get("facts") or {}),
    }


def compute_fingerprint(data: Mapping[str, Any]) -> str:
    """12 hex digits of sha256 over ``fingerprint_input(data)``."""
    digest = hashlib.sha256(canonical_json(fingerprint_input(data)).encode()).hexdigest()
    return digest[:FINGERPRINT_HEX]


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """One server's canonical launch configuration (redacted JSON text) and its fingerprint."""

    canonical: str
    fingerprint: str

    def __post_init__(self) -> None:
        data = json.loads(self.canonical)
        if not isinstance(data, dict) or not isinstance(data.get("server_args"), dict):
            raise ValueError("a launch config is a JSON object with a server_args object")
        if canonical_json(data) != self.canonical:
            raise ValueError("launch config text is not canonical JSON")
        if compute_fingerprint(data) != self.fingerprint:
            raise ValueError("fingerprint does not match the launch config")

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> LaunchConfig:
        """Canonicalise ``data`` (already redacted) and fingerprint it."""
        text = canonical_json(data)
        return cls(canonical=text, fingerprint=compute_fingerprint(json.loads(text)))

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> LaunchConfig:
        """Read back ``to_dict()`` output; ValueError when the stored fingerprint does not match."""
        data = {k: v for k, v in stored.items() if k != "fingerprint"}
        text = canonical_json(data)
        return cls(canonical=text, fingerprint=str(stored.get("fingerprint", "")))

    @property
    def data(self) -> dict[str, Any]:
        """A fresh copy of the canonical dict (callers may mutate it freely)."""
        result: dict[str, Any] = json.loads(self.canonical)
        return result

    def to_dict(self) -> dict[str, Any]:
        """What experiment.json stores: the canonical dict plus ``fingerprint``."""
        return {**self.data, "fingerprint": self.fingerprint}

    @property
    def server_args(self) -> dict[str, Any]:
        args: dict[str, Any] = self.data["server_args"]
        return args

    @property
    def speculative_algorithm(self) -> str | None:
        """The algorithm the server resolved (NEXTN reads as EAGLE), None without speculation."""
        value = self.server_args.get("speculative_algorithm")
        return None if value in (None, "", "NONE") else str(value).upper()

    @property
    def speculation(self) -> bool:
        return self.speculative_algorithm is not None

    @property
    def simulated(self) -> bool:
        return bool(self.data.get("simulated"))

    @property
    def version(self) -> str | None:
        value = self.data.get("version")
        return None if value is None else str(value)

    @property
    def complete(self) -> bool:
        """Server-reported args, a version and a recorded or reported full command are all known."""
        data = self.data
        has_command = bool(data.get("server_command")) or bool(
            (data.get("launcher") or {}).get("command")
        )
        return bool(data["server_args"]) and data.get("version") is not None and has_command


def diff_configs(baseline: LaunchConfig, candidate: LaunchConfig) -> ConfigDiff:
    """Every difference between two configs, speculative settings first (``core.launch.diff``).

    The recorded commands are not compared: their speculative flags always differ and
    their other flags resolve into the server args that are compared.
    """
    return diff_data(baseline.data, candidate.data)


def diff_series(configs: Sequence[LaunchConfig]) -> list[SeriesStep]:
    """Consecutive diffs of a series; a step changing several independent settings is flagged."""
    return diff_series_data([c.data for c in configs])
