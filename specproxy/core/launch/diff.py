"""Differences between launch configurations: speculative settings vs everything else.

Works on the canonical dicts of ``core.launch.config.LaunchConfig`` (``LaunchConfig.data``);
``core.launch.config`` exposes ``diff_configs``/``diff_series`` over configs. Every
non-speculative difference is named. Those SGLang introduces on its own are marked
``implicit`` with the reason: a speculative server defaults ``max_running_requests``
to 48 (blocking: the batch limits differ); the memory fraction is a share of the
memory free at start, so ``mem_fraction_static`` and the KV pool
(``max_total_num_tokens``) move with launch order (named, not blocking); speculative
servers pick their own CUDA-graph batch sizes (named, not blocking). Per-launch noise
never reaches the diff (``core.launch.config`` keeps it out of the compared sections).

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ABSENT = "<absent>"

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


def is_speculative_key(name: str) -> bool:
    """Speculative settings: every ``speculative_*`` field plus the few named otherwise."""
    return name.startswith(("speculative_", "decoupled_spec_")) or name in _SPECULATIVE_EXTRA


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
    text = "unset" if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))
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


def diff_data(baseline: Mapping[str, Any], candidate: Mapping[str, Any]) -> ConfigDiff:
    """Every difference, split into speculative settings and everything else.

    Per-launch noise (ports, host, random seeds drawn at random, internal state,
    timestamps) is never a difference; the recorded command is not compared either,
    because its speculative flags always differ and its other flags resolve into the
    server args compared here.
    """
    left, right = _comparable(baseline), _comparable(candidate)
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


def diff_series_data(configs: Sequence[Mapping[str, Any]]) -> list[SeriesStep]:
    """Consecutive diffs of a series; a step changing several independent settings is flagged."""
    steps: list[SeriesStep] = []
    for index in range(1, len(configs)):
        diff = diff_data(configs[index - 1], configs[index])
        changed = {d.key for d in diff.speculative}
        before, after = (configs[i].get("server_args") or {} for i in (index - 1, index))
        derived = _derived(changed, before, after)
        steps.append(
            SeriesStep(
                index=index,
                diff=diff,
                independent_changes=tuple(sorted(changed - derived)),
                derived_changes=tuple(sorted(derived & changed)),
            )
        )
    return steps
