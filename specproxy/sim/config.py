"""The simulator's configuration and SGLang's speculative-argument resolution.

``SimConfig`` fields are named after SGLang's own launch flags wherever SGLang has
the setting (``speculative_algorithm``, ``max_running_requests``, ``random_seed``...),
so what the simulator reports in ``/server_info`` reads exactly like a real server.
The remaining fields are simulator knobs (latency, acceptance, faults). Durations
given in milliseconds or microseconds follow the option names; the engine converts
them to integer microseconds once, in ``LatencyModel``.

``resolve_speculative`` applies SGLang's resolution rules (docs/sglang.md, Speculative launch arguments) the way
``speculative_hook.py`` does at startup: ``NEXTN`` becomes ``EAGLE``; with
``--speculative-num-steps`` unset the triple (steps, topk, draft tokens) is chosen
automatically (``STANDALONE`` -> (3, 1, 4); the simulated model is a
``LlamaForCausalLM``, so ``EAGLE``/``EAGLE3`` -> (5, 4, 8)) and setting only some of
the three is refused; ``topk == 1`` forces ``num_draft_tokens = num_steps + 1``;
``NGRAM`` takes ``topk = max_bfs_breadth``, ``num_draft_tokens`` default 12 and
``num_steps = num_draft_tokens // topk``; ``EAGLE`` (so ``NEXTN``) without a draft path
drafts from the model itself: the draft path becomes the model path, as captured from a real
NEXTN server (``tests/fixtures/sglang-0.5.16/run_c_nextn``). ``--speculative-adaptive`` takes
effect for EAGLE/EAGLE3 at topk 1 (``sim.adaptive``); elsewhere the static settings stay, as
SGLang falls back to them. Configurations SGLang refuses at startup
raise ``ConfigError`` naming the flag. Owns nothing else; imports only ``errors``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from specproxy.errors import ConfigError

ALGORITHMS = ("NONE", "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
NEEDS_DRAFT_MODEL = ("EAGLE3", "STANDALONE")
SPEC_DEFAULT_MAX_RUNNING = 48
BASELINE_MAX_RUNNING = 4096
NGRAM_DEFAULT_DRAFT_TOKENS = 12
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")  # --speculative-adaptive runs only there, at topk 1


def parse_version(text: str) -> tuple[int, int, int]:
    """``"0.5.16"`` -> ``(0, 5, 16)``; ConfigError for anything else."""
    parts = text.strip().split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ConfigError(f"sglang_version: expected MAJOR.MINOR.PATCH, got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


@dataclass(frozen=True, slots=True)
class SpecSettings:
    """Resolved speculative settings, as ``/server_info`` reports them."""

    algorithm: str
    num_steps: int
    eagle_topk: int
    num_draft_tokens: int
    draft_model_path: str | None
    draft_model_revision: str | None
    adaptive: bool = False  # --speculative-adaptive in effect (EAGLE/EAGLE3 at topk 1)

    def __post_init__(self) -> None:
        if self.num_draft_tokens < 2 or self.num_steps < 1 or self.eagle_topk < 1:
            raise ConfigError(
                "speculative settings must have num_steps >= 1, eagle_topk >= 1 and"
                f" num_draft_tokens >= 2 (got {self.num_steps}, {self.eagle_topk},"
                f" {self.num_draft_tokens})"
            )

    @property
    def max_accepted_drafts(self) -> int:
        """Most drafts one verify step can accept: the chain depth (NGRAM: the whole window)."""
        if self.algorithm == "NGRAM":
            return self.num_draft_tokens - 1
        return min(self.num_steps, self.num_draft_tokens - 1)


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Everything one simulated server needs; see the module docstring for naming."""

    host: str = "127.0.0.1"
    port: int = 30000
    model_path: str = "simulated/Llama-3.1-8B-Instruct"
    revision: str | None = None
    served_model_name: str | None = None
    api_key: str | None = None
    max_running_requests: int | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_draft_model_path: str | None = None
    speculative_draft_model_revision: str | None = None
    speculative_ngram_max_bfs_breadth: int = 10
    speculative_adaptive: bool = False
    speculative_accept_threshold_single: float = 1.0  # below 1.0: the lossy mode (sim.target)
    speculative_accept_threshold_acc: float = 1.0
    random_seed: int | None = None
    mem_fraction_static: float | None = None
    enable_metrics: bool = True
    decode_log_interval: int = 40
    context_length: int = 131072
    architecture: str = "LlamaForCausalLM"  # /model_info's architectures (NEXTN drafts need MTP)
    cuda_graph_max_bs: int | None = None  # SGLang's --cuda-graph-max-bs: decode graphs on
    max_total_tokens: int | None = None  # SGLang's --max-total-tokens: the KV pool's cap
    # simulator knobs
    accept_prob: float = 0.7
    long_prompt_tokens: int | None = None  # past this prompt length, long_accept_prob
    long_accept_prob: float = 0.0
    decode_step_ms: float = 10.0
    verify_step_ms: float = 15.0
    prefill_us_per_token: float = 30.0
    contention: float = 0.01
    per_token_us: float = 0.0
    draft_step_ms: float = 0.0
    fail_rate: float = 0.0
    stall_rate: float = 0.0
    stall_s: float = 1.0
    truncate_rate: float = 0.0
    startup_delay_s: float = 0.0
    disagree_rate: float = 0.0
    regime_sigma: float = 0.0
    regime_s: float = 2.0
    drift_every_s: float = 0.0
    drift_slowdown: float = 0.8
    drift_s: float = 10.0
    seed: int = 0
    sample_seed: int | None = None  # sampled outputs: None = by prompt (sim.target); N = own stream
    sglang_version: str = "0.5.16"
    deterministic_ids: bool = False

    def __post_init__(self) -> None:
        for name in (
            "accept_prob", "long_accept_prob", "fail_rate", "stall_rate", "truncate_rate",
            "disagree_rate",
        ):  # fmt: skip
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name}: must be between 0 and 1, got {value}")
        for name in ("speculative_accept_threshold_single", "speculative_accept_threshold_acc"):
            if not 0.0 < getattr(self, name) <= 1.0:
                raise ConfigError(f"{name}: must be in (0, 1], got {getattr(self, name)}")
        for name in (
            "decode_step_ms",
            "verify_step_ms",
            "prefill_us_per_token",
            "contention",
            "per_token_us",
            "draft_step_ms",
            "stall_s",
            "startup_delay_s",
            "regime_sigma",
            "drift_every_s",
            "drift_slowdown",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}: must not be negative, got {getattr(self, name)}")
        for name in ("regime_s", "drift_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be > 0, got {getattr(self, name)}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port: out of range: {self.port}")
        if self.max_running_requests is not None and self.max_running_requests < 1:
            raise ConfigError(
                f"max_running_requests: must be >= 1, got {self.max_running_requests}"
            )
        if self.long_prompt_tokens is not None and self.long_prompt_tokens < 1:
            raise ConfigError(f"long_prompt_tokens: must be >= 1, got {self.long_prompt_tokens}")
        if self.decode_log_interval < 1:
            raise ConfigError(f"decode_log_interval: must be >= 1, got {self.decode_log_interval}")
        if self.context_length < 16:
            raise ConfigError(f"context_length: too small: {self.context_length}")
        for name in ("cuda_graph_max_bs", "max_total_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"{name}: must be >= 1, got {value}")
        if not self.architecture.strip():
            raise ConfigError("architecture: must not be empty")
        parse_version(self.sglang_version)
        resolve_speculative(self)

    @property
    def version(self) -> tuple[int, int, int]:
        return parse_version(self.sglang_version)

    @property
    def spec(self) -> SpecSettings | None:
        """The resolved speculative settings, or None for a baseline server."""
        return resolve_speculative(self)

    @property
    def model_name(self) -> str:
        """The served model name (SGLang defaults it to the model path)."""
        return self.served_model_name or self.model_path

    @property
    def reported_max_running_requests(self) -> int | None:
        """``max_running_requests`` as ``/server_info`` shows it (None on a default baseline)."""
        if self.max_running_requests is not None:
            return self.max_running_requests
        return SPEC_DEFAULT_MAX_RUNNING if self.spec is not None else None

    @property
    def effective_max_running_requests(self) -> int:
        """The scheduler's real cap on concurrently running requests."""
        reported = self.reported_max_running_requests
        return reported if reported is not None else BASELINE_MAX_RUNNING

    @property
    def reported_random_seed(self) -> int:
        """SGLang draws a random seed when none is given; here it is drawn from ``seed``."""
        if self.random_seed is not None:
            return self.random_seed
        return random.Random(f"random-seed:{self.seed}").randrange(1 << 30)


def _normalised_algorithm(name: str | None) -> str | None:
    if name is None:
        return None
    upper = name.strip().upper()
    if upper not in ALGORITHMS:
        raise ConfigError(
            f"speculative_algorithm: unknown algorithm {name!r} (known: {', '.join(ALGORITHMS)})"
        )
    if upper == "NONE":
        return None
    return "EAGLE" if upper == "NEXTN" else upper


def _resolve_eagle_family(config: SimConfig, algorithm: str) -> tuple[int, int, int]:
    steps = config.speculative_num_steps
    topk = config.speculative_eagle_topk
    draft = config.speculative_num_draft_tokens
    if steps is None:
        if topk is not None or draft is not None:
            raise ConfigError(
                "speculative_num_steps: must be set when speculative_eagle_topk or"
                " speculative_num_draft_tokens is set (set all three or none)"
            )
        return (3, 1, 4) if algorithm == "STANDALONE" else (5, 4, 8)
    if topk is None or draft is None:
        missing = "speculative_eagle_topk" if topk is None else "speculative_num_draft_tokens"
        raise ConfigError(f"{missing}: must be set when speculative_num_steps is set")
    if topk == 1:
        draft = steps + 1
    return steps, topk, draft


def resolve_speculative(config: SimConfig) -> SpecSettings | None:
    """Resolve the speculative flags of ``config`` as SGLang does; None for a baseline."""
    algorithm = _normalised_algorithm(config.speculative_algorithm)
    if algorithm is None:
        return None
    if algorithm == "NGRAM":
        topk = config.speculative_ngram_max_bfs_breadth
        draft = config.speculative_num_draft_tokens or NGRAM_DEFAULT_DRAFT_TOKENS
        steps = max(1, draft // topk)
    else:
        steps, topk, draft = _resolve_eagle_family(config, algorithm)
    draft_path = config.speculative_draft_model_path
    if algorithm in NEEDS_DRAFT_MODEL and not draft_path:
        raise ConfigError(f"speculative_draft_model_path: {algorithm} needs a draft model path")
    revision = config.speculative_draft_model_revision
    if draft_path and revision is None:
        revision = "main"
    if algorithm == "EAGLE" and not draft_path:  # NEXTN, or EAGLE without a draft: the model
        draft_path, revision = config.model_path, config.speculative_draft_model_revision
    return SpecSettings(
        algorithm=algorithm,
        num_steps=steps,
        eagle_topk=topk,
        num_draft_tokens=draft,
        draft_model_path=draft_path,
        draft_model_revision=revision,
        adaptive=config.speculative_adaptive and algorithm in ADAPTIVE_ALGORITHMS and topk == 1,
    )
