"""Launch configurations: canonical JSON, secret redaction, fingerprint, and diffs.

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

The fingerprint is 12 hex digits of sha256 over an explicit allow-list (reference §7):
version, allow-listed resolved server args (every ``speculative_*`` included), model
identity, merged facts, and ``random_seed`` only when it was set explicitly. Measured
capacities (``max_total_num_tokens``...) are *not* hashed, unlike the reference's
suggestion: they move with the GPU memory free at start, and two launches of one
configuration must share a fingerprint; the diff still names them.

Pure: no I/O, no clocks. Knows nothing about HTTP or processes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REDACTED = "[redacted]"
ABSENT = "<absent>"
FINGERPRINT_HEX = 12

_SECRET_NAMES = frozenset(
    {"api_key", "admin_api_key", "authorization", "hf_token", "token", "password", "secret"}
)
_SECRET_FLAG = re.compile(
    r"(--[A-Za-z0-9-]*(?:api-key|password|secret|hf-token)(?:=|\s+))(?:'[^']*'|\"[^\"]*\"|\S+)"
)
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
_SPECULATIVE_EXTRA = frozenset(
    {"enable_multi_layer_eagle", "max_speculative_num_draft_tokens", "uno_lora_path",
     "spec_trace_dir", "enable_gdn_replayssm_spec"}
)  # fmt: skip

_IMPLICIT_NOTES: dict[str, tuple[bool, str]] = {
    "max_running_requests": (
        True,
        "SGLang defaults a speculative server to 48 unless --max-running-requests is set;"
        " set it explicitly on both",
    ),
    "effective_max_running_requests_per_dp": (
        True,
        "the running-request cap differs (speculative servers default to 48, a baseline"
        " sizes itself from memory); set --max-running-requests on both",
    ),
    "mem_fraction_static": (
        False,
        "a share of the GPU memory free when the server started, not of the card;"
        " compare the KV pool (max_total_num_tokens)",
    ),
    "max_total_num_tokens": (False, "KV pool size, sized from memory free at start"),
    "max_req_input_len": (False, "derived from the KV pool size and context length"),
}
for _key in ("cuda_graph_config", "cuda_graph_bs_decode"):
    _IMPLICIT_NOTES[_key] = (False, "speculative servers choose their own CUDA-graph batch sizes")
_COSMETIC = frozenset({"served_model_name", "log_level", "log_level_http", "log_requests"})


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, no NaN: the same object always gives the same text."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def is_secret_key(name: str) -> bool:
    """True for field names whose values are credentials (``api_key``, ``*_password``...)."""
    low = name.lower().replace("-", "_")
    return (
        low in _SECRET_NAMES
        or low.endswith(("_api_key", "_secret", "auth_token", "access_token", "hf_token"))
        or "password" in low
        or "secret" in low
    )


def redact_command(text: str) -> str:
    """``--api-key VALUE`` (and other credential flags) with the value replaced."""
    return _SECRET_FLAG.sub(lambda m: m.group(1) + REDACTED, text)


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


def is_speculative_key(name: str) -> bool:
    """Speculative settings: every ``speculative_*`` field plus the few named otherwise."""
    return name.startswith(("speculative_", "decoupled_spec_")) or name in _SPECULATIVE_EXTRA


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


@dataclass(frozen=True, slots=True)
class Difference:
    """One setting that differs between two launch configs.

    ``baseline``/``candidate`` hold each side's value (``ABSENT`` when a side lacks the
    key); in a series they mean the earlier and the later experiment. ``blocking`` is
    True when the difference alone makes the pair "not a matched baseline".
    """

    key: str
    baseline: Any
    candidate: Any
    speculative: bool
    implicit: bool
    blocking: bool
    note: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("a difference names its key")
        if self.speculative and self.blocking:
            raise ValueError(
                "speculative differences are the point of the comparison, never blocking"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def describe(self) -> str:
        """One human line: key, both values, and why it matters."""
        line = f"{self.key}: baseline {_short(self.baseline)}, candidate {_short(self.candidate)}"
        return f"{line} ({self.note})" if self.note else line


@dataclass(frozen=True, slots=True)
class ConfigDiff:
    """All differences between two launch configs, speculative ones first."""

    differences: tuple[Difference, ...]

    @property
    def speculative(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.speculative)

    @property
    def other(self) -> tuple[Difference, ...]:
        """Every non-speculative difference, implicit ones included."""
        return tuple(d for d in self.differences if not d.speculative)

    @property
    def blocking(self) -> tuple[Difference, ...]:
        return tuple(d for d in self.differences if d.blocking)

    @property
    def matched(self) -> bool:
        """No blocking difference: the pair is a matched baseline (implicit ones still named)."""
        return not self.blocking

    @property
    def only_speculative(self) -> bool:
        """Strictly nothing but speculative settings differ (not even KV pool size)."""
        return not self.other

    def to_dict(self) -> dict[str, Any]:
        return {
            "matched": self.matched,
            "only_speculative": self.only_speculative,
            "speculative": [d.to_dict() for d in self.speculative],
            "other": [d.to_dict() for d in self.other],
        }


def _short(value: Any) -> str:
    text = "unset" if value is None else canonical_json(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _comparable(data: Mapping[str, Any]) -> dict[str, Any]:
    """The flat view the diff walks: args, measured, model info, facts, env, version."""
    flat: dict[str, Any] = {"version": data.get("version"), "simulated": data.get("simulated")}
    flat.update(data.get("server_args") or {})
    measured = data.get("measured") or {}
    flat.update({k: v for k, v in measured.items() if k != "memory_usage"})  # KV pool says it
    for key, value in (data.get("model_info") or {}).items():
        if flat.get(key, ABSENT) != value:  # model_info repeats model_path etc.: keep news only
            flat[f"model_info.{key}"] = value
    for key, value in (data.get("facts") or {}).items():
        flat[f"facts.{key}"] = value
    env = (data.get("launcher") or {}).get("env") or {}
    for key, value in env.items():
        flat[f"env.{key}"] = value
    return flat


def _classify(key: str, left: Any, right: Any) -> Difference:
    if is_speculative_key(key):
        return Difference(key, left, right, speculative=True, implicit=False, blocking=False)
    if key in _COSMETIC:
        note = "a label only; it does not change what is computed"
        return Difference(key, left, right, False, implicit=False, blocking=False, note=note)
    if key in _IMPLICIT_NOTES:
        blocking, note = _IMPLICIT_NOTES[key]
        if key == "max_running_requests" and None not in (left, right):
            note = "set to different values; use one --max-running-requests on both"
        if (
            key == "max_total_num_tokens"
            and isinstance(left, int)
            and isinstance(right, int)
            and left
        ):
            note = f"{note}; candidate/baseline = {right / left:.2f}"
        return Difference(key, left, right, False, implicit=True, blocking=blocking, note=note)
    return Difference(
        key, left, right, False, implicit=False, blocking=True, note="not a matched baseline"
    )


def diff_configs(baseline: LaunchConfig, candidate: LaunchConfig) -> ConfigDiff:
    """Every difference, split into speculative settings and everything else.

    Per-launch noise (ports, host, random seeds drawn at random, internal state,
    timestamps) is never a difference; the recorded command is not compared either,
    because its speculative flags always differ and its other flags resolve into the
    server args compared here.
    """
    left, right = _comparable(baseline.data), _comparable(candidate.data)
    found = [
        _classify(key, left.get(key, ABSENT), right.get(key, ABSENT))
        for key in sorted(set(left) | set(right))
        if left.get(key, ABSENT) != right.get(key, ABSENT)
    ]
    found.sort(key=lambda d: (not d.speculative, d.key))
    return ConfigDiff(tuple(found))


@dataclass(frozen=True, slots=True)
class SeriesStep:
    """The change from experiment ``index - 1`` to experiment ``index`` of a series."""

    index: int
    diff: ConfigDiff
    independent_changes: tuple[str, ...]
    derived_changes: tuple[str, ...]

    @property
    def multiple_speculative_changes(self) -> bool:
        """More than one speculative setting changed at once: the effect cannot be attributed."""
        return len(self.independent_changes) > 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "independent_changes": list(self.independent_changes),
            "derived_changes": list(self.derived_changes),
            "multiple_speculative_changes": self.multiple_speculative_changes,
            "diff": self.diff.to_dict(),
        }


def _derived(changed: set[str], before: Mapping[str, Any], after: Mapping[str, Any]) -> set[str]:
    """Changed keys that SGLang's resolution rewrote as a consequence of another change."""
    derived: set[str] = set()
    steps, draft = "speculative_num_steps", "speculative_num_draft_tokens"
    chained = all(s.get("speculative_eagle_topk") == 1 for s in (before, after))
    if {steps, draft} <= changed and chained:
        derived.add(draft)  # topk == 1 forces num_draft_tokens = num_steps + 1
    path, rev = "speculative_draft_model_path", "speculative_draft_model_revision"
    if {path, rev} <= changed and after.get(rev) in (None, "main"):
        derived.add(rev)  # a draft path given without a revision resolves to "main"
    if "speculative_algorithm" in changed:
        derived |= changed - {"speculative_algorithm"}
    return derived


def diff_series(configs: Sequence[LaunchConfig]) -> list[SeriesStep]:
    """Consecutive diffs of a series; a step changing several independent settings is flagged."""
    steps: list[SeriesStep] = []
    for index in range(1, len(configs)):
        diff = diff_configs(configs[index - 1], configs[index])
        changed = {d.key for d in diff.speculative}
        derived = _derived(changed, configs[index - 1].server_args, configs[index].server_args)
        steps.append(
            SeriesStep(
                index=index,
                diff=diff,
                independent_changes=tuple(sorted(changed - derived)),
                derived_changes=tuple(sorted(derived & changed)),
            )
        )
    return steps
