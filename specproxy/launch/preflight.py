"""Preflight (`specproxy check`): is this pair fit for a comparison? (docs/contract.md, Preflight)

Per side: health, the server's own launch configuration, a short greedy decode.
Across sides: speculation off on the baseline and on for the candidate (read from
``/server_info``, never taken from the operator), the algorithm is one this SGLang
version knows (and a NEXTN/MTP expectation fits the model's architectures), the
launch-config diff with every non-speculative difference named, greedy agreement,
a SIMULATED label when a side is the simulator, and, with a `specproxy launch` record
(``launch_dir``), whether the candidate was started with a variable that fakes SGLang's
acceptance (``SGLANG_SIMULATE_ACC_LEN``: nothing the server reports shows it).

Statuses: PASS, WARN (named, does not fail the check), FAIL. A side that cannot be
reached makes ``raise_for_outcome`` raise ``BackendUnreachable`` (exit 3); any FAIL
raises ``PreflightFailed`` (exit 1). Output text is compared by hash and never
stored or printed.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from specproxy.backends.base import BackendKind, BackendSpec, InfoReader, Timeouts
from specproxy.backends.http import open_backend
from specproxy.backends.sglang import fetch_launch_config
from specproxy.core.compare.conditions import faked_acceptance
from specproxy.core.launch.config import ConfigDiff, LaunchConfig, diff_configs
from specproxy.core.records.model import Role
from specproxy.errors import (
    BackendError,
    BackendTimeout,
    BackendUnreachable,
    PreflightFailed,
    ProtocolError,
)
from specproxy.launch import evidence
from specproxy.launch.checks import CheckResult, CheckStatus, diff_checks, speculation_checks
from specproxy.recording.experiment import attach_launcher_record

PROBE_PROMPT = "List the first five prime numbers:"
PROBE_TOKENS = 8


@dataclass(slots=True)
class _Side:
    """What was learnt about one side (mutable while probing, owned by ``_probe``)."""

    target: BackendSpec
    checks: list[CheckResult] = field(default_factory=list)
    config: LaunchConfig | None = None
    output_digest: str | None = None
    output_tokens: int = 0  # tokens of the greedy probe's output
    unreachable: str | None = None
    drafting: bool | None = None  # OpenAI-kind servers: evidence that speculation is on

    def add(self, name: str, status: CheckStatus, detail: str) -> None:
        self.checks.append(CheckResult(name, status, detail, str(self.target.role)))


@dataclass(frozen=True, slots=True)
class PreflightOutcome:
    """Every check's result, both launch configs (if read) and their diff."""

    checks: tuple[CheckResult, ...]
    baseline: LaunchConfig | None
    candidate: LaunchConfig | None
    diff: ConfigDiff | None
    unreachable: tuple[str, ...] = ()

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(c for c in self.checks if c.status is CheckStatus.FAIL)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.unreachable

    def to_dict(self) -> dict[str, Any]:
        def side(config: LaunchConfig | None) -> dict[str, Any] | None:
            return None if config is None else config.to_dict()

        return {
            "ok": self.ok,
            "unreachable": list(self.unreachable),
            "checks": [c.to_dict() for c in self.checks],
            "baseline": side(self.baseline),
            "candidate": side(self.candidate),
            "diff": None if self.diff is None else self.diff.to_dict(),
        }


def _digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value)).hexdigest()[:16]


async def _health(side: _Side, backend: InfoReader) -> None:
    status, _ = await backend.get("/health")
    detail = f"GET /health -> HTTP {status}"
    side.add("health", CheckStatus.PASS if status == 200 else CheckStatus.FAIL, detail)


async def _launch_config(
    side: _Side, backend: InfoReader, timeout_s: float, launch_dir: str | None
) -> None:
    """The server's launch config, with the launch record of ``launch_dir`` merged in
    when it is this server's (``attach_launcher_record``)."""
    if side.target.kind is not BackendKind.SGLANG:
        side.add("server_info", CheckStatus.WARN, "kind openai: no server info to read")
        return
    try:
        config = await fetch_launch_config(backend, timeout_s=timeout_s)
    except (BackendUnreachable, BackendTimeout):
        raise
    except (BackendError, ProtocolError) as exc:
        side.add("server_info", CheckStatus.FAIL, str(exc))
        return
    role = side.target.role
    if launch_dir is not None and role is not None:
        config = attach_launcher_record(launch_dir, role, config) or config
    side.config = config
    detail = f"SGLang {config.version}, fingerprint {config.fingerprint}"
    side.add("server_info", CheckStatus.PASS, detail)
    if not config.complete:
        side.add(
            "launch_command",
            CheckStatus.WARN,
            "the full launch command is unknown (SGLang < 0.5.20 does not report it);"
            " start the pair with `specproxy launch` to record it",
        )


def _decode_request(kind: BackendKind, model: str) -> tuple[str, dict[str, Any]]:
    if kind is BackendKind.SGLANG:
        params = {"max_new_tokens": PROBE_TOKENS, "temperature": 0}
        return "/generate", {"text": PROBE_PROMPT, "sampling_params": params}
    message = {"role": "user", "content": PROBE_PROMPT}
    body = {"messages": [message], "max_tokens": PROBE_TOKENS, "temperature": 0, "stream": False}
    return "/v1/chat/completions", {"model": model, **body}


def _decoded(kind: BackendKind, body: Any) -> tuple[int, Any] | None:
    """(tokens generated, what to compare across sides), or None when nothing decoded."""
    if not isinstance(body, dict):
        return None
    if kind is BackendKind.SGLANG:
        meta = body.get("meta_info") or {}
        tokens = int(meta.get("completion_tokens") or len(body.get("output_ids") or ()))
        return (tokens, body.get("output_ids") or body.get("text")) if tokens > 0 else None
    choices = body.get("choices") or [{}]
    text = (choices[0].get("message") or {}).get("content")
    tokens = int((body.get("usage") or {}).get("completion_tokens") or 0)
    return (tokens or 1, text) if text else None


async def _served_model(backend: InfoReader) -> str:
    """The first id of ``/v1/models`` (OpenAI-compatible servers check it), else "default"."""
    status, raw = await backend.get("/v1/models")
    try:
        return str(orjson.loads(raw)["data"][0]["id"]) if status == 200 else "default"
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return "default"


async def _decode(side: _Side, backend: InfoReader) -> None:
    kind = side.target.kind
    model = await _served_model(backend) if kind is BackendKind.OPENAI else "default"
    path, request = _decode_request(kind, model)
    status, raw = await backend.post_json(path, request)
    if status != 200:
        hint = " (check the API key)" if status in (401, 403) else ""
        side.add("decode", CheckStatus.FAIL, f"POST {path} -> HTTP {status}{hint}")
        return
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    decoded = _decoded(kind, body)
    if decoded is None:
        side.add("decode", CheckStatus.FAIL, f"POST {path} returned no tokens")
        return
    tokens, output = decoded
    if kind is BackendKind.OPENAI:
        slots = await backend.get("/slots")
        side.drafting = evidence.combine(evidence.from_slots(*slots), evidence.from_timings(body))
    side.output_digest = _digest(output)
    side.output_tokens = tokens
    side.add("decode", CheckStatus.PASS, f"greedy POST {path}: {tokens} tokens")


async def _probe(target: BackendSpec, timeout_s: float, launch_dir: str | None) -> _Side:
    side = _Side(target)
    timeouts = Timeouts(connect_s=min(5.0, timeout_s), first_byte_s=timeout_s, total_s=timeout_s)
    async with open_backend(replace(target, timeouts=timeouts)) as backend:
        try:
            await _health(side, backend)
            await _launch_config(side, backend, timeout_s, launch_dir)
            await _decode(side, backend)
        except (BackendUnreachable, BackendTimeout) as exc:
            side.unreachable = str(exc)
            side.add("reachable", CheckStatus.FAIL, str(exc))
    return side


def _agreement(baseline: _Side, candidate: _Side) -> list[CheckResult]:
    if baseline.output_digest is None or candidate.output_digest is None:
        return []
    compared = _compared(baseline, candidate)
    if baseline.output_digest == candidate.output_digest:
        detail = f"identical greedy outputs over {compared} (the report compares every request)"
        return [CheckResult("greedy_agreement", CheckStatus.PASS, detail)]
    detail = (
        f"greedy outputs differ within {compared} (near-ties in low precision can do this;"
        " the report counts it)"
    )
    return [CheckResult("greedy_agreement", CheckStatus.WARN, detail)]


def _compared(baseline: _Side, candidate: _Side) -> str:
    """``8 tokens of one short prompt``: how much the greedy comparison looked at."""
    tokens = min(baseline.output_tokens, candidate.output_tokens) or PROBE_TOKENS
    return f"{tokens} tokens of one short prompt"


def _simulation(configs: list[LaunchConfig | None]) -> list[CheckResult]:
    labelled = [c for c in configs if c is not None and c.simulated]
    if not labelled:
        return []
    return [CheckResult("real_servers", CheckStatus.WARN, "SIMULATED server(s): not real SGLang")]


def _faked_acceptance(candidate: LaunchConfig | None) -> list[CheckResult]:
    """FAIL when the launch record shows SGLang's acceptance-faking variables; nothing
    without a launch record (the ``launch_command`` row already asks for one)."""
    faked = faked_acceptance(candidate)
    if faked is None:
        return []
    if faked:
        detail = (
            f"started with {', '.join(faked)}: SGLang fakes its acceptance, so the candidate's "
            "speed says nothing about its draft"
        )
        return [CheckResult("acceptance_not_simulated", CheckStatus.FAIL, detail, "candidate")]
    detail = "the launch record's environment fakes no acceptance"
    return [CheckResult("acceptance_not_simulated", CheckStatus.PASS, detail, "candidate")]


async def run_preflight(
    baseline: BackendSpec,
    candidate: BackendSpec,
    *,
    expect_algorithm: str | None = None,
    timeout_s: float = 30.0,
    launch_dir: str | None = None,
) -> PreflightOutcome:
    """Run every check against both servers and return the outcome (never raises for checks).

    Each spec's own timeouts are replaced by ones derived from ``timeout_s``. ``launch_dir``:
    a ``specproxy launch`` run directory whose ``launch.json`` records these servers (matched
    by port); their commands and environment are then merged into the configs.
    """
    if baseline.role is not Role.BASELINE or candidate.role is not Role.CANDIDATE:
        raise ValueError("run_preflight takes the baseline first, then the candidate")
    base, cand = await asyncio.gather(
        _probe(baseline, timeout_s, launch_dir), _probe(candidate, timeout_s, launch_dir)
    )
    checks = [*base.checks, *cand.checks]
    checks += speculation_checks(base.config, cand.config, expect_algorithm)
    judged = {
        role: side.drafting
        for role, side in ((Role.BASELINE, base), (Role.CANDIDATE, cand))
        if side.target.kind is BackendKind.OPENAI and not side.unreachable
    }
    checks += evidence.speculation_rows(judged)
    diff = None
    if base.config is not None and cand.config is not None:
        diff = diff_configs(base.config, cand.config)
        checks += diff_checks(diff)
    checks += _agreement(base, cand) + _simulation([base.config, cand.config])
    checks += _faked_acceptance(cand.config)
    unreachable = tuple(str(s.target.role) for s in (base, cand) if s.unreachable)
    return PreflightOutcome(tuple(checks), base.config, cand.config, diff, unreachable)


def raise_for_outcome(outcome: PreflightOutcome) -> None:
    """BackendUnreachable when a side could not be reached, PreflightFailed on any FAIL."""
    if outcome.unreachable:
        raise BackendUnreachable(f"could not reach: {', '.join(outcome.unreachable)}")
    if outcome.failed:
        names = ", ".join(
            sorted({f"{c.name}({c.side})" if c.side else c.name for c in outcome.failed})
        )
        raise PreflightFailed(f"preflight failed: {names}")
