"""Launch descriptions (TOML) and the two server commands they produce.

A description names one matched pair::

    name = "tiny-standalone"     # label for the run directory
    validated = false            # true only once a measured run exists
    [model]      path, revision
    [shared]     server args given to both servers, identically (flag = value)
    [baseline]   extra args for the baseline only (normally none; never speculative)
    [candidate]  the candidate's speculative args (speculative keys only, plus the
                 placement keys base-gpu-id, gpu-id-step, served-model-name, nccl-port)
    [memory]     baseline, candidate: --mem-fraction-static per server
    [ports]      baseline, candidate: distinct ports
    [declared]   commit, gpu, driver, cuda, precision, target_revision, draft_revision, notes
    [launch]     python, server_module, host, health_timeout_s, stop_timeout_s,
                 api_key_env, env

Server-arg tables take SGLang flag names without ``--`` (``-`` or ``_``): ``true``
is a bare flag, ``false`` leaves it out, a list gives several values. ``[shared]``
must set ``max-running-requests`` (SGLang silently caps a speculative server at 48
otherwise) and ``random-seed`` (otherwise drawn at random per launch). Unknown keys
are refused with the key and the file named. Pure: reads the file, starts nothing.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specproxy.config import load_toml_table
from specproxy.core.launch.config import FACT_KEYS, REDACTED, is_speculative_key, redact_argv
from specproxy.core.records.model import Role
from specproxy.errors import ConfigError

_TOP = frozenset(
    {"name", "validated", "notes", "model", "shared", "baseline", "candidate", "memory", "ports",
     "declared", "launch"}
)  # fmt: skip
_LAUNCH_KEYS = frozenset(
    {"python", "server_module", "host", "health_timeout_s", "stop_timeout_s", "api_key_env", "env"}
)
_OWN_SECTION = {
    "model_path": "[model] path",
    "model": "[model] path",
    "revision": "[model] revision",
    "port": "[ports]",
    "host": "[launch] host",
    "mem_fraction_static": "[memory]",
    "api_key": "[launch] api_key_env",
    "admin_api_key": "[launch] api_key_env",
}
_REQUIRED_SHARED = ("max_running_requests", "random_seed")
# Per-server placement and labels: allowed in [baseline] and [candidate] alike.
_PLACEMENT = frozenset({"base_gpu_id", "gpu_id_step", "served_model_name", "nccl_port"})
ArgValue = str | int | float | bool | list[str | int | float]


@dataclass(frozen=True, slots=True)
class LaunchDescription:
    """A validated description; ``source`` is the file it came from (for messages)."""

    source: str
    name: str
    model_path: str
    shared: Mapping[str, ArgValue]
    baseline_args: Mapping[str, ArgValue]
    candidate_args: Mapping[str, ArgValue]
    memory: Mapping[str, float]
    ports: Mapping[str, int]
    revision: str | None = None
    validated: bool = False
    declared: Mapping[str, Any] = field(default_factory=dict)
    python: str = "python3"
    server_module: str = "sglang.launch_server"
    host: str = "127.0.0.1"
    health_timeout_s: float = 900.0
    stop_timeout_s: float = 30.0
    api_key_env: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for role in Role:
            if not 0.0 < self.memory[role] < 1.0:
                raise ConfigError(f"{self.source}: [memory] {role}: must be between 0 and 1")
            if not 0 < self.ports[role] < 65536:
                raise ConfigError(f"{self.source}: [ports] {role}: not a port number")
        if self.ports[Role.BASELINE] == self.ports[Role.CANDIDATE]:
            raise ConfigError(f"{self.source}: [ports]: baseline and candidate need distinct ports")
        if self.health_timeout_s <= 0 or self.stop_timeout_s <= 0:
            raise ConfigError(f"{self.source}: [launch]: timeouts must be > 0")

    def url(self, role: Role) -> str:
        return f"http://{self.host}:{self.ports[role]}"

    def api_key(self) -> str | None:
        """The key both servers require, from the environment variable the description names."""
        if self.api_key_env is None:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise ConfigError(
                f"{self.source}: [launch] api_key_env: ${self.api_key_env} is not set"
            )
        return value

    def command(
        self, role: Role, *, python: str | None = None, api_key: str | None = None
    ) -> list[str]:
        """The full argv of one server: shared args identical on both, then the side's own."""
        argv = [python or self.python, "-m", *shlex.split(self.server_module)]
        argv += ["--model-path", self.model_path]
        if self.revision is not None:
            argv += ["--revision", self.revision]
        argv += ["--host", self.host, "--port", str(self.ports[role])]
        argv += ["--mem-fraction-static", str(self.memory[role])]
        argv += render_args(self.shared)
        argv += render_args(self.baseline_args if role is Role.BASELINE else self.candidate_args)
        if api_key is not None:
            argv += ["--api-key", api_key]
        return argv

    def shown_command(self, role: Role, *, python: str | None = None) -> str:
        """The command as printed and recorded: any API key replaced by ``[redacted]``."""
        key = REDACTED if self.api_key_env else None
        return shlex.join(redact_argv(self.command(role, python=python, api_key=key)))


def render_args(args: Mapping[str, ArgValue]) -> list[str]:
    """``{"enable-metrics": True, "cuda-graph-bs": [1, 2]}`` -> ``--enable-metrics --cuda-graph-bs 1 2``."""
    argv: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is False:
            continue
        elif isinstance(value, list):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
    return argv


def _table(data: Mapping[str, Any], name: str, source: str) -> dict[str, Any]:
    value = data.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: [{name}] must be a table")
    return value


def _known(table: Mapping[str, Any], allowed: frozenset[str], where: str, source: str) -> None:
    for key in table:
        if key.replace("-", "_") not in allowed:
            known = ", ".join(sorted(allowed))
            raise ConfigError(f"{source}: unknown key {key!r} in {where} (known: {known})")


def _server_args(table: Mapping[str, Any], where: str, source: str) -> dict[str, ArgValue]:
    args: dict[str, ArgValue] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if not name.replace("_", "").isalnum():
            raise ConfigError(f"{source}: {where} {key!r} is not an SGLang flag name")
        if name in _OWN_SECTION:
            raise ConfigError(f"{source}: {where} {key!r}: set it in {_OWN_SECTION[name]}")
        if isinstance(value, dict) or (
            isinstance(value, list) and any(isinstance(v, list | dict) for v in value)
        ):
            raise ConfigError(f"{source}: {where} {key!r}: a value, or a list of values")
        args[name.replace("_", "-")] = value
    return args


def _side_args(
    data: Mapping[str, Any], shared: Mapping[str, ArgValue], source: str
) -> tuple[dict[str, ArgValue], dict[str, ArgValue]]:
    baseline = _server_args(_table(data, "baseline", source), "[baseline]", source)
    candidate = _server_args(_table(data, "candidate", source), "[candidate]", source)
    for where, args in (("[baseline]", baseline), ("[candidate]", candidate)):
        for key in args:
            if key in shared:
                raise ConfigError(f"{source}: {where} {key!r} is also in [shared]; give it once")
    for key in baseline:
        if is_speculative_key(key.replace("-", "_")):
            raise ConfigError(
                f"{source}: [baseline] {key!r}: the baseline runs without speculation"
            )
    for key in candidate:
        name = key.replace("-", "_")
        if not is_speculative_key(name) and name not in _PLACEMENT:
            raise ConfigError(
                f"{source}: [candidate] {key!r} is not a speculative setting; put it in [shared]"
                " so both servers get it (or the pair is not a matched baseline)"
            )
    if "speculative-algorithm" not in candidate:
        raise ConfigError(f"{source}: [candidate] must set speculative-algorithm")
    return baseline, candidate


def _per_role(data: Mapping[str, Any], name: str, kind: type, source: str) -> dict[str, Any]:
    table = _table(data, name, source)
    _known(table, frozenset(str(r) for r in Role), f"[{name}]", source)
    out: dict[str, Any] = {}
    for role in Role:
        value = table.get(str(role))
        if value is None or isinstance(value, bool) or not isinstance(value, kind | int):
            raise ConfigError(f"{source}: [{name}] {role}: required, a number")
        out[str(role)] = kind(value)
    return out


def _shared(data: Mapping[str, Any], source: str) -> dict[str, ArgValue]:
    shared = _server_args(_table(data, "shared", source), "[shared]", source)
    for key in _REQUIRED_SHARED:
        flag = key.replace("_", "-")
        if flag not in shared:
            raise ConfigError(f"{source}: [shared] must set {flag} (same value on both servers)")
    return shared


def _launch_options(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    launch = _table(data, "launch", source)
    _known(launch, _LAUNCH_KEYS, "[launch]", source)
    env = launch.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ConfigError(f"{source}: [launch] env: a table of strings")
    return {**{k: launch[k] for k in _LAUNCH_KEYS - {"env"} if k in launch}, "env": dict(env)}


def load_description(path: str | Path) -> LaunchDescription:
    """Read and validate a description file; ConfigError names the file and the key."""
    source = str(path)
    data = load_toml_table(path)
    _known(data, _TOP, "the top level", source)
    model = _table(data, "model", source)
    _known(model, frozenset({"path", "revision"}), "[model]", source)
    if not isinstance(model.get("path"), str) or not model["path"]:
        raise ConfigError(f"{source}: [model] path: required")
    if not isinstance(data.get("validated", False), bool):
        raise ConfigError(f"{source}: validated: true or false")
    shared = _shared(data, source)
    baseline, candidate = _side_args(data, shared, source)
    declared = _table(data, "declared", source)
    _known(declared, frozenset({*FACT_KEYS, "notes"}), "[declared]", source)
    try:
        return LaunchDescription(
            source=source,
            name=str(data.get("name") or Path(source).stem),
            model_path=model["path"],
            revision=model.get("revision"),
            shared=shared,
            baseline_args=baseline,
            candidate_args=candidate,
            memory=_per_role(data, "memory", float, source),
            ports=_per_role(data, "ports", int, source),
            validated=data.get("validated", False),
            declared=dict(declared),
            **_launch_options(data, source),
        )
    except TypeError as exc:
        raise ConfigError(f"{source}: {exc}") from exc
