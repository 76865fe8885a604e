"""Readable rows of the launch configurations and the workload, for the report's tables.

``speculative_rows``: the candidate's speculative settings (algorithm, steps, topk,
draft tokens, draft model and revision). ``launch_rows``: both servers side by side,
the settings that decide speed first, then every other server argument on which the
two differ. ``workload_rows``: the experiment's workload as ``key: value`` rows
(server addresses left out: a report carries none).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specproxy.core.compare.launch_checks import plain_value
from specproxy.core.launch.command import launch_source
from specproxy.core.launch.config import LaunchConfig

SPECULATIVE_KEYS = (
    ("algorithm", "speculative_algorithm"),
    ("steps", "speculative_num_steps"),
    ("topk", "speculative_eagle_topk"),
    ("draft tokens", "speculative_num_draft_tokens"),
    ("draft model", "speculative_draft_model_path"),
    ("draft revision", "speculative_draft_model_revision"),
)
_HEAD_KEYS = (
    "model_path",
    "revision",
    "served_model_name",
    *(k for _, k in SPECULATIVE_KEYS),
    "tp_size",
    "dp_size",
    "dtype",
    "quantization",
    "kv_cache_dtype",
    "max_running_requests",
    "chunked_prefill_size",
    "mem_fraction_static",
    "context_length",
    "attention_backend",
    "cuda_graph_max_bs",
    "disable_radix_cache",
    "random_seed",
)
NOT_SET = "-"


def shown(value: Any) -> str:
    """One cell: ``-`` for unset, compact text for lists and tables."""
    if value is None:
        return NOT_SET
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and "://" in value:
        return "(an address, not shown)"
    if isinstance(value, Mapping | list | tuple):
        text = plain_value(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return str(value)


def _args(config: LaunchConfig | None) -> dict[str, Any]:
    return config.server_args if config is not None else {}


def speculative_rows(candidate: LaunchConfig | None) -> tuple[tuple[str, str], ...]:
    """The candidate's speculative settings, one ``(setting, value)`` row each; a declared
    draft revision (``--declare draft_revision=...``) wins over the server's own setting,
    which is SGLang's default branch name when the server was given none."""
    args = _args(candidate)
    rows = [(label, shown(args.get(key))) for label, key in SPECULATIVE_KEYS]
    facts = (candidate.data.get("facts") or {}) if candidate is not None else {}
    declared = facts.get("draft_revision")
    if declared:
        server = args.get("speculative_draft_model_revision")
        said = f"; the server says {shown(server)}" if server and server != declared else ""
        rows[-1] = ("draft revision", f"{shown(declared)} (declared{said})")
    return tuple(rows)


def launch_rows(
    baseline: LaunchConfig | None, candidate: LaunchConfig | None
) -> tuple[tuple[str, str, str], ...]:
    """``(setting, baseline, candidate)``: version, the key settings, then other differences."""
    base, cand = _args(baseline), _args(candidate)
    versions = [shown(c.version if c is not None else None) for c in (baseline, candidate)]
    rows: list[tuple[str, str, str]] = [("server version", versions[0], versions[1])]
    sources = [launch_source(c) or "not recorded" for c in (baseline, candidate)]
    rows.append(("launch command from", sources[0], sources[1]))
    others = sorted(
        k for k in (base.keys() | cand.keys()) - set(_HEAD_KEYS) if base.get(k) != cand.get(k)
    )
    heads = [k for k in _HEAD_KEYS if k in base or k in cand]
    rows.extend((key, shown(base.get(key)), shown(cand.get(key))) for key in heads + others)
    return tuple(rows)


def _flat(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, Mapping):
        return [row for k, v in sorted(value.items()) for row in _flat(f"{prefix}{k}.", v)]
    text = shown(value)
    return [] if "://" in text or text.startswith("(an address") else [(prefix.rstrip("."), text)]


def workload_rows(experiment: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The recorded workload as ``(key, value)`` rows; nested tables become dotted keys."""
    workload = experiment.get("workload")
    if not isinstance(workload, Mapping):
        return ()
    kept = {k: v for k, v in workload.items() if k not in ("urls", "via")}
    return tuple(_flat("", kept))
