"""What the two launch configurations of an experiment say about the comparison's validity.

Pure: reads the ``baseline`` / ``candidate`` entries of an ``experiment.json`` dict
(either ``{"speculation", "fingerprint", "launch": LaunchConfig.to_dict()}`` or the
``to_dict()`` itself) through ``core.launch.config``. Answers three questions the
recommendation needs (``docs/contract.md``): is each launch config complete (full command, server
version, model revisions), do the configs differ only in speculative settings (the
stored ``launch_diff`` when present, else ``core.launch.config.diff_configs``), and what is
the compatibility scope (model, revision, server version, GPU, precision, load range,
workload).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from specproxy.core.launch.command import disagreements
from specproxy.core.launch.config import ConfigDiff, LaunchConfig, diff_configs
from specproxy.core.records.model import Role

SCOPE_KEYS = ("model", "revision", "server_version", "gpu", "precision", "load_range", "workload")


@dataclass(frozen=True, slots=True)
class SideLaunch:
    """One side's launch config as read from experiment.json; ``problem`` when unreadable."""

    side: Role
    config: LaunchConfig | None
    problem: str | None


def read_side(experiment: Mapping[str, Any], side: Role) -> SideLaunch:
    entry = experiment.get(side.value)
    if not isinstance(entry, Mapping):
        return SideLaunch(side, None, f"experiment.json has no {side.value} launch config")
    if "launch" in entry and entry["launch"] is None:
        return SideLaunch(side, None, f"{side.value} launch config not recorded")
    stored = entry.get("launch") if isinstance(entry.get("launch"), Mapping) else entry
    if not isinstance(stored, Mapping) or not isinstance(stored.get("server_args"), Mapping):
        return SideLaunch(side, None, f"{side.value} launch config has no server_args")
    try:
        return SideLaunch(side, LaunchConfig.from_dict(stored), None)
    except (ValueError, TypeError) as exc:
        return SideLaunch(side, None, f"{side.value} launch config unreadable: {exc}")


def _present(value: Any) -> bool:
    return value not in (None, "", [], {})


def _revision(
    config: LaunchConfig, experiment: Mapping[str, Any], key: str, server_arg: str
) -> str | None:
    """The declared fact ``key``, else the server's ``server_arg``, else experiment.json's
    top-level ``key``."""
    facts = config.data.get("facts") or {}
    for value in (facts.get(key), config.server_args.get(server_arg), experiment.get(key)):
        if _present(value):
            return str(value)
    return None


def target_revision(config: LaunchConfig, experiment: Mapping[str, Any]) -> str | None:
    return _revision(config, experiment, "target_revision", "revision")


def draft_revision(config: LaunchConfig, experiment: Mapping[str, Any]) -> str | None:
    return _revision(config, experiment, "draft_revision", "speculative_draft_model_revision")


def completeness_gaps(launch: SideLaunch, experiment: Mapping[str, Any]) -> list[str]:
    """What one side's launch config lacks of: full command, version, revisions."""
    if launch.config is None:
        return [launch.problem or f"{launch.side.value} launch config missing"]
    cfg, name = launch.config, launch.side.value
    data = cfg.data
    gaps: list[str] = []
    if not (data.get("server_command") or (data.get("launcher") or {}).get("command")):
        gaps.append(
            f"{name}: full launch command not recorded (a server that does not report it:"
            f" give --{name}-launch COMMAND, or --launch-from-process on this host)"
        )
    gaps += [f"{name}: the supplied launch command disagrees with the server: {d}"
             for d in disagreements(cfg)]  # fmt: skip
    if cfg.version is None:
        gaps.append(f"{name}: server version unknown")
    if target_revision(cfg, experiment) is None:
        gaps.append(f"{name}: target model revision unknown")
    if _present(cfg.server_args.get("speculative_draft_model_path")) and (
        draft_revision(cfg, experiment) is None
    ):
        gaps.append(f"{name}: draft model revision unknown")
    return gaps


@dataclass(frozen=True, slots=True)
class LaunchDifference:
    """One non-speculative difference; ``blocking`` ones make it "not a matched baseline"."""

    text: str
    blocking: bool


def other_differences(
    experiment: Mapping[str, Any], base: SideLaunch, cand: SideLaunch
) -> list[LaunchDifference] | None:
    """Every non-speculative difference (stored ``launch_diff`` first); None if unknowable."""
    stored = experiment.get("launch_diff")
    if isinstance(stored, Mapping) and isinstance(stored.get("other"), list):
        return [_from_stored(d) for d in stored["other"] if isinstance(d, Mapping)]
    if base.config is None or cand.config is None:
        return None
    diff: ConfigDiff = diff_configs(base.config, cand.config)
    return [_from_stored(d.to_dict()) for d in diff.other]


def _from_stored(d: Mapping[str, Any]) -> LaunchDifference:
    """One ``core.launch.config.Difference.to_dict()`` as a line; a note that only repeats "not a
    matched baseline" is left out (the condition says so already). A table (a mapping)
    names each differing entry by its dotted path, never as a Python ``repr``."""
    base, cand = _differing_parts(d.get("baseline"), d.get("candidate"))
    key = d.get("key")
    if isinstance(base, Mapping) and isinstance(cand, Mapping) and base:
        leaves = _leaves(base, cand)
        parts = [f"{key}.{path}: baseline {_short(b, 40)}, candidate {_short(c, 40)}"
                 for path, b, c in leaves[:3]]  # fmt: skip
        more = f" (and {len(leaves) - 3} more entries)" if len(leaves) > 3 else ""
        text = "; ".join(parts) + more
    else:
        text = f"{key}: baseline {_short(base)}, candidate {_short(cand)}"
    note = d.get("note")
    if note and note != "not a matched baseline":
        text += f" ({note})"
    return LaunchDifference(text, bool(d.get("blocking", True)))


def _leaves(base: Mapping[str, Any], cand: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(dotted path, baseline value, candidate value)`` of two same-keyed nested tables."""
    found: list[tuple[str, Any, Any]] = []
    for k in base:
        b, c = base.get(k), cand.get(k)
        if isinstance(b, Mapping) and isinstance(c, Mapping) and b:
            found += [(f"{k}.{path}", bv, cv) for path, bv, cv in _leaves(b, c)]
        else:
            found.append((str(k), b, c))
    return found


def _differing_parts(base: Any, cand: Any) -> tuple[Any, Any]:
    """For two mappings, only the entries that differ (recursively); else the values."""
    if isinstance(base, Mapping) and isinstance(cand, Mapping):
        keys = sorted(set(base) | set(cand), key=str)
        b_out: dict[str, Any] = {}
        c_out: dict[str, Any] = {}
        for key in keys:
            if base.get(key) != cand.get(key):
                b_out[str(key)], c_out[str(key)] = _differing_parts(base.get(key), cand.get(key))
        return b_out, c_out
    return base, cand


def plain_value(value: Any) -> str:
    """A setting's value as a reader writes it: ``unset``, a bare string, compact JSON for
    anything else (never a Python ``repr``)."""
    if value is None:
        return "unset"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), default=str)


def _short(value: Any, limit: int = 90) -> str:
    text = plain_value(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def algorithm(cand: SideLaunch) -> str | None:
    return cand.config.speculative_algorithm if cand.config is not None else None


def precision_of(config: LaunchConfig) -> str | None:
    facts = config.data.get("facts") or {}
    if _present(facts.get("precision")):
        return str(facts["precision"])
    args = config.server_args
    parts = [
        f"{k}={args[k]}"
        for k in ("dtype", "quantization", "kv_cache_dtype")
        if _present(args.get(k))
    ]
    return ", ".join(parts) or None


def scope(
    experiment: Mapping[str, Any], base: SideLaunch, load_range: str | None
) -> dict[str, str | None]:
    """The compatibility scope the result holds for (None marks an unknown entry)."""
    cfg = base.config
    facts = (cfg.data.get("facts") or {}) if cfg is not None else {}
    workload = experiment.get("workload")
    return {
        "model": str(cfg.server_args.get("model_path") or "") or None if cfg else None,
        "revision": target_revision(cfg, experiment) if cfg else None,
        "server_version": cfg.version if cfg else None,
        "gpu": str(facts["gpu"]) if _present(facts.get("gpu")) else None,
        "precision": precision_of(cfg) if cfg else None,
        "load_range": load_range,
        "workload": describe_workload(workload) if _present(workload) else None,
    }


def describe_workload(workload: Any) -> str:
    """A short text for the workload entry of experiment.json (a dict or a string)."""
    if isinstance(workload, Mapping):
        return ", ".join(f"{k}={v}" for k, v in sorted(workload.items()) if _present(v))
    return str(workload)
